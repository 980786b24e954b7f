package worker

import (
	"context"
	"time"
)

// StartOnSchemaBehind starts w without refusing a schema behind this build,
// for tests of a migration's rollout that start a worker before the
// migration.
func StartOnSchemaBehind(ctx context.Context, w *Worker) error {
	w.mu.Lock()
	w.schemaBehindOK = true
	w.mu.Unlock()
	return w.Start(ctx)
}

// SetBackfillSlice makes each attempt of w's backfill jobs start batches for
// d (0: one batch an attempt), before Start.
func SetBackfillSlice(w *Worker, d time.Duration) { w.backfillSlice = d }

// CacheStats returns the running totals of w's history cache.
func CacheStats(w *Worker) cacheStats { return w.histories.statsNow() }
