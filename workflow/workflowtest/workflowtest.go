// Package workflowtest runs workflows in memory, without Postgres or River,
// for unit tests of workflow code.
//
// Activities are answered by functions registered with [OnActivity]; they
// complete at once, in the order they were scheduled. Durable timers fire on
// a fake clock that jumps ahead whenever the workflow has nothing else to
// wait for, so a workflow that sleeps for a month finishes in microseconds.
// Signals and a cancel request can be scheduled at points of that clock.
// Every workflow task runs through the real engine and replays the whole
// history first, exactly as in production, so code that isn't deterministic
// fails the test with a *workflow.NonDeterminismError.
//
//	env := workflowtest.New(t, nil)
//	workflowtest.OnActivity(env, func(ctx context.Context, args ChargeArgs) (Charge, error) {
//		return Charge{ID: "ch_1"}, nil
//	})
//	receipt, err := workflowtest.Execute(env, &OrderWorkflow{}, OrderArgs{ID: "o-1"})
package workflowtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

// MaxTasksDefault bounds the workflow tasks of one Execute.
const MaxTasksDefault = 10_000

// StartDefault is the fake clock's start, a fixed time so tests are
// reproducible.
var StartDefault = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrBlocked is returned by [Execute] when the workflow waits for something
// that can never come: no activity, timer, signal or cancel request is left.
var ErrBlocked = errors.New("workflowtest: workflow blocked with nothing left to wait for")

// Opts configure an [Env]. The zero value works.
type Opts struct {
	// Logger receives what workflow code logs (never while replaying).
	// Defaults to discarding.
	Logger *slog.Logger

	// MaxTasks bounds the workflow tasks of one Execute. Defaults to
	// MaxTasksDefault.
	MaxTasks int

	// Start is the fake clock's start. Defaults to StartDefault.
	Start time.Time
}

// Env is an in-memory world for one workflow run.
type Env struct {
	activities map[string]func(ctx context.Context, args []byte) ([]byte, error)
	codec      replay.Codec
	def        *replay.Definition // of the last Execute
	events     []scheduledInput
	history    []history.Event
	now        time.Time
	opts       Opts
	tb         testing.TB
}

// scheduledInput is a signal or cancel request due at a time.
type scheduledInput struct {
	at    time.Time
	event history.Event
}

// New returns an Env for tb; opts may be nil. tb may be nil outside tests
// (in an example, say): setup errors then panic.
func New(tb testing.TB, opts *Opts) *Env {
	o := Opts{}
	if opts != nil {
		o = *opts
	}
	o.MaxTasks = cmp.Or(o.MaxTasks, MaxTasksDefault)
	if o.Start.IsZero() {
		o.Start = StartDefault
	}
	return &Env{
		activities: map[string]func(context.Context, []byte) ([]byte, error){},
		codec:      replay.JSONCodec{},
		now:        o.Start,
		opts:       o,
		tb:         tb,
	}
}

// OnActivity answers the activities of type A with fn. An error from fn
// fails the activity at once, as if it had run out of retries; return a
// *workflow.ApplicationError to set its type or details.
func OnActivity[A workflow.ActivityArgs, R any](env *Env, fn func(ctx context.Context, args A) (R, error)) {
	var zero A
	env.activities[zero.Kind()] = func(ctx context.Context, encoded []byte) ([]byte, error) {
		var args A
		if err := env.codec.Decode(encoded, &args); err != nil {
			return nil, fmt.Errorf("workflowtest: decoding args of activity %s as %T: %w", zero.Kind(), args, err)
		}
		result, err := fn(ctx, args)
		if err != nil {
			return nil, err
		}
		return env.codec.Encode(result)
	}
}

// SignalAfter sends a signal when the fake clock has advanced d from its
// start.
func (env *Env) SignalAfter(d time.Duration, args workflow.SignalArgs) {
	encoded, err := env.codec.Encode(args)
	env.check(err)
	env.schedule(d, &history.SignalReceivedAttributes{Kind: args.Kind(), Args: encoded})
}

// CancelAfter asks the run to cancel when the fake clock has advanced d from
// its start.
func (env *Env) CancelAfter(d time.Duration) {
	env.schedule(d, &history.CancelRequestedAttributes{Reason: "workflowtest"})
}

