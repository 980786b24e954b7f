package worker

import (
	"time"
)

// SetBackfillSlice makes each attempt of w's backfill jobs start batches for
// d (0: one batch an attempt), before Start.
func SetBackfillSlice(w *Worker, d time.Duration) { w.backfillSlice = d }

// CacheStats returns the running totals of w's history cache.
func CacheStats(w *Worker) cacheStats { return w.histories.statsNow() }
