package fencing

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

type userKey struct{}

// workContext is an attempt's work context as a scenario drives it: the
// context Worker.Work sees and the attempt's cancel.
type workContext struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	cleanup context.CancelFunc // nil: none
}

// stdlibWork is the pair the attempt context replaces: a cancel context
// with a cause and, for a deadline, a context derived with WithDeadline.
func stdlibWork(parent context.Context, deadline time.Time) workContext {
	ctx, cancel := context.WithCancelCause(parent)
	w := workContext{ctx: ctx, cancel: cancel}
	if !deadline.IsZero() {
		var cancelDeadline context.CancelFunc
		w.ctx, cancelDeadline = context.WithDeadline(ctx, deadline)
		w.cleanup = cancelDeadline
	}
	return w
}

func attemptWork(t *testing.T) func(context.Context, time.Time) workContext {
	return func(parent context.Context, deadline time.Time) workContext {
		st := &attemptState{}
		st.start(parent)
		w := workContext{ctx: st, cancel: st.cancel}
		if !deadline.IsZero() {
			w.ctx, w.cleanup = WithAttemptDeadline(st, deadline)
			require.Same(t, st, w.ctx, "the attempt context takes the deadline")
		}
		return w
	}
}

// observe waits (bounded) for ctx to end, if it can, and reports what a
// caller sees of it.
func observe(ctx context.Context) string {
	if done := ctx.Done(); done != nil {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			return "still running"
		}
	}
	d, ok := ctx.Deadline()
	return fmt.Sprintf("err=%v cause=%v deadline=%v/%v value=%v", ctx.Err(), context.Cause(ctx), d.UnixNano(), ok, ctx.Value(userKey{}))
}

// children derives from ctx what Worker.Work's code would, and returns
// how to observe each once ctx has ended; their cancels go to cancels.
func children(ctx context.Context, far time.Time, cancels *[]context.CancelFunc) []func() string {
	withCancel, cancel1 := context.WithCancel(ctx)
	withCause, cancel2 := context.WithCancelCause(ctx)
	withDeadline, cancel3 := context.WithDeadline(ctx, far)
	valued, cancel4 := context.WithCancel(context.WithValue(ctx, userKey{}, "child"))
	grandchild, cancel5 := context.WithCancel(withCancel)
	*cancels = append(*cancels, cancel1, func() { cancel2(nil) }, cancel3, cancel4, cancel5)
	without := context.WithoutCancel(ctx)
	called := make(chan struct{})
	context.AfterFunc(ctx, func() { close(called) })
	afterFunc := func() string {
		select {
		case <-called:
			return "called"
		case <-time.After(5 * time.Second):
			return "not called"
		}
	}
	observeWithout := func() string {
		return fmt.Sprintf("done=%v err=%v value=%v", without.Done() == nil, without.Err(), without.Value(userKey{}))
	}
	return []func() string{
		func() string { return observe(withCancel) }, func() string { return observe(withCause) },
		func() string { return observe(withDeadline) }, func() string { return observe(valued) },
		func() string { return observe(grandchild) }, observeWithout, afterFunc,
	}
}

type ctxScenario struct {
	name     string
	parent   func(now time.Time) (context.Context, context.CancelCauseFunc)
	deadline time.Duration // from now; 0: none
	event    func(w workContext, cancelParent context.CancelCauseFunc)
}

var (
	errRemote = errors.New("cancelled remotely")
	errLost   = errors.New("lease lost")
)

func cancellableParent(time.Time) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), userKey{}, "parent"))
	return ctx, cancel
}

func ctxScenarios() []ctxScenario {
	wait := func(workContext, context.CancelCauseFunc) {}
	return []ctxScenario{
		{name: "cancelled with a cause", parent: cancellableParent, deadline: time.Hour,
			event: func(w workContext, _ context.CancelCauseFunc) { w.cancel(errLost) }},
		{name: "cancelled with a cause, no deadline", parent: cancellableParent,
			event: func(w workContext, _ context.CancelCauseFunc) { w.cancel(errLost) }},
		{name: "cancelled without a cause", parent: cancellableParent, deadline: time.Hour,
			event: func(w workContext, _ context.CancelCauseFunc) { w.cancel(nil) }},
		{name: "deadline", parent: cancellableParent, deadline: 100 * time.Millisecond, event: wait},
		{name: "deadline past at creation", parent: cancellableParent, deadline: -time.Second, event: wait},
		{name: "parent cancelled with a cause", parent: cancellableParent, deadline: time.Hour,
			event: func(_ workContext, cancelParent context.CancelCauseFunc) { cancelParent(errRemote) }},
		{name: "parent cancelled, no deadline", parent: cancellableParent,
			event: func(_ workContext, cancelParent context.CancelCauseFunc) { cancelParent(nil) }},
		{name: "parent's deadline first", deadline: time.Hour, event: wait,
			parent: func(now time.Time) (context.Context, context.CancelCauseFunc) {
				ctx, cancel := context.WithDeadlineCause(context.Background(), now.Add(100*time.Millisecond), errRemote)
				return ctx, func(error) { cancel() }
			}},
		{name: "parent ended before", deadline: time.Hour, event: wait,
			parent: func(now time.Time) (context.Context, context.CancelCauseFunc) {
				ctx, cancel := cancellableParent(now)
				cancel(errRemote)
				return ctx, cancel
			}},
		{name: "parent never ends", deadline: 100 * time.Millisecond, event: wait,
			parent: func(time.Time) (context.Context, context.CancelCauseFunc) {
				return context.WithValue(context.Background(), userKey{}, "parent"), func(error) {}
			}},
	}
}