func (env *Env) schedule(d time.Duration, attrs history.Attributes) {
	ev, err := history.NewEvent(0, time.Time{}, attrs)
	env.check(err)
	env.events = append(env.events, scheduledInput{at: env.opts.Start.Add(d), event: ev})
}

func (env *Env) check(err error) {
	switch {
	case err == nil:
	case env.tb == nil:
		panic(fmt.Errorf("workflowtest: %w", err))
	default:
		env.tb.Helper()
		env.tb.Fatalf("workflowtest: %v", err)
	}
}

func (env *Env) context() context.Context {
	if env.tb == nil {
		return context.Background()
	}
	return env.tb.Context()
}

// Now returns the fake clock's time.
func (env *Env) Now() time.Time { return env.now }

// Tasks returns how many workflow tasks the run took (the last run, after
// any continue-as-new).
func (env *Env) Tasks() int {
	n := 0
	for _, ev := range env.history {
		if ev.Type == history.EventWorkflowTaskStarted {
			n++
		}
	}
	return n
}

// Execute runs wf with args to completion and returns its result. A
// workflow that returns an error gives a *workflow.ApplicationError with its
// message and type (what a client would see), and one that ends cancelled an
// error matching workflow.ErrCanceled. A failed workflow task
// (non-determinism, panic, deadlock) is returned as is: unlike in
// production, it is not retried.
func Execute[A workflow.Args, R any](env *Env, wf workflow.Workflow[A, R], args A) (R, error) {
	var zero R
	def := replay.Bind(wf)
	env.def = def
	encoded, err := env.codec.Encode(args)
	if err != nil {
		return zero, fmt.Errorf("workflowtest: encoding args: %w", err)
	}
	started, err := history.NewEvent(0, time.Time{}, &history.WorkflowStartedAttributes{
		Kind: def.Kind, Args: encoded, WorkflowID: "workflowtest", RunID: "workflowtest-run", Generation: 1,
	})
	if err != nil {
		return zero, err
	}
	env.history = nil
	inputs := []history.Event{started}
	var activities []replay.ScheduledActivity
	timers := map[int64]time.Time{}
	for task := 1; ; task++ {
		if task > env.opts.MaxTasks {
			return zero, fmt.Errorf("workflowtest: more than %d workflow tasks", env.opts.MaxTasks)
		}
		out, err := replay.Execute(env.context(), def, &replay.ExecuteParams{
			Codec:   env.codec,
			History: env.history,
			Inputs:  inputs,
			Info:    replay.Info{TaskAttempt: 1},
			Logger:  env.opts.Logger,
			Now:     env.now,
		})
		if err != nil {
			return zero, err
		}
		env.history = append(env.history, out.Events...)
		if next := out.ContinuedAsNew; next != nil {
			if next.Kind != def.Kind {
				return zero, fmt.Errorf("workflowtest: continuing as new as a %q workflow, not %q, isn't supported", next.Kind, def.Kind)
			}
			started, err := history.NewEvent(0, time.Time{}, &history.WorkflowStartedAttributes{
				Kind: def.Kind, Args: next.Args, WorkflowID: "workflowtest", RunID: fmt.Sprintf("workflowtest-run-%d", task), Generation: 1,
			})
			if err != nil {
				return zero, err
			}
			env.history, inputs, activities, timers = nil, []history.Event{started}, nil, map[int64]time.Time{}
			continue
		}
		if out.Completed {
			return result[R](env, def.Kind, out)
		}
		activities = append(activities, out.Activities...)
		activities = slices.DeleteFunc(activities, func(a replay.ScheduledActivity) bool {
			return slices.Contains(out.CanceledActivities, a.EventID)
		})
		for _, t := range out.Timers {
			timers[t.EventID] = t.Attributes.FireAt
		}
		for _, id := range out.CanceledTimers {
			delete(timers, id)
		}

		inputs = env.due()
		if len(activities) > 0 {
			for _, a := range activities {
				inputs = append(inputs, env.runActivity(a))
			}
			activities = nil
			continue
		}
		if len(inputs) > 0 {
			continue
		}
		// Nothing to do now: jump to the next timer or scheduled input.
		next, ok := time.Time{}, false
		for _, at := range timers {
			if !ok || at.Before(next) {
				next, ok = at, true
			}
		}
		for _, s := range env.events {
			if !ok || s.at.Before(next) {
				next, ok = s.at, true
			}
		}
		if !ok {
			return zero, ErrBlocked
		}
		if next.After(env.now) {
			env.now = next
		}
		for _, id := range slices.Sorted(maps.Keys(timers)) {
			if !timers[id].After(env.now) {
				ev, err := history.NewEvent(0, time.Time{}, &history.TimerFiredAttributes{StartedEventID: id})
				if err != nil {
					return zero, err
				}
				inputs = append(inputs, ev)
				delete(timers, id)
			}
		}
		inputs = append(inputs, env.due()...)
	}
}

