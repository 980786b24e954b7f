package replay

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay/coroutine"
	"github.com/weirhq/weir/internal/replay/env"
	"github.com/weirhq/weir/workflow"
)

// abort is the panic value with which the engine unwinds workflow code when
// replay must stop (non-determinism).
type abort struct{ err error }

// engine runs a run's workflow tasks, each given its ExecuteParams (not
// kept: between tasks the engine holds only the code's state and what
// ExecuteParams says of the run). It implements env.Env for workflow code.
type engine struct {
	ctx             context.Context
	codec           Codec
	def             *Definition
	info            env.Info
	logTo           *slog.Logger // ExecuteParams.Logger
	maxPayloadBytes int          // ExecuteParams.MaxPayloadBytes
	resultType      func(kind string) (reflect.Type, bool)
	sched           coroutine.Scheduler // in the engine's allocation
	rare            *rare               // made on first use

	now time.Time
	seq int64

	// While replaying a task: its recorded commands and how many matched.
	boundaryID int64
	cursor     int
	expected   []recorded

	// While deciding: the next event ID and the events of the task.
	events []history.Event
	nextID int64

	activities []ScheduledActivity

	operations []*operation // every activity, timer and child, by event ID (the order they start in)
	pending    []*operation // those without an outcome, by event ID

	abortErr error
	end      history.Attributes // the command that ends the run, once done
	endErr   error              // or why the task fails instead

	replaying       bool
	cancelRequested bool
	querying        bool // running a query handler: no commands, no blocking
	codeRan         bool // the workflow's code ran in an earlier task
	done            bool
	started         bool
}

// rare is what an engine holds for what few runs do (timers, children,
// cancellations, updates, signals, queries, versions, logging): the engine
// of every run the worker's cache holds is smaller without it.
type rare struct {
	logger *slog.Logger // made on first use, from logTo

	children           []ScheduledChild
	canceledActivities []int64
	canceledTimers     []int64
	timers             []StartedTimer

	queryHandlers   map[string]func([]byte) ([]byte, error)
	updateHandlers  map[string]updateHandler
	updatesSeen     map[string]bool // update IDs accepted in this run
	rejectedUpdates []RejectedUpdate
	deferredInputs  []history.Event
	signals         map[string]*env.SignalQueue
	signalsOpened   map[string]bool // kinds the code asked for a channel of
	versions        map[string]int  // by change ID
}

// more returns what the engine holds for rarer runs, made on first use.
func (e *engine) more() *rare {
	if e.rare == nil {
		e.rare = &rare{}
	}
	return e.rare
}

// updateHandler is what SetUpdateHandler registered for an update kind.
type updateHandler struct {
	handle   func([]byte) ([]byte, error)
	validate func([]byte) error
}

// operation is an activity, a timer or a child workflow started by workflow
// code.
type operation struct {
	ctx     env.Context // its Context, whose cancelling cancels it; nil: never (children)
	promise env.Promise // made with it: one allocation
	child   bool
	timer   bool
}

// recorded is a decoded history event.
type recorded struct {
	event history.Event
	attrs history.Attributes
}

func newEngine(ctx context.Context, def *Definition, params *ExecuteParams) (*engine, error) {
	if def == nil || def.Run == nil || def.Kind == "" {
		return nil, errors.New("replay: Definition with Kind and Run is required")
	}
	deadlockTimeout := cmp.Or(params.DeadlockTimeout, DeadlockTimeoutDefault)
	e := &engine{
		ctx:             ctx,
		codec:           params.Codec,
		def:             def,
		logTo:           params.Logger,
		maxPayloadBytes: params.MaxPayloadBytes,
		resultType:      params.ActivityResultType,
		info: env.Info{
			Generation:  params.Info.Generation,
			Kind:        params.Info.Kind,
			RunID:       params.Info.RunID,
			TaskAttempt: params.Info.TaskAttempt,
			WorkflowID:  params.Info.WorkflowID,
		},
	}
	if e.codec == nil {
		e.codec = JSONCodec{}
	}
	e.sched.Init(deadlockTimeout, params.Go)
	return e, nil
}

// set sets m[k] to v, making m on first use: most runs use few of the
// engine's maps.
func set[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = map[K]V{}
	}
	(*m)[k] = v
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidHistory, fmt.Sprintf(format, args...))
}

