package workflow

import (
	"fmt"
	"time"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay/env"
)

// NewTimer starts a durable timer and returns a future that becomes ready
// when d has passed in workflow time (measured from [Now]); its value is the
// time the timer was due. The timer survives worker restarts: the worker
// delivers its firing like an activity's outcome. When ctx is cancelled
// before it fires, the timer is cancelled and the future fails with
// [ErrCanceled]. A d of zero or less gives a future that is ready at once,
// and nothing is recorded.
func NewTimer(ctx Context, d time.Duration) Future[time.Time] {
	e := envOf(ctx)
	if err := ctx.Err(); err != nil {
		return readyFuture[time.Time](fmt.Errorf("timer not started: %w", err))
	}
	if d <= 0 {
		return &settableFuture[time.Time]{ready: true, value: e.Now()}
	}
	attrs := &history.TimerStartedAttributes{Duration: history.Duration(d), FireAt: e.Now().Add(d)}
	p := e.StartTimer(attrs, ctx)
	return &promiseFuture[time.Time]{promise: p, decode: func(p *env.Promise, _ env.Codec, fired *time.Time) error {
		switch p.Outcome().(type) {
		case *history.TimerFiredAttributes:
			*fired = attrs.FireAt
			return nil
		case *history.TimerCanceledAttributes:
			return fmt.Errorf("timer of event %d: %w", p.EventID, ErrCanceled)
		}
		return fmt.Errorf("timer of event %d: unexpected outcome %T", p.EventID, p.Outcome())
	}}
}

// Sleep blocks the calling coroutine for d of workflow time, durably (see
// [NewTimer]). It returns [ErrCanceled] if ctx is cancelled first.
func Sleep(ctx Context, d time.Duration) error {
	_, err := NewTimer(ctx, d).Get(ctx)
	return err
}
