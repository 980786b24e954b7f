package worker

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/task"
	"github.com/weirhq/weir/internal/timer"
)

// TestEngineRetry: the engine's own jobs retry soon however many attempts
// they lost, so a timer or a workflow task that lost a few leases to faults
// is not left waiting for River's attempt⁴-second backoff (a full-size chaos
// run found timers four minutes late).
func TestEngineRetry(t *testing.T) {
	t.Parallel()
	for _, attempt := range []int{1, 2, 4, 8, 25, 1000} {
		before := time.Now()
		timerNext := (&timerWorker{}).NextRetry(&river.Job[timer.Args]{JobRow: jobRow(attempt)})
		taskNext := (&taskWorker{}).NextRetry(&river.Job[task.Args]{JobRow: jobRow(attempt)})
		for _, next := range []time.Time{timerNext, taskNext} {
			require.True(t, next.After(before), "attempt %d", attempt)
			require.LessOrEqual(t, next.Sub(before), task.RetryBackoffMax+time.Second, "attempt %d", attempt)
		}
	}
	require.Less(t, time.Until(engineRetry(1)), time.Second, "the first retry comes at once")
}

func jobRow(attempt int) *rivertype.JobRow { return &rivertype.JobRow{Attempt: attempt} }