// execute runs the task of params, writing its outcome over out.
func (e *engine) execute(params *ExecuteParams, out *Outcome) error {
	tasks, tail, err := splitHistory(params.History, params.Decode)
	if err != nil {
		return err
	}
	if n := len(params.History); n > 0 {
		last := params.History[n-1]
		if last.Type.IsTerminal() {
			return closedOutcome(last, params.Inputs, "the run is closed", out)
		}
	}
	for i := range tasks {
		if err := e.replayTask(&tasks[i]); err != nil {
			return err
		}
	}
	if err := e.ctx.Err(); err != nil {
		return err
	}
	e.codeRan = len(tasks) > 0
	return e.decide(tail, params, out)
}

// closedOutcome writes over out the outcome of a task on a closed run,
// whose last event is last: every input dropped.
func closedOutcome(last history.Event, inputs []history.Event, reason string, out *Outcome) error {
	attrs, err := history.DecodeAttributes(last)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidHistory, err)
	}
	*out = Outcome{Completed: true}
	out.close(attrs)
	for _, in := range inputs {
		out.Dropped = append(out.Dropped, DroppedInput{Input: in, Reason: reason})
	}
	return nil
}

// close sets what the command that ended the run says of its end.
func (out *Outcome) close(end history.Attributes) {
	out.Completed = true
	switch a := end.(type) {
	case *history.WorkflowCompletedAttributes:
		out.Result = a.Result
	case *history.WorkflowFailedAttributes:
		out.Failure = &a.Failure
	case *history.WorkflowCanceledAttributes:
		out.Failure, out.Canceled = &a.Failure, true
	case *history.WorkflowContinuedAsNewAttributes:
		out.ContinuedAsNew = a
	}
}

// replayTask replays one recorded task and checks its commands.
func (e *engine) replayTask(t *task) error {
	if err := e.ctx.Err(); err != nil {
		return err
	}
	e.replaying = true
	for _, in := range t.inputs {
		if reason, err := e.deliver(in.event, in.attrs); err != nil {
			return err
		} else if reason != "" {
			return invalid("input event %d (%s) can't be delivered: %s", in.event.ID, in.event.Type, reason)
		}
	}
	e.now = t.boundary.Now
	e.info.TaskAttempt = t.boundary.Attempt
	e.boundaryID, e.expected, e.cursor = t.id, t.commands, 0
	if err := e.run(); err != nil {
		return err
	}
	e.skipVersionMarkers(nil)
	if e.cursor < len(e.expected) {
		missing := e.expected[e.cursor]
		got := "nothing more (the code blocked)"
		if e.done {
			got = "nothing more (the workflow returned)"
		}
		return nondeterminism(missing.event.ID, describe(missing.attrs), got)
	}
	e.expected = nil
	return nil
}

// nextEventID is the ID of the event after history's last: IDs are
// positions, so a cached run's history may be given as its last events.
func nextEventID(events []history.Event) int64 {
	if len(events) == 0 {
		return 1
	}
	return events[len(events)-1].ID + 1
}

