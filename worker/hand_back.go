package worker

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/riverqueue/river"
)

// handBacks returns activities of namespaces a worker does not serve to
// their queue (the kind is registered here too, in a queue this worker
// serves): each is snoozed for one to two seconds, then announced with
// River's insert notification for its queue, so that every producer of the
// queue fetches at once and the right namespace's workers have the same
// chance as this one.
//
// A snoozed job comes back available with no notification of River's, so
// without ours only fetch polls would find it (every second, River's
// FetchPollInterval, plus up to 10% jitter), and pollers in phase (workers
// started together) take it in the order of their phases: the hander, a few
// milliseconds ahead, took it back round after round (seen: 47 hand-backs in
// 50 s, and 14 in a row after the snooze was randomized). The notification
// is a wake-up only: if it is lost (this process stops), polls still find
// the job.
//
// Notifications are coalesced per queue into slots of handBackSlot: however
// many jobs a worker hands back, a queue gets at most one notification per
// slot, so a namespace with no live worker costs its queue a few wake-ups a
// second, not one per job. Pending ones are dropped when the worker stops.
type handBacks struct {
	w *Worker

	mu      sync.Mutex
	pending map[handBackSlotKey]*time.Timer
	stopped bool
}

type handBackSlotKey struct {
	queue string
	slot  int64 // due time, in handBackSlot units since the epoch
}

// handBackSlot is the granularity of hand-back notifications.
const handBackSlot = 250 * time.Millisecond

// handBackNotifyDelay is how long after its slot ends a handed-back job is
// announced: River's executor computes the snooze's scheduled_at a little
// after handBack draws it, and writes it through its batched completer.
const handBackNotifyDelay = 100 * time.Millisecond

func newHandBacks(w *Worker) *handBacks {
	return &handBacks{w: w, pending: make(map[handBackSlotKey]*time.Timer)}
}

// handBack is what the attempt of a foreign namespace's activity returns.
func (h *handBacks) handBack(queue string) error {
	snooze := foreignNamespaceSnooze()
	h.announce(queue, time.Now().Add(snooze))
	return river.JobSnooze(snooze)
}

// announce notifies queue's producers once a job available from due on
// can be fetched (just after due's slot ends), so that it does not wait
// for a fetch poll. Jobs retried early (failRetry) use it too.
func (h *handBacks) announce(queue string, due time.Time) {
	key := handBackSlotKey{queue: queue, slot: due.UnixNano()/int64(handBackSlot) + 1} // the slot's end is after due
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.pending[key]; !ok && !h.stopped {
		at := time.Unix(0, key.slot*int64(handBackSlot)).Add(handBackNotifyDelay)
		h.pending[key] = time.AfterFunc(time.Until(at), func() { h.notify(key) })
	}
}

func (h *handBacks) notify(key handBackSlotKey) {
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
		h.w.config.Logger.DebugContext(ctx, "weir: could not announce handed-back activities", slog.String("queue", key.queue), slog.String("error", err.Error()))
	}
}

// stop drops the pending notifications; hand-backs after it announce
// nothing (polls find the jobs).
func (h *handBacks) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	for key, timer := range h.pending {
		timer.Stop()
		delete(h.pending, key)
	}
}

// foreignNamespaceSnooze is how long an activity of a namespace a worker
// does not serve waits before it is offered again: one to two seconds,
// drawn anew each time, so hand-backs of several jobs do not come back in
// step.
func foreignNamespaceSnooze() time.Duration {
	return time.Second + rand.N(time.Second)
}
