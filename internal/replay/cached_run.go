package replay

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay/coroutine"
)

// ErrCachedRunMismatch is matched by the error of [CachedRun.Continue] when
// the history it is given is not the one the cached run's code stands at:
// events were appended that it did not decide, or some are missing.
var ErrCachedRunMismatch = errors.New("replay: the cached run does not stand at the end of this history")

// CachedRun is a run's workflow code kept alive between its tasks (what
// Temporal calls sticky execution). [Start] runs a task as [Execute] does
// and keeps the code's coroutines where the task left them, blocked;
// [CachedRun.Continue] runs the run's next task from there, without
// replaying the history: a task costs what its own inputs and commands
// cost, not what the whole history does.
//
// A cached run stands at the history its tasks decided, ending at event
// NextEventID-1. Its caller must give it only that history (the events it
// decided, committed) and the next task's inputs; a task whose events were
// not committed leaves it ahead of the history, so the caller closes it
// and replays ([Execute] or [Start]) instead. Continue checks the
// history's length and its last event's type against what it decided, as
// a second guard.
//
// A CachedRun is not safe for concurrent use. Close it when done with it:
// its coroutines are goroutines, and closing unwinds them (running the
// workflow code's deferred calls, as [Execute] does after every task). One
// left unreachable is closed once the garbage collector finds it.
type CachedRun struct {
	cleanup runtime.Cleanup
	closed  bool
	e       *engine
	last    history.EventType // of the last event it decided, NextEventID-1
	next    int64
}

// Start runs one workflow task, as [Execute] does, and returns with its
// outcome the cached run that continues the run from it. It is nil
// when the task ended the run (Outcome.Completed) or failed.
func Start(ctx context.Context, def *Definition, params *ExecuteParams) (*Outcome, *CachedRun, error) {
	out := &Outcome{}
	s, err := StartInto(ctx, def, params, out)
	if err != nil {
		return nil, nil, err
	}
	return out, s, nil
}

// StartInto is Start, writing the task's outcome over out (the caller's:
// the cached run keeps no reference to it); out is to be ignored when it
// fails.
func StartInto(ctx context.Context, def *Definition, params *ExecuteParams, out *Outcome) (s *CachedRun, err error) {
	if params.Now.IsZero() {
		return nil, errors.New("replay: ExecuteParams.Now is required")
	}
	e, err := newEngine(ctx, def, params)
	if err != nil {
		return nil, err
	}
	defer func() {
		if s == nil { // failed, ended the run, or panicked (outside workflow code)
			e.sched.Close()
		}
	}()
	if err := e.execute(params, out); err != nil || out.Completed {
		return nil, err
	}
	s = &CachedRun{e: e, next: int64(len(params.History)+len(out.Events)) + 1}
	s.decided(out)
	s.cleanup = runtime.AddCleanup(s, func(sched *coroutine.Scheduler) { go sched.Close() }, &e.sched)
	return s, nil
}

// decided notes the task that just ran, and lets go of what the engine
// kept of its outcome: between tasks the cached run holds only the code's
// state (the caller has the outcome and the history).
func (s *CachedRun) decided(out *Outcome) {
	s.last = out.Events[len(out.Events)-1].Type
	e := s.e
	e.events, e.activities = nil, nil // the caller has them
	if r := e.rare; r != nil {
		r.children, r.timers, r.canceledActivities, r.canceledTimers = nil, nil, nil, nil
		r.rejectedUpdates, r.deferredInputs = nil, nil
	}
}

// NextEventID is the ID of the event the cached run's next task appends
// first: its history holds the events before it. It is 0 once it is
// closed.
func (s *CachedRun) NextEventID() int64 {
	if s == nil || s.closed {
		return 0
	}
	return s.next
}

// Continue runs the run's next workflow task from where it stands, as [Execute]
// would on params.History: it delivers params.Inputs, runs the code until
// every coroutine is blocked or it returns, and returns the events to
// append. params.History must be the cached run's history (NextEventID-1
// events, ending with those of its last task), or its last events: a
// cached run reads only its last event, whose ID and type are checked (a
// mismatch is an error matching [ErrCachedRunMismatch]).
// params.Codec, Logger, DeadlockTimeout and the identity in Info are the
// cached run's, from Start; Info.TaskAttempt, Inputs, Now and MaxPayloadBytes
// are the task's. When Continue fails, or the task ends the run, the
// cached run closes.
func (s *CachedRun) Continue(ctx context.Context, params *ExecuteParams) (*Outcome, error) {
	return s.ContinueInto(ctx, params, &Outcome{})
}

// ContinueInto is Continue, writing the task's outcome over out (the
// caller's: the cached run keeps no reference to it), which it returns
// unless it fails.
func (s *CachedRun) ContinueInto(ctx context.Context, params *ExecuteParams, out *Outcome) (*Outcome, error) {
	switch {
	case s == nil || s.closed:
		return nil, errors.New("replay: Continue on a closed CachedRun")
	case params.Now.IsZero():
		return nil, errors.New("replay: ExecuteParams.Now is required")
	case nextEventID(params.History) != s.next:
		s.Close()
		return nil, fmt.Errorf("%w: it stands at event %d, the history has %d events", ErrCachedRunMismatch, s.next-1, nextEventID(params.History)-1)
	case params.History[len(params.History)-1].Type != s.last:
		s.Close()
		return nil, fmt.Errorf("%w: its event %d is %s, the history's %s", ErrCachedRunMismatch, s.next-1, s.last, params.History[len(params.History)-1].Type)
	}
	done := false
	defer func() {
		if !done { // failed, ended the run, or panicked (outside workflow code)
			s.Close()
		}
	}()
	if err := s.e.continueTask(ctx, params, out); err != nil {
		return nil, err
	}
	if out.Completed {
		return out, nil
	}
	done = true
	s.next += int64(len(out.Events))
	s.decided(out)
	return out, nil
}

// Close unwinds the cached run's coroutines. It is safe to call more than once,
// and on a nil CachedRun.
func (s *CachedRun) Close() {
	if s == nil || s.closed {
		return
	}
	s.closed = true
	s.cleanup.Stop()
	s.e.sched.Close()
}

// continueTask opens a new task on an engine whose code stands where its
// last task (live) left it: what execute does after replaying the history.
func (e *engine) continueTask(ctx context.Context, params *ExecuteParams, out *Outcome) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.ctx, e.maxPayloadBytes, e.resultType = ctx, params.MaxPayloadBytes, params.ActivityResultType
	e.codeRan = true
	return e.decide(nil, params, out)
}