// decide opens the task of params: it delivers the trailing inputs of
// history and the new inputs, appends the boundary and runs the code live,
// writing its outcome over out.
func (e *engine) decide(tail []recorded, params *ExecuteParams, out *Outcome) error {
	*out = Outcome{}
	e.replaying = false
	e.nextID = nextEventID(params.History)
	e.now = params.Now
	e.events = make([]history.Event, 0, len(params.Inputs)+2) // and the boundary, and usually a command (tail is history)
	e.info.TaskAttempt = params.Info.TaskAttempt
	for _, in := range tail {
		if reason, err := e.deliver(in.event, in.attrs); err != nil {
			return err
		} else if reason != "" {
			return invalid("input event %d (%s) can't be delivered: %s", in.event.ID, in.event.Type, reason)
		}
	}
	for _, in := range params.Inputs {
		if !in.Type.IsInput() {
			return invalid("input of type %s: only outcomes can be inputs", in.Type)
		}
		if in.Type == history.EventWorkflowStarted && e.nextID != 1 {
			return invalid("input %s given for a run that has a history", in.Type)
		}
		in.ID = 0
		attrs, err := history.DecodeAttributes(in)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidHistory, err)
		}
		if update, ok := attrs.(*history.UpdateAcceptedAttributes); ok {
			switch verdict, failure := e.judgeUpdate(update); verdict {
			case updateDefer:
				r := e.more()
				r.deferredInputs = append(r.deferredInputs, in)
				continue
			case updateReject:
				r := e.more()
				r.rejectedUpdates = append(r.rejectedUpdates, RejectedUpdate{Failure: failure, UpdateID: update.UpdateID})
				out.Dropped = append(out.Dropped, DroppedInput{Input: in, Reason: "update rejected: " + failure.Message})
				continue
			case updateDuplicate:
				out.Dropped = append(out.Dropped, DroppedInput{Input: in, Reason: "update " + update.UpdateID + " was already accepted"})
				continue
			}
		}
		reason, err := e.deliver(in, attrs)
		if err != nil {
			return err
		}
		if reason != "" {
			out.Dropped = append(out.Dropped, DroppedInput{Input: in, Reason: reason})
			continue
		}
		in.ID, in.Time = e.nextID, e.now
		e.nextID++
		e.events = append(e.events, in)
	}
	if !e.started {
		return invalid("the run has no %s event", history.EventWorkflowStarted)
	}
	boundary, err := history.NewBoundary(e.nextID, e.now, params.Info.TaskAttempt)
	if err != nil {
		return err
	}
	e.boundaryID, e.expected, e.cursor = e.nextID, nil, 0
	e.nextID++
	e.events = append(e.events, boundary)
	if err := e.run(); err != nil {
		return err
	}
	out.Events, out.Activities = e.events, e.activities
	if r := e.rare; r != nil {
		out.Timers, out.Children = r.timers, r.children
		out.CanceledActivities, out.CanceledTimers = r.canceledActivities, r.canceledTimers
		out.DeferredInputs, out.RejectedUpdates = r.deferredInputs, r.rejectedUpdates
	}
	if e.done {
		out.close(e.end)
		if out.ContinuedAsNew != nil {
			out.CarriedSignals = e.pendingSignals()
		}
	}
	return nil
}

// deliver applies one input. A non-empty reason means the input can't
// change anything and was not applied.
func (e *engine) deliver(ev history.Event, attrs history.Attributes) (reason string, err error) {
	var (
		id    int64
		timer bool
		child bool
	)
	switch a := attrs.(type) {
	case *history.WorkflowStartedAttributes:
		return "", e.start(a)
	case *history.CancelRequestedAttributes:
		switch {
		case e.done:
			return "the workflow has returned", nil
		case e.cancelRequested:
			return "cancellation was already requested", nil
		}
		e.cancelRequested = true
		return "", nil
	case *history.SignalReceivedAttributes:
		if e.done {
			return "the workflow has returned", nil
		}
		e.signalQueue(a.Kind).Push(env.Signal{Args: a.Args, Seq: e.nextSeq()})
		return "", nil
	case *history.UpdateAcceptedAttributes:
		if e.done {
			return "the workflow has returned", nil
		}
		h, ok := e.more().updateHandlers[a.Kind]
		if !ok {
			return "", invalid("event %d: update %s of kind %q was accepted, but the code registers no handler for it now", ev.ID, a.UpdateID, a.Kind)
		}
		set(&e.more().updatesSeen, a.UpdateID, true)
		id, args := a.UpdateID, a.Args
		e.sched.Spawn(func() {
			result, err := h.handle(args)
			completed := &history.UpdateCompletedAttributes{UpdateID: id}
			if err != nil {
				completed.Failure = FailureFromError(err)
			} else {
				completed.Result = result
			}
			e.commandOrAbort(completed)
		})
		return "", nil
	case *history.ActivityCompletedAttributes:
		id = a.ScheduledEventID
	case *history.ActivityFailedAttributes:
		id = a.ScheduledEventID
	case *history.ActivityTimedOutAttributes:
		id = a.ScheduledEventID
	case *history.ActivityCanceledAttributes:
		id = a.ScheduledEventID
	case *history.TimerFiredAttributes:
		id, timer = a.StartedEventID, true
	case *history.ChildWorkflowCompletedAttributes:
		id, child = a.ScheduledEventID, true
	case *history.ChildWorkflowFailedAttributes:
		id, child = a.ScheduledEventID, true
	default:
		return "", invalid("event %d: %s is not an input", ev.ID, ev.Type)
	}
	if e.done {
		return "the workflow has returned", nil
	}
	what := "activity"
	switch {
	case timer:
		what = "timer"
	case child:
		what = "child workflow"
	}
	op, ok := e.operation(id)
	switch {
	case !ok || op.timer != timer || op.child != child:
		return fmt.Sprintf("no %s was started by event %d", what, id), nil
	case op.promise.Ready():
		return fmt.Sprintf("the %s of event %d already has its outcome", what, id), nil
	}
	e.resolve(op, attrs)
	return "", nil
}

