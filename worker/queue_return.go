package worker

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/riverqueue/river"
)

// queueReturns returns activities of namespaces a worker does not serve to
// their queue (the kind is registered here too, in a queue this worker
// serves): each is snoozed for one to two seconds, then announced with
// River's insert notification for its queue, so that every producer of the
// queue fetches at once and the right namespace's workers have the same
// chance as this one.
//
// A snoozed job comes back available with no notification of River's, so
// without ours only fetch polls would find it, and pollers in phase
// (workers started together) would take it in the order of their phases:
// the worker that returned it, a few milliseconds ahead, round after
// round. The notification is a wake-up only: if it is lost, polls still
// find the job.
//
// Notifications are coalesced per queue into slots of returnSlot: however
// many jobs a worker returns, a queue gets at most one notification per
// slot, so a namespace with no live worker costs its queue a few wake-ups a
// second, not one per job. Pending ones are dropped when the worker stops.
type queueReturns struct {
	w *Worker

	mu      sync.Mutex
	pending map[returnSlotKey]*time.Timer
	stopped bool
}

type returnSlotKey struct {
	queue string
	slot  int64 // due time, in returnSlot units since the epoch
}

// returnSlot is the granularity of return notifications.
const returnSlot = 250 * time.Millisecond

// returnNotifyDelay is how long after its slot ends a returned job is
// announced: River's executor computes the snooze's scheduled_at a little
// after handBack draws it, and writes it through its batched completer.
const returnNotifyDelay = 100 * time.Millisecond

func newQueueReturns(w *Worker) *queueReturns {
	return &queueReturns{w: w, pending: make(map[returnSlotKey]*time.Timer)}
}

// returnToQueue is what the attempt of a foreign namespace's activity
// returns: a snooze of one to two seconds, drawn anew each time, so that
// returned jobs do not come back in step.
func (h *queueReturns) returnToQueue(queue string) error {
	snooze := time.Second + rand.N(time.Second)
	h.announce(queue, time.Now().Add(snooze))
	return river.JobSnooze(snooze)
}

// announce notifies queue's producers once a job available from due on
// can be fetched (just after due's slot ends), so that it does not wait
// for a fetch poll. Jobs retried early (failRetry) use it too.
func (h *queueReturns) announce(queue string, due time.Time) {
	key := returnSlotKey{queue: queue, slot: due.UnixNano()/int64(returnSlot) + 1} // the slot's end is after due
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.pending[key]; !ok && !h.stopped {
		at := time.Unix(0, key.slot*int64(returnSlot)).Add(returnNotifyDelay)
		h.pending[key] = time.AfterFunc(time.Until(at), func() { h.notify(key) })
	}
}

func (h *queueReturns) notify(key returnSlotKey) {
	h.mu.Lock()
	_, ok := h.pending[key]
	delete(h.pending, key)
	h.mu.Unlock()
	if !ok {
		return // stopped meanwhile
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.w.notifyQueue(ctx, key.queue); err != nil {
		h.w.config.Logger.DebugContext(ctx, "weir: could not announce returned activities", slog.String("queue", key.queue), slog.String("error", err.Error()))
	}
}

// stop drops the pending notifications; returns after it announce
// nothing (polls find the jobs).
func (h *queueReturns) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	for key, timer := range h.pending {
		timer.Stop()
		delete(h.pending, key)
	}
}
