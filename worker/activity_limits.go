package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/weirhq/weir/fencing"
)

// limitAttempt tells the fencing layer an activity attempt's own timeouts
// (its start-to-close timeout, or the activity's; its heartbeat timeout), so
// that an attempt whose code ignores its context past one of them is
// recovered after that timeout, as one whose process died is, and not only
// after River's job timeout plus its stuck threshold. An attempt that has
// heartbeat and then stops heartbeating for longer than its lease is
// recovered too (activity.Heartbeat). A failure to tell it is logged: the
// attempt then runs under River's deadline alone.
func (w *Worker) limitAttempt(ctx context.Context, timeout time.Duration, meta *activityMeta) {
	err := fencing.LimitAttempt(ctx, fencing.AttemptLimits{
		HeartbeatTimeout:   time.Duration(meta.HeartbeatTimeout),
		HeartbeatsRequired: true,
		Timeout:            timeout,
	})
	if err != nil && !errors.Is(err, fencing.ErrNoLease) {
		w.config.Logger.WarnContext(ctx, "weir: telling the fencing layer an activity attempt's timeouts failed",
			slog.String("error", err.Error()))
	}
}