// operation returns the operation started by event id, if any.
func (e *engine) operation(id int64) (*operation, bool) {
	i, ok := slices.BinarySearchFunc(e.operations, id, func(op *operation, id int64) int { return cmp.Compare(op.promise.EventID, id) })
	if !ok {
		return nil, false
	}
	return e.operations[i], true
}

func (e *engine) resolve(op *operation, outcome history.Attributes) {
	i := slices.Index(e.pending, op)
	e.pending = slices.Delete(e.pending, i, i+1)
	op.promise.Resolve(outcome, e.nextSeq())
}

// cancelOperations cancels, in the order they were started, the pending
// activities and timers whose Context is cancelled: it records the
// ActivityCancelRequested or TimerCanceled command and resolves each as
// cancelled. It reports whether it did anything.
func (e *engine) cancelOperations() (bool, error) {
	did := false
	for i := 0; i < len(e.pending); i++ {
		op := e.pending[i]
		id := op.promise.EventID
		if op.ctx == nil {
			continue // a child workflow goes on; its parent-close policy applies
		}
		canceled, err := callSafely(func() bool { return op.ctx.Err() != nil })
		if err != nil {
			return false, fmt.Errorf("checking the Context of the operation of event %d: %w", id, err)
		}
		if !canceled {
			continue
		}
		var command, outcome history.Attributes = &history.ActivityCancelRequestedAttributes{ScheduledEventID: id},
			&history.ActivityCanceledAttributes{ScheduledEventID: id}
		if op.timer {
			command, outcome = &history.TimerCanceledAttributes{StartedEventID: id}, &history.TimerCanceledAttributes{StartedEventID: id}
		}
		if _, err := e.command(command); err != nil {
			return false, err
		}
		e.resolve(op, outcome)
		i-- // e.pending[i] was op
		switch {
		case e.replaying:
		case op.timer:
			r := e.more()
			r.canceledTimers = append(r.canceledTimers, id)
		default:
			r := e.more()
			r.canceledActivities = append(r.canceledActivities, id)
		}
		did = true
	}
	return did, nil
}

// callSafely calls fn, which runs workflow code (a Context's Err method)
// outside a coroutine, turning a panic into a *workflow.PanicError.
func callSafely(fn func() bool) (ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &workflow.PanicError{Stack: string(debug.Stack()), Value: r}
		}
	}()
	return fn(), nil
}

func (e *engine) start(a *history.WorkflowStartedAttributes) error {
	if e.started {
		return invalid("a second %s", history.EventWorkflowStarted)
	}
	if a.Kind != e.def.Kind {
		return invalid("the run is a %q workflow, not %q", a.Kind, e.def.Kind)
	}
	e.started = true
	if e.info.Kind == "" {
		e.info.Kind = a.Kind
	}
	if e.info.WorkflowID == "" {
		e.info.WorkflowID = a.WorkflowID
	}
	if e.info.RunID == "" {
		e.info.RunID = a.RunID
	}
	if e.info.Generation == 0 {
		e.info.Generation = a.Generation
	}
	args := a.Args
	e.sched.Spawn(func() { // holds e and args only: the root Context is e's
		result, err := e.def.Run(rootContext{e: e}, args)
		// Still in the coroutine: a panic in the error's methods is caught.
		e.end, e.endErr = e.endOf(result, err)
		e.done = true
	})
	return nil
}

// endOf returns the command that ends the run, given what the workflow
// returned, or an error that fails the task.
func (e *engine) endOf(result []byte, err error) (history.Attributes, error) {
	if errors.Is(err, ErrPayload) {
		return nil, err
	}
	if err == nil {
		if limit := e.MaxPayloadBytes(); limit > 0 && len(result) > limit {
			err = &workflow.PayloadTooLargeError{Limit: limit, Size: len(result), What: "result of workflow " + e.def.Kind}
		}
	}
	var continueErr *workflow.ContinueAsNewError
	switch {
	case err == nil:
		return &history.WorkflowCompletedAttributes{Result: result}, nil
	case errors.As(err, &continueErr):
		return &history.WorkflowContinuedAsNewAttributes{Kind: continueErr.Kind, Args: continueErr.Args}, nil
	case e.cancelRequested && errors.Is(err, workflow.ErrCanceled):
		return &history.WorkflowCanceledAttributes{Failure: *FailureFromError(err)}, nil
	default:
		return &history.WorkflowFailedAttributes{Failure: *FailureFromError(err)}, nil
	}
}

