package weirtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"reflect"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/attempt"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

const (
	// MaxTasksDefault bounds the workflow tasks of one ExecuteWorkflow, so
	// a workflow that never ends fails the test instead of hanging it.
	MaxTasksDefault = 10_000

	// WorkflowIDDefault is the workflow ID of the run an Env executes.
	WorkflowIDDefault = "weirtest"
)

// maxAttemptsUnlimited is the attempts of an activity whose retry policy
// sets no maximum: River's max_attempts is a smallint.
const maxAttemptsUnlimited = math.MaxInt16

// StartDefault is where the simulated clock starts: a fixed time, so tests
// are reproducible.
var StartDefault = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrBlocked is returned by [ExecuteWorkflow] when the workflow waits for
// something that can never come: no activity, timer, delayed callback,
// signal or cancel request is left.
var ErrBlocked = errors.New("weirtest: workflow blocked with nothing left to wait for")

// FailureTypeActivityNotRegistered is the failure type of an activity that has
// neither a mock nor a registered implementation; it is not retried.
const FailureTypeActivityNotRegistered = "ActivityNotRegistered"

// EnvConfig configures an [Env]. The zero value works.
type EnvConfig struct {
	// Codec encodes workflow args and results, signals, queries and
	// activity results, as a worker's Codec does. Defaults to
	// client.JSONCodec.
	Codec client.Codec

	// DeadlockTimeout is how long workflow code may run without yielding
	// before its task fails; negative disables the check (for a debugger).
	// Defaults to 1 second, as in a worker.
	DeadlockTimeout time.Duration

	// Logger receives what workflow code logs (never while replaying).
	// Defaults to discarding.
	Logger *slog.Logger

	// MaxTasks bounds the workflow tasks of one ExecuteWorkflow, over all
	// its runs (continue-as-new). Defaults to MaxTasksDefault.
	MaxTasks int

	// Start is the simulated clock's start. Defaults to StartDefault.
	Start time.Time

	// WorkflowID is the run's workflow ID, as workflow.GetInfo reports it.
	// Defaults to WorkflowIDDefault.
	WorkflowID string
}

