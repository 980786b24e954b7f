package worker

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/weirhq/weir/internal/store"
)

// River's producer fetches again when a job's slot frees after a fetch that
// filled every slot, for as many slots as are free at that moment. Workflow
// tasks that commit in one group free their slots together, and the first
// of them triggers a fetch for that one slot; the others free theirs while
// it runs, and the producer waits for its next trigger (another job done,
// an insert's notification, its poll interval) with its slots idle. So a
// group that committed several fetched tasks announces their queues on
// River's insert channel once it committed, as a client announces the jobs
// it queued: every producer of those queues (this worker's, others') fetches
// again, once River's FetchCooldown allows. A lone task needs none: River's
// own trigger fetches for its slot.

// refetchTasks is how many fetched tasks a group must commit for the
// worker to announce their queues.
const refetchTasks = 2

// refetcher announces queues on River's insert channel, through the
// worker's notifier.
type refetcher struct {
	mu      sync.Mutex
	channel string // River's insert channel, once resolved
}

// refetch announces queues (each once) on River's insert channel.
func (w *Worker) refetch(ctx context.Context, queues []string) {
	if len(queues) == 0 {
		return
	}
	channel, err := w.insertChannel(ctx)
	if err != nil {
		w.config.Logger.WarnContext(ctx, "weir: announcing freed task slots failed; River fetches on its next trigger", slog.String("error", err.Error()))
		return
	}
	slices.Sort(queues)
	for _, queue := range slices.Compact(queues) {
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