// run plays the scenario on a work context made by mk, children derived
// before and after the event, and returns what was observed.
func (sc ctxScenario) run(now time.Time, mk func(context.Context, time.Time) workContext) []string {
	parent, cancelParent := sc.parent(now)
	var deadline time.Time
	if sc.deadline != 0 {
		deadline = now.Add(sc.deadline)
	}
	far := now.Add(2 * time.Hour)
	w := mk(parent, deadline)
	atCreation := fmt.Sprintf("at creation: err=%v", w.ctx.Err())
	var cancels []context.CancelFunc
	before := children(w.ctx, far, &cancels)
	sc.event(w, cancelParent)
	seen := []string{atCreation, observe(w.ctx)}
	after := children(w.ctx, far, &cancels)
	for _, o := range append(before, after...) {
		seen = append(seen, o())
	}
	for _, cancel := range cancels {
		cancel()
	}
	if w.cleanup != nil {
		w.cleanup()
	}
	cancelParent(nil)
	return seen
}

// TestAttemptContextMatchesStdlib: the attempt context, with or without a
// deadline of its own, is seen by Worker.Work's code, and by contexts it
// derives, as the standard library's cancel context with a cause and the
// context derived from it with WithDeadline: Err, context.Cause, Deadline,
// values, and when derived contexts end.
func TestAttemptContextMatchesStdlib(t *testing.T) {
	t.Parallel()
	for _, sc := range ctxScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			// Both at once, with the same times: a deadline is in the
			// future at both creations.
			now := time.Now()
			wantC := make(chan []string)
			go func() { wantC <- sc.run(now, stdlibWork) }()
			got := sc.run(now, attemptWork(t))
			require.Equal(t, <-wantC, got)
		})
	}
}

// TestAttemptContextNoGoroutines: contexts derived from an attempt context
// whose parent can end start no goroutine, and once they end the
// attempt context holds none of them.
func TestAttemptContextNoGoroutines(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	ignore := goleak.IgnoreCurrent()
	st := &attemptState{}
	st.start(parent)
	ctx, _ := WithAttemptDeadline(st, time.Now().Add(time.Hour))
	for range 50 {
		child, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(child, func() {})
		_, cancelTimer := context.WithTimeout(ctx, time.Hour)
		require.NoError(t, goleak.Find(ignore))
		stop()
		cancelTimer()
		cancel()
	}
	st.ctxMu.Lock()
	require.Empty(t, st.afters, "ended children unregister")
	st.ctxMu.Unlock()
	st.cancel(nil)
	require.NoError(t, goleak.Find(ignore))
}

// TestWithAttemptDeadlineElsewhere: a context that is not an attempt's
// work context itself, or one with a deadline of its own already, gets a
// derived context, as context.WithDeadline gives it.
func TestWithAttemptDeadlineElsewhere(t *testing.T) {
	t.Parallel()
	d := time.Now().Add(time.Hour)
	st := &attemptState{}
	st.start(context.Background())
	defer st.cancel(nil)
	valued := context.WithValue(st, userKey{}, "v")
	for _, ctx := range []context.Context{context.Background(), valued} {
		got, cancel := WithAttemptDeadline(ctx, d)
		require.NotSame(t, st, got)
		deadline, ok := got.Deadline()
		require.True(t, ok)
		require.Equal(t, d, deadline)
		cancel()
		require.ErrorIs(t, got.Err(), context.Canceled)
	}
	require.NoError(t, st.Err())
	_, _ = WithAttemptDeadline(st, d)
	later, cancel := WithAttemptDeadline(st, d.Add(time.Minute))
	require.NotSame(t, st, later)
	deadline, _ := later.Deadline()
	require.Equal(t, d, deadline, "the earlier deadline")
	cancel()
	require.NoError(t, st.Err(), "cancelling the derived context leaves the attempt's")
}