// run runs the coroutines until all block or the workflow returns, and
// records the workflow's end.
func (e *engine) run() error {
	for {
		err := e.sched.Run(e.ctx, e.stopRun)
		if e.abortErr != nil { // even if workflow code recovered the abort
			return e.abortErr
		}
		if err != nil {
			return e.runError(err)
		}
		if e.done {
			break
		}
		// Every coroutine is blocked: cancel the activities whose Context
		// was cancelled, which may unblock some.
		canceled, err := e.cancelOperations()
		if err != nil {
			return err
		}
		if !canceled {
			return nil
		}
	}
	if e.endErr != nil {
		return e.endErr
	}
	if _, err := e.command(e.end); err != nil {
		return err
	}
	return nil
}

// stopRun stops the scheduler's Run once the code returned or must stop.
func (e *engine) stopRun() bool { return e.done || e.abortErr != nil }

// runError wraps an error of the scheduler's Run.
func (e *engine) runError(err error) error {
	var panicErr *coroutine.PanicError
	if errors.As(err, &panicErr) {
		err = &workflow.PanicError{Stack: panicErr.Stack, Value: panicErr.Value}
	}
	return fmt.Errorf("running workflow %s: %w", e.def.Kind, err)
}

// command records a command (deciding) or matches it against the next
// recorded command of the task (replaying) and returns the recorded event.
func (e *engine) command(attrs history.Attributes) (recorded, error) {
	if e.querying {
		return recorded{}, fmt.Errorf("%w: the handler did %s", workflow.ErrQueryCommand, describe(attrs))
	}
	if !e.replaying {
		ev, err := history.NewEvent(e.nextID, e.now, attrs)
		if err != nil {
			return recorded{}, fmt.Errorf("%w: %w", ErrPayload, err)
		}
		e.nextID++
		e.events = append(e.events, ev)
		return recorded{event: ev, attrs: attrs}, nil
	}
	e.skipVersionMarkers(attrs)
	if e.cursor >= len(e.expected) {
		return recorded{}, nondeterminism(e.boundaryID, "no more commands in the task started by this event", describe(attrs))
	}
	rec := e.expected[e.cursor]
	if keyOf(rec.attrs) != keyOf(attrs) {
		return recorded{}, nondeterminism(rec.event.ID, describe(rec.attrs), describe(attrs))
	}
	e.cursor++
	return rec, nil
}

// skipVersionMarkers passes over recorded version markers that the code no
// longer asks for (a GetVersion removed once no run needed its old branch),
// unless next is that very marker. Their versions still count.
func (e *engine) skipVersionMarkers(next history.Attributes) {
	for e.cursor < len(e.expected) {
		rec := e.expected[e.cursor]
		marker, ok := versionMarker(rec.attrs)
		if !ok || (next != nil && keyOf(next) == keyOf(rec.attrs)) {
			return
		}
		if _, seen := e.more().versions[marker.ChangeID]; !seen {
			set(&e.more().versions, marker.ChangeID, marker.Version)
		}
		e.cursor++
	}
}

// versionMarker decodes the data of a version marker.
func versionMarker(attrs history.Attributes) (history.VersionMarker, bool) {
	m, ok := attrs.(*history.MarkerRecordedAttributes)
	if !ok || m.Name != history.MarkerVersion {
		return history.VersionMarker{}, false
	}
	var marker history.VersionMarker // escapes: made only for a marker
	if json.Unmarshal(m.Data, &marker) != nil {
		return history.VersionMarker{}, false
	}
	return marker, true
}

func nondeterminism(id int64, expected, got string) error {
	return fmt.Errorf("replaying: %w", &workflow.NonDeterminismError{EventID: id, Expected: expected, Got: got})
}

// commandKey is what replay compares of a command: two commands are the
// same when their keys are equal, that is when describe names them alike.
type commandKey struct {
	eventType history.EventType
	name      string // an activity's or a child's kind, a marker's name, an update's ID
	detail    string // a version marker's change ID, a child's workflow ID
	ref       int64  // the event of the activity or timer cancelled
	version   bool   // a version marker
}