func (c *EnvConfig) withDefaults() *EnvConfig {
	out := *c
	if out.Codec == nil {
		out.Codec = client.JSONCodec{}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	out.MaxTasks = cmp.Or(out.MaxTasks, MaxTasksDefault)
	if out.Start.IsZero() {
		out.Start = StartDefault
	}
	out.WorkflowID = cmp.Or(out.WorkflowID, WorkflowIDDefault)
	return &out
}

// Env runs one workflow in memory, on the engine that workers use, with a
// simulated clock. Make one per test with [NewEnv]; it is not safe for
// concurrent use (activities and callbacks run on the test's goroutine).
type Env struct {
	config *EnvConfig
	tb     testing.TB

	activities map[string]func(ctx context.Context, args []byte) ([]byte, error)
	results    map[string]reflect.Type // of RegisterActivity's activities, by kind
	calls      []ActivityCall
	def        *replay.Definition // of the run being executed
	executed   bool
	generation int64
	heartbeats map[int64][]byte // last details by activity (ScheduledEventID)
	history    []history.Event  // of the current (last) run
	mocks      []mock
	now        time.Time
	pending    []history.Event // inputs due now, for the next task
	queue      []*item
	running    bool
	seq        int64
	tasks      int
	totalTasks int
	updates    map[string]*updateState // by update ID
}

// item is something due at a time of the simulated clock: a timer firing,
// an activity attempt, an outcome, a delayed callback.
type item struct {
	at  time.Time
	fn  func()
	key string // "" for callbacks; "activity:<id>", "timer:<id>" for the run's
	seq int64
}

// NewEnv returns an Env for tb; config may be nil. tb may be nil outside
// tests (in an example, say): misuse then panics instead of failing tb.
func NewEnv(tb testing.TB, config *EnvConfig) *Env {
	if config == nil {
		config = &EnvConfig{}
	}
	config = config.withDefaults()
	return &Env{
		activities: map[string]func(context.Context, []byte) ([]byte, error){},
		results:    map[string]reflect.Type{},
		config:     config,
		heartbeats: map[int64][]byte{},
		now:        config.Start,
		tb:         tb,
		updates:    map[string]*updateState{},
	}
}

// RegisterActivity runs the real activity a for activities of its kind
// (its args' Kind()) that no mock answers. Its context carries
// activity.GetInfo, and activity.Heartbeat and HeartbeatDetails work (details
// carry over to later attempts); activity.CompleteTx, which needs a database,
// returns ErrNoDatabase.
func RegisterActivity[A activity.Args, R any](env *Env, a activity.Activity[A, R]) {
	var zero A
	env.results[zero.Kind()] = reflect.TypeFor[R]()
	env.activities[zero.Kind()] = func(ctx context.Context, encoded []byte) ([]byte, error) {
		var args A
		if err := json.Unmarshal(encoded, &args); err != nil {
			return nil, &workflow.ApplicationError{
				Message: fmt.Sprintf("weirtest: decoding args of activity %s as %T: %v", zero.Kind(), args, err), NonRetryable: true, Type: "Payload",
			}
		}
		result, err := a.Execute(ctx, args)
		if err != nil {
			return nil, err
		}
		return env.encodeResult(zero.Kind(), result)
	}
}

func (env *Env) encodeResult(kind string, result any) ([]byte, error) {
	encoded, err := env.config.Codec.Encode(result)
	if err != nil {
		return nil, &workflow.ApplicationError{
			Message: fmt.Sprintf("weirtest: encoding result of activity %s: %v", kind, err), NonRetryable: true, Type: "Payload",
		}
	}
	return encoded, nil
}

// fatal fails the test with a message, or panics without one.
func (env *Env) fatal(format string, args ...any) {
	if env.tb == nil {
		panic(fmt.Sprintf("weirtest: "+format, args...))
	}
	env.tb.Helper()
	env.tb.Fatalf("weirtest: "+format, args...)
}

func (env *Env) context() context.Context {
	if env.tb == nil {
		return context.Background()
	}
	return env.tb.Context()
}

// Now returns the simulated clock's time: what workflow.Now returns in the
// workflow's next task.
func (env *Env) Now() time.Time { return env.now }

// Elapsed is how far the simulated clock has moved since its start.
func (env *Env) Elapsed() time.Duration { return env.now.Sub(env.config.Start) }

// Tasks returns how many workflow tasks the run took (the last run, after
// any continue-as-new).
func (env *Env) Tasks() int { return env.tasks }

// RegisterDelayedCallback runs fn when the simulated clock reaches d after
// its current time (its start, before ExecuteWorkflow): send signals, cancel
// the run or query it from fn. Callbacks due at the same time run in the
// order they were registered, before the next workflow task; the clock
// skips ahead to them like timers.
func (env *Env) RegisterDelayedCallback(fn func(), d time.Duration) {
	if d < 0 {
		env.fatal("RegisterDelayedCallback: negative delay %s", d)
		return
	}
	env.push(env.now.Add(d), "", fn)
}

// SignalWorkflow sends a signal to the run: delivered in the next
// workflow task (with the first one, before ExecuteWorkflow). Call it from
// a delayed callback to send it at a simulated time.
func (env *Env) SignalWorkflow(args workflow.SignalArgs) {
	encoded, err := env.config.Codec.Encode(args)
	if err != nil {
		env.fatal("encoding signal %s: %v", args.Kind(), err)
		return
	}
	env.input(&history.SignalReceivedAttributes{Kind: args.Kind(), Args: encoded})
}

// CancelWorkflow asks the run to cancel, as client.Cancel does: its
// Context is cancelled in the next workflow task.
func (env *Env) CancelWorkflow() {
	env.input(&history.CancelRequestedAttributes{Reason: "weirtest"})
}

// input queues an input for the next workflow task.
func (env *Env) input(attrs history.Attributes) {
	ev, err := history.NewEvent(0, time.Time{}, attrs)
	if err != nil {
		env.fatal("%v", err)
		return
	}
	env.pending = append(env.pending, ev)
}

func (env *Env) push(at time.Time, key string, fn func()) {
	env.seq++
	env.queue = append(env.queue, &item{at: at, fn: fn, key: key, seq: env.seq})
}

// drop removes the queued items with key.
func (env *Env) drop(key string) {
	env.queue = slices.DeleteFunc(env.queue, func(it *item) bool { return it.key == key })
}

// next removes and returns the earliest item (by time, then queueing
// order) if it is due by until; nil otherwise.
func (env *Env) next(until time.Time) *item {
	if len(env.queue) == 0 {
		return nil
	}
	i := 0
	for j, it := range env.queue {
		if it.at.Before(env.queue[i].at) || (it.at.Equal(env.queue[i].at) && it.seq < env.queue[i].seq) {
			i = j
		}
	}
	it := env.queue[i]
	if it.at.After(until) {
		return nil
	}
	env.queue = slices.Delete(env.queue, i, i+1)
	return it
}

// runID is the deterministic run ID of a generation.
func (env *Env) runID(generation int64) uuid.UUID {
	return uuid.NewSHA1(uuid.NameSpaceURL, fmt.Appendf(nil, "weirtest:%s/%d", env.config.WorkflowID, generation))
}

// params are the parameters of a workflow task (or a query) on the run's
// history.
func (env *Env) params() replay.ExecuteParams {
	return replay.ExecuteParams{
		ActivityResultType: env.activityResultType,
		Codec:              env.config.Codec,
		DeadlockTimeout:    env.config.DeadlockTimeout,
		History:            env.history,
		Info: replay.Info{
			Generation: env.generation, Kind: env.def.Kind, RunID: env.runID(env.generation).String(), WorkflowID: env.config.WorkflowID,
		},
	}
}

// ExecuteWorkflow runs wf with args to its end on the simulated clock and
// returns its result. An Env executes one workflow.
//
// Each workflow task replays the whole history first, as in production, so
// workflow code that isn't deterministic fails with an error wrapping a
// *workflow.NonDeterminismError; a task that fails (non-determinism, a
// panic, a deadlock) is returned as is rather than retried. A workflow that
// returns an error gives what a client would get: a
// *client.WorkflowFailedError with State "failed" (or "cancelled") and the
// workflow's error as its *client.Failure. A workflow that waits for
// something that can never come gives [ErrBlocked]. Continue-as-new is
// followed: the next run starts at once, and the result is the last run's.
func ExecuteWorkflow[A workflow.Args, R any](env *Env, wf workflow.Workflow[A, R], args A) (R, error) {
	var zero R
	if env.executed {
		return zero, errors.New("weirtest: an Env executes one workflow; make another Env")
	}
	env.executed = true
	env.def = replay.Bind(wf)
	encoded, err := env.config.Codec.Encode(args)
	if err != nil {
		return zero, fmt.Errorf("weirtest: encoding args of workflow %s: %w", env.def.Kind, err)
	}
	out, err := env.run(encoded)
	if err != nil {
		return zero, err
	}
	if out.Failure != nil {
		state := "failed"
		if out.Canceled {
			state = "cancelled"
		}
		return zero, &client.WorkflowFailedError{
			Failure: clientFailure(out.Failure), Generation: env.generation, RunID: env.runID(env.generation), State: state, WorkflowID: env.config.WorkflowID,
		}
	}
	var value R
	if err := env.config.Codec.Decode(out.Result, &value); err != nil {
		return zero, fmt.Errorf("weirtest: decoding result of workflow %s as %T: %w", env.def.Kind, value, err)
	}
	return value, nil
}

// run drives the run (and those it continues as) to the end.
func (env *Env) run(args []byte) (*replay.Outcome, error) {
	env.running = true
	defer func() { env.running = false }()
	kind := env.def.Kind
	env.generation = 1
	started, err := env.startEvent(kind, args)
	if err != nil {
		return nil, err
	}
	inputs := append([]history.Event{started}, env.take()...)
	for {
		if env.totalTasks >= env.config.MaxTasks {
			return nil, fmt.Errorf("weirtest: more than %d workflow tasks", env.config.MaxTasks)
		}
		env.tasks++
		env.totalTasks++
		params := env.params()
		params.Info.TaskAttempt = 1
		params.Inputs, params.Logger, params.Now = inputs, env.config.Logger, env.now
		out, err := replay.Execute(env.context(), env.def, &params)
		if err != nil {
			return nil, err
		}
		env.history = append(env.history, out.Events...)
		env.answerUpdates(out.Events, out.RejectedUpdates)
		if out.Completed {
			env.abandonUpdates()
		} else {
			// Updates that came before the code could register their
			// handlers go with the next task, as a worker queues them.
			env.pending = append(out.DeferredInputs, env.pending...)
		}
		if next := out.ContinuedAsNew; next != nil {
			if next.Kind != kind {
				return nil, fmt.Errorf("weirtest: continuing as new as a %q workflow, not %q, isn't supported", next.Kind, kind)
			}
			// The old run's activities and timers are abandoned; delayed
			// callbacks stay.
			env.queue = slices.DeleteFunc(env.queue, func(it *item) bool { return it.key != "" })
			env.pending = nil
			env.history = nil
			env.tasks = 0
			env.generation++
			started, err := env.startEvent(kind, next.Args)
			if err != nil {
				return nil, err
			}
			inputs = []history.Event{started}
			continue
		}
		if out.Completed {
			return out, nil
		}
		for _, a := range out.Activities {
			env.scheduleAttempt(a, env.now, 1)
		}
		for _, t := range out.Timers {
			id := t.EventID
			env.push(t.Attributes.FireAt, fmt.Sprintf("timer:%d", id), func() {
				env.input(&history.TimerFiredAttributes{StartedEventID: id})
			})
		}
		for _, id := range out.CanceledActivities {
			env.drop(fmt.Sprintf("activity:%d", id))
		}
		for _, id := range out.CanceledTimers {
			env.drop(fmt.Sprintf("timer:%d", id))
		}
		if err := env.skipToInputs(); err != nil {
			return nil, err
		}
		inputs = env.take()
	}
}

func (env *Env) startEvent(kind string, args []byte) (history.Event, error) {
	return history.NewEvent(0, time.Time{}, &history.WorkflowStartedAttributes{
		Args: args, Generation: env.generation, Kind: kind, RunID: env.runID(env.generation).String(), WorkflowID: env.config.WorkflowID,
	})
}

// take removes and returns the inputs for the next task.
func (env *Env) take() []history.Event {
	inputs := env.pending
	env.pending = nil
	return inputs
}

// skipToInputs runs what is due, skipping the clock ahead to the next item
// whenever nothing is, until there are inputs for a workflow task.
func (env *Env) skipToInputs() error {
	for len(env.pending) == 0 {
		it := env.next(farFuture)
		if it == nil {
			return ErrBlocked
		}
		if it.at.After(env.now) {
			env.now = it.at
		}
		it.fn()
		// Everything else due now goes in the same task.
		for it := env.next(env.now); it != nil; it = env.next(env.now) {
			it.fn()
		}
	}
	return nil
}

// farFuture is after every item.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// scheduleAttempt queues attempt n of an activity at a time.
func (env *Env) scheduleAttempt(a replay.ScheduledActivity, at time.Time, n int) {
	key := fmt.Sprintf("activity:%d", a.EventID)
	env.push(at, key, func() { env.runAttempt(a, n) })
}

// runAttempt runs attempt n of an activity now, then queues its outcome or
// its retry, following its retry policy.
func (env *Env) runAttempt(a replay.ScheduledActivity, n int) {
	attrs := a.Attributes
	policy := attrs.RetryPolicy         // recorded with every default, never nil
	maxAttempts := maxAttemptsUnlimited // as River's max_attempts caps it for a worker
	if policy.MaximumAttempts > 0 {
		maxAttempts = min(policy.MaximumAttempts, maxAttemptsUnlimited)
	}
	st := &attempt.State{
		ActivityKind: attrs.Kind, Attempt: n, Encode: env.config.Codec.Encode,
		Generation: env.generation, MaxAttempts: maxAttempts, Namespace: client.NamespaceDefault,
		RunID: env.runID(env.generation), ScheduledEventID: a.EventID,
		WorkflowID: env.config.WorkflowID, WorkflowKind: env.def.Kind,
		CompleteTx: func(context.Context, pgx.Tx, []byte) error { return ErrNoDatabase },
		Heartbeat: func(_ context.Context, details []byte) error {
			if details != nil {
				env.heartbeats[a.EventID] = details
			}
			return nil
		},
		HeartbeatDetails: func() []byte { return env.heartbeats[a.EventID] },
	}
	ctx := attempt.With(env.context(), st)
	ans := env.call(ctx, a, n)
	result, err, delay := ans.result, ans.err, ans.delay

	key := fmt.Sprintf("activity:%d", a.EventID)
	finish := func() {
		if err == nil {
			env.input(&history.ActivityCompletedAttributes{Attempt: n, Result: result, ScheduledEventID: a.EventID})
			return
		}
		failure := replay.FailureFromError(err)
		final := n >= maxAttempts || failure.NonRetryable || slices.Contains(policy.NonRetryableErrorTypes, failure.Type)
		if !final {
			retryAt := env.now.Add(policy.Delay(n))
			deadline := time.Time{}
			if attrs.ScheduleToCloseTimeout > 0 {
				deadline = env.scheduledAt(a.EventID).Add(time.Duration(attrs.ScheduleToCloseTimeout))
			}
			if deadline.IsZero() || retryAt.Before(deadline) {
				env.scheduleAttempt(a, retryAt, n+1)
				return
			}
			env.push(deadline, key, func() {
				env.input(&history.ActivityTimedOutAttributes{
					Attempt: n, LastFailure: failure, ScheduledEventID: a.EventID, TimeoutType: history.TimeoutScheduleToClose,
				})
			})
			return
		}
		var timeout *workflow.TimeoutError
		if errors.As(err, &timeout) {
			env.input(&history.ActivityTimedOutAttributes{
				Attempt: n, LastFailure: replay.FailureFromError(timeout.LastFailure), ScheduledEventID: a.EventID, TimeoutType: timeout.TimeoutType,
			})
			return
		}
		env.input(&history.ActivityFailedAttributes{Attempt: n, Failure: *failure, ScheduledEventID: a.EventID})
	}
	if delay > 0 {
		env.push(env.now.Add(delay), key, finish)
		return
	}
	finish()
}

// scheduledAt is the time of an ActivityScheduled event.
func (env *Env) scheduledAt(eventID int64) time.Time {
	for _, ev := range env.history {
		if ev.ID == eventID {
			return ev.Time
		}
	}
	return env.now
}

// call runs one attempt with the first mock that answers it, else the
// registered activity; a panic becomes a *workflow.PanicError.
func (env *Env) call(ctx context.Context, a replay.ScheduledActivity, n int) (ans answer) {
	record := ActivityCall{
		Args: json.RawMessage(a.Attributes.Args), Attempt: n, Kind: a.Attributes.Kind, ScheduledEventID: a.EventID, Time: env.now,
	}
	defer func() {
		if r := recover(); r != nil {
			ans = answer{err: &workflow.PanicError{Stack: string(debug.Stack()), Value: r}}
		}
		record.Err = ans.err
		env.calls = append(env.calls, record)
	}()
	for _, m := range env.mocks {
		if m.kind() != a.Attributes.Kind {
			continue
		}
		if ans, ok := m.answer(ctx, a.Attributes.Args); ok {
			record.Mocked = true
			return ans
		}
	}
	if fn, ok := env.activities[a.Attributes.Kind]; ok {
		result, err := fn(ctx, a.Attributes.Args)
		return answer{result: result, err: err}
	}
	return answer{err: &workflow.ApplicationError{
		Message:      fmt.Sprintf("weirtest: no mock or registered activity for %q (use OnActivity or RegisterActivity)", a.Attributes.Kind),
		NonRetryable: true, Type: FailureTypeActivityNotRegistered,
	}}
}

// QueryWorkflow answers a query on the run as it stands: at the end of
// ExecuteWorkflow, or at a simulated time from a delayed callback. See
// workflow.SetQueryHandler.
func QueryWorkflow[R any](env *Env, args workflow.QueryArgs) (R, error) {
	var value R
	if env.def == nil || len(env.history) == 0 {
		return value, errors.New("weirtest: QueryWorkflow before the workflow's first task")
	}
	encoded, err := env.config.Codec.Encode(args)
	if err != nil {
		return value, fmt.Errorf("weirtest: encoding query %s: %w", args.Kind(), err)
	}
	result, err := replay.Query(env.context(), env.def, &replay.QueryParams{Args: encoded, ExecuteParams: env.params(), Kind: args.Kind()})
	if err != nil {
		return value, err
	}
	if err := env.config.Codec.Decode(result, &value); err != nil {
		return value, fmt.Errorf("weirtest: decoding result of query %s as %T: %w", args.Kind(), value, err)
	}
	return value, nil
}

// WriteHistoryJSON writes the run's history (the last run, after any
// continue-as-new) in the format of client.WriteHistoryJSON, which
// ReplayHistory and the worker's Replayer read: a way to make golden
// histories for replay tests without a database.
func (env *Env) WriteHistoryJSON(w io.Writer) error {
	export := &client.HistoryExport{Events: []*client.Event{}, Namespace: client.NamespaceDefault, RunID: env.runID(env.generation), WorkflowID: env.config.WorkflowID}
	for _, ev := range env.history {
		export.Events = append(export.Events, &client.Event{Attributes: ev.Attributes, ID: ev.ID, Time: ev.Time, Type: client.EventType(ev.Type)})
	}
	encoder := json.NewEncoder(w)
	encoder.SetIndent("", "  ")
	if err := encoder.Encode(export); err != nil {
		return fmt.Errorf("weirtest: writing history: %w", err)
	}
	return nil
}

func clientFailure(f *history.Failure) *client.Failure {
	if f == nil {
		return nil
	}
	return &client.Failure{
		Cause: clientFailure(f.Cause), Details: f.Details, Message: f.Message, NonRetryable: f.NonRetryable, Stack: f.Stack, Type: f.Type,
	}
}

// activityResultType is the result type of the activity of kind registered
// with RegisterActivity (mocks declare none).
func (env *Env) activityResultType(kind string) (reflect.Type, bool) {
	t, ok := env.results[kind]
	return t, ok
}
