package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/internal/store"
)

// River's producer fetches again when a job's slot frees after a fetch that
// filled every slot, for as many slots as are free at that moment. Workflow
// tasks that commit in one group free their slots together, and the first
// of them triggers a fetch for the slots free then; the others free theirs
// while it runs, and the producer waits for its next trigger (another job
// done, an insert's notification, its poll interval) with their slots idle.
// A group that frees more of a queue's slots than were free besides the
// first task's finds them nearly all held: River's last fetch most likely
// filled them, and it leaves those slots idle. Such a group announces the
// queue on River's insert channel once it committed, as a client announces
// the jobs it queued: every producer of the queue (this worker's, others')
// fetches again, once River's FetchCooldown allows. A group that frees no
// more than that finds slots that stayed free: River's last fetch found the
// queue drained, and the next jobs' insert notification fetches for every
// free slot. Announcing after every group instead cost each worker process
// a fetch for every other process's group (decision 0043). The rule is a
// heuristic: it sees the slots held, not River's last fetch.

// refetcher announces queues on River's insert channel, through the
// worker's notifier, and counts the River jobs that hold each queue's slots.
type refetcher struct {
	river.MiddlewareDefaults

	mu      sync.Mutex
	channel string // River's insert channel, once resolved

	// A queue's jobs running here: inside the middleware, so slightly
	// fewer than the slots River counts them in, from fetch to completion.
	held  map[string]*atomic.Int64
	slots map[string]int // a queue's MaxWorkers
}

var _ rivertype.WorkerMiddleware = (*refetcher)(nil)

func newRefetcher(queues map[string]river.QueueConfig) *refetcher {
	f := &refetcher{held: make(map[string]*atomic.Int64, len(queues)), slots: make(map[string]int, len(queues))}
	for queue, config := range queues {
		f.held[queue], f.slots[queue] = new(atomic.Int64), config.MaxWorkers
	}
	return f
}

// Work counts the job's slot while it runs. It is River's WorkerMiddleware
// hook.
func (f *refetcher) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if held := f.held[job.Queue]; held != nil {
		held.Add(1)
		defer held.Add(-1)
	}
	return doInner(ctx)
}

// starved returns the queues whose slots tasks (a group's fetched tasks,
// still holding theirs) find nearly all held: they free more of them than
// are free now, plus one.
func (f *refetcher) starved(tasks []string) []string {
	var queues []string
	for _, queue := range slices.Compact(slices.Sorted(slices.Values(tasks))) {
		held := f.held[queue]
		if held == nil {
			continue
		}
		freeing := 0
		for _, q := range tasks {
			if q == queue {
				freeing++
			}
		}
		if free := f.slots[queue] - int(held.Load()); freeing > free+1 {
			queues = append(queues, queue)
		}
	}
	return queues
}

// refetch announces, each once, the queues of tasks that starve (see
// refetcher.starved) on River's insert channel.
func (w *Worker) refetch(ctx context.Context, tasks []string) {
	queues := w.refetches.starved(tasks)
	if len(queues) == 0 {
		return
	}
	channel, err := w.insertChannel(ctx)
	if err != nil {
		w.config.Logger.WarnContext(ctx, "weir: announcing freed task slots failed; River fetches on its next trigger", slog.String("error", err.Error()))
		return
	}
	for _, queue := range queues {
		w.notifier.Notify(channel, fmt.Sprintf("{\"queue\": %q}", queue)) // River's payload
	}
}

// insertChannel returns River's insert channel, resolved once.
func (w *Worker) insertChannel(ctx context.Context) (string, error) {
	w.refetches.mu.Lock()
	defer w.refetches.mu.Unlock()
	if w.refetches.channel == "" {
		channel, err := w.store.RiverChannel(ctx, w.pool, store.RiverInsertTopic)
		if err != nil {
			return "", err
		}
		w.refetches.channel = channel
	}
	return w.refetches.channel, nil
}