func keyOf(attrs history.Attributes) commandKey {
	k := commandKey{eventType: attrs.EventType()}
	switch a := attrs.(type) {
	case *history.ActivityScheduledAttributes:
		k.name = a.Kind
	case *history.MarkerRecordedAttributes:
		k.name = a.Name
		if marker, ok := versionMarker(a); ok {
			k.detail, k.version = marker.ChangeID, true
		}
	case *history.ActivityCancelRequestedAttributes:
		k.ref = a.ScheduledEventID
	case *history.TimerCanceledAttributes:
		k.ref = a.StartedEventID
	case *history.ChildWorkflowScheduledAttributes:
		k.name, k.detail = a.Kind, a.WorkflowID
	case *history.UpdateCompletedAttributes:
		k.name = a.UpdateID
	}
	return k
}

// describe names a command for people, as replay compares it (keyOf).
func describe(attrs history.Attributes) string {
	switch a := attrs.(type) {
	case *history.ActivityScheduledAttributes:
		return fmt.Sprintf("%s(kind %q)", a.EventType(), a.Kind)
	case *history.MarkerRecordedAttributes:
		if marker, ok := versionMarker(a); ok {
			return fmt.Sprintf("%s(name %q, change %q)", a.EventType(), a.Name, marker.ChangeID)
		}
		return fmt.Sprintf("%s(name %q)", a.EventType(), a.Name)
	case *history.ActivityCancelRequestedAttributes:
		return fmt.Sprintf("%s(activity of event %d)", a.EventType(), a.ScheduledEventID)
	case *history.TimerCanceledAttributes:
		return fmt.Sprintf("%s(timer of event %d)", a.EventType(), a.StartedEventID)
	case *history.ChildWorkflowScheduledAttributes:
		return fmt.Sprintf("%s(kind %q, workflow ID %q)", a.EventType(), a.Kind, a.WorkflowID)
	case *history.UpdateCompletedAttributes:
		return fmt.Sprintf("%s(update %q)", a.EventType(), a.UpdateID)
	}
	return string(attrs.EventType())
}

// commandOrAbort is command for calls from workflow code: a mismatch unwinds
// the calling coroutine.
func (e *engine) commandOrAbort(attrs history.Attributes) recorded {
	rec, err := e.command(attrs)
	if err != nil {
		e.abortErr = err
		panic(&abort{err: err})
	}
	return rec
}

// updateVerdict is what happens to an update input of the task being decided.
type updateVerdict int

const (
	updateAccept updateVerdict = iota
	updateReject
	updateDefer     // no handler yet, and the code has not run: try next task
	updateDuplicate // accepted before
)

// judgeUpdate validates a new update against the state the previous task
// left (live only; replay trusts history).
func (e *engine) judgeUpdate(a *history.UpdateAcceptedAttributes) (updateVerdict, *history.Failure) {
	switch {
	case e.more().updatesSeen[a.UpdateID]:
		return updateDuplicate, nil
	case e.done:
		return updateReject, &history.Failure{Message: "the workflow has returned", Type: "WorkflowClosed"}
	}
	h, ok := e.more().updateHandlers[a.Kind]
	if !ok {
		if !e.codeRan {
			return updateDefer, nil
		}
		known := slices.Sorted(maps.Keys(e.more().updateHandlers))
		return updateReject, &history.Failure{
			Message: fmt.Sprintf("no handler for update %q (handlers: %v)", a.Kind, known), Type: "UnknownUpdate",
		}
	}
	if h.validate == nil {
		return updateAccept, nil
	}
	if err := validateSafely(h.validate, a.Args); err != nil {
		failure := FailureFromError(err)
		if failure.Type == "" || strings.HasPrefix(failure.Type, "*") {
			failure.Type = "UpdateRejected"
		}
		return updateReject, failure
	}
	return updateAccept, nil
}

// validateSafely runs a validator (workflow code, outside a coroutine),
// turning a panic into a rejection.
func validateSafely(validate func([]byte) error, args []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &workflow.PanicError{Stack: string(debug.Stack()), Value: r}
		}
	}()
	return validate(args)
}

// pendingSignals are the signals received and not taken, oldest first.
func (e *engine) pendingSignals() []*history.SignalReceivedAttributes {
	type pending struct {
		kind   string
		signal env.Signal
	}
	var all []pending
	for kind, q := range e.more().signals {
		for _, sig := range q.Pending() {
			all = append(all, pending{kind: kind, signal: sig})
		}
	}
	slices.SortFunc(all, func(a, b pending) int { return int(a.signal.Seq - b.signal.Seq) })
	out := make([]*history.SignalReceivedAttributes, 0, len(all))
	for _, p := range all {
		out = append(out, &history.SignalReceivedAttributes{Args: p.signal.Args, Kind: p.kind})
	}
	return out
}