// Query answers a query on the run of the last [Execute], as it ended (or
// as it stood when Execute returned an error): see workflow.SetQueryHandler.
func Query[R any](env *Env, args workflow.QueryArgs) (R, error) {
	var value R
	if env.def == nil {
		return value, errors.New("workflowtest: Query before Execute")
	}
	encoded, err := env.codec.Encode(args)
	if err != nil {
		return value, fmt.Errorf("workflowtest: encoding query args: %w", err)
	}
	result, err := replay.Query(env.context(), env.def, &replay.QueryParams{
		Args:          encoded,
		ExecuteParams: replay.ExecuteParams{Codec: env.codec, History: env.history},
		Kind:          args.Kind(),
	})
	if err != nil {
		return value, err
	}
	if err := env.codec.Decode(result, &value); err != nil {
		return value, fmt.Errorf("workflowtest: decoding result of query %s as %T: %w", args.Kind(), value, err)
	}
	return value, nil
}

// due removes and returns the scheduled inputs whose time has come, in the
// order they were scheduled.
func (env *Env) due() []history.Event {
	var due []history.Event
	env.events = slices.DeleteFunc(env.events, func(s scheduledInput) bool {
		if s.at.After(env.now) {
			return false
		}
		due = append(due, s.event)
		return true
	})
	return due
}

// runActivity runs a scheduled activity with its registered function and
// returns its outcome.
func (env *Env) runActivity(a replay.ScheduledActivity) history.Event {
	fn, ok := env.activities[a.Attributes.Kind]
	var attrs history.Attributes
	switch {
	case !ok:
		attrs = &history.ActivityFailedAttributes{ScheduledEventID: a.EventID, Attempt: 1, Failure: history.Failure{
			Message: fmt.Sprintf("workflowtest: no function registered for activity %q (use OnActivity)", a.Attributes.Kind),
			Type:    "ActivityNotRegistered", NonRetryable: true,
		}}
	default:
		result, err := fn(env.context(), a.Attributes.Args)
		if err != nil {
			attrs = &history.ActivityFailedAttributes{ScheduledEventID: a.EventID, Attempt: 1, Failure: *replay.FailureFromError(err)}
		} else {
			attrs = &history.ActivityCompletedAttributes{ScheduledEventID: a.EventID, Attempt: 1, Result: result}
		}
	}
	ev, err := history.NewEvent(0, time.Time{}, attrs)
	env.check(err)
	return ev
}

// result decodes the end of a run as a client would see it.
func result[R any](env *Env, kind string, out *replay.Outcome) (R, error) {
	var value R
	if out.Failure != nil {
		err := errorFromFailure(out.Failure)
		if out.Canceled {
			return value, fmt.Errorf("workflow %s canceled: %w (%w)", kind, workflow.ErrCanceled, err)
		}
		return value, err
	}
	if err := env.codec.Decode(out.Result, &value); err != nil {
		return value, fmt.Errorf("workflowtest: decoding result of workflow %s as %T: %w", kind, value, err)
	}
	return value, nil
}

func errorFromFailure(f *history.Failure) error {
	if f == nil {
		return nil
	}
	return &workflow.ApplicationError{
		Cause:        errorFromFailure(f.Cause),
		Details:      f.Details,
		Message:      f.Message,
		NonRetryable: f.NonRetryable,
		Type:         f.Type,
	}
}
