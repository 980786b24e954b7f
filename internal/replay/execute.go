package replay

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"time"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay/coroutine"
)

// ErrInvalidHistory is matched by Execute's error when the history or an
// input can't be replayed whatever the code: a gap in event IDs, a missing
// WorkflowStarted, an undecodable event, an outcome of an activity that was
// never scheduled, and so on.
var ErrInvalidHistory = errors.New("replay: invalid history")

// DeadlockTimeoutDefault is how long workflow code may run without yielding
// to the engine before Execute gives up on it.
const DeadlockTimeoutDefault = time.Second

// MaxPayloadBytesDefault is the default limit on a payload recorded by
// workflow code (2 MiB).
const MaxPayloadBytesDefault = 2 << 20

// ErrDeadlock is matched by Execute's error when workflow code ran longer
// than ExecuteParams.DeadlockTimeout without yielding: it blocked on a
// channel, mutex, sleep or I/O instead of a workflow function, or looped.
// The error is a *coroutine.DeadlockError with the stuck goroutine's stack.
// That goroutine can't be killed: it is unwound as soon as it calls into
// the workflow package again.
var ErrDeadlock = coroutine.ErrDeadlock

// Info describes the run and the workflow task being executed; workflow code
// reads it with workflow.GetInfo.
type Info struct {
	// Generation numbers the runs of WorkflowID: 1, 2, …
	Generation int64
	// Kind is the workflow type.
	Kind string
	// RunID identifies the run.
	RunID string
	// TaskAttempt is the attempt of this workflow-task job (1 is the first).
	TaskAttempt int
	// WorkflowID is the caller-chosen identity of the workflow.
	WorkflowID string
}

// ExecuteParams are the inputs of one workflow task.
type ExecuteParams struct {
	// Codec encodes and decodes payloads. Defaults to JSONCodec.
	Codec Codec

	// DeadlockTimeout is how long workflow code may run without yielding
	// before the task fails with ErrDeadlock; negative disables the check.
	// Defaults to DeadlockTimeoutDefault (1 second).
	DeadlockTimeout time.Duration

	// ActivityResultType returns the result type of the activity of kind
	// registered on the worker, if it has one: workflow.ExecuteActivity[R]
	// fails at once, scheduling nothing, when R cannot hold it. It must
	// answer the same for every task of a run (a worker's registry does).
	// Nil means no activity is known: nothing is checked.
	ActivityResultType func(kind string) (reflect.Type, bool)

	// Go starts the goroutine of each of the workflow's coroutines (fn
	// returns when the coroutine ends). Nil means the go statement; a
	// worker passes goroutines it keeps for reuse, whose stacks have
	// already grown.
	Go func(fn func())

	// History is every committed event of the run, IDs 1…n, starting with
	// WorkflowStarted. It may be empty when Inputs starts with the
	// WorkflowStarted event (IDs 0).
	History []history.Event

	// Decode returns the attributes of one of History's events: what
	// history.DecodeAttributes returns, possibly kept from an earlier task
	// of the run. Attributes it returns are only read. Nil means
	// history.DecodeAttributes.
	Decode func(history.Event) (history.Attributes, error)

	// Info describes the run and the task. Empty identity fields are taken
	// from the WorkflowStarted event.
	Info Info

	// Inputs are the outcomes taken from the inbox (ActivityCompleted,
	// ActivityFailed, ActivityTimedOut, ActivityCanceled, TimerFired,
	// SignalReceived, CancelRequested), ID 0, in arrival order. They are delivered to workflow code at this
	// task's boundary.
	Inputs []history.Event

	// Logger receives what workflow code logs with workflow.GetLogger,
	// except while replaying. Defaults to discarding.
	Logger *slog.Logger

	// MaxPayloadBytes limits the payloads workflow code records: activity
	// args, side-effect values and the workflow's result (see
	// workflow.PayloadTooLargeError); negative means no limit. Payloads made
	// outside (activity results, signals) are the worker's and the
	// client's to check. Defaults to MaxPayloadBytesDefault.
	MaxPayloadBytes int

	// Now is the database time of this task: what workflow.Now returns in
	// it. Required.
	Now time.Time
}

// Outcome is what a workflow task decided.
type Outcome struct {
	// Activities are the activities scheduled by this task, in order: one
	// River job to insert for each, identified by EventID.
	Activities []ScheduledActivity

	// Canceled reports that the workflow ended cancelled (WorkflowCanceled):
	// it returned an error matching workflow.ErrCanceled after a
	// CancelRequested input. Completed is then true and Failure set.
	Canceled bool

	// CanceledActivities are the activities (ActivityScheduled event IDs)
	// this task asked to cancel, in order: one River job to cancel for each.
	// Any outcome they still produce is dropped.
	CanceledActivities []int64

	// CanceledTimers are the timers (TimerStarted event IDs) this task
	// cancelled. Their TimerFired, if it still comes, is dropped.
	CanceledTimers []int64

	// CarriedSignals are, when the run continued as new, the signals it
	// received but its code never took, oldest first: the worker gives them
	// to the next run, so none is lost.
	CarriedSignals []*history.SignalReceivedAttributes

	// Children are the child workflows started by this task, in order: one
	// run to start for each (in the same transaction), identified by
	// EventID.
	Children []ScheduledChild

	// Completed reports that the workflow returned (Events then ends with
	// WorkflowCompleted, WorkflowFailed, WorkflowCanceled or
	// WorkflowContinuedAsNew), or that History was already closed (Events is
	// then empty).
	Completed bool

	// ContinuedAsNew is set when the workflow ended its run to start over
	// (workflow.ContinueAsNew): the worker closes the run as
	// continued_as_new and starts the next run of the same workflow ID with
	// this kind and args. Completed is then true.
	ContinuedAsNew *history.WorkflowContinuedAsNewAttributes

	// DeferredInputs are update inputs that came before the workflow's code
	// first ran, so before it could register their handlers: keep them for
	// the next task (which the worker must queue).
	DeferredInputs []history.Event

	// Dropped are inputs that were not appended because they can't change
	// anything: outcomes of activities already resolved (W5) or unknown,
	// and any input once the run is closed. The worker consumes them all the
	// same.
	Dropped []DroppedInput

	// Events are the events to append, numbered n+1, n+2, …: the accepted
	// inputs, the task's WorkflowTaskStarted boundary, then the commands.
	// Their Time is ExecuteParams.Now.
	Events []history.Event

	// Failure is what the workflow returned, when it returned an error.
	Failure *history.Failure

	// RejectedUpdates are update inputs the task rejected (their validator
	// failed, no handler, the workflow has returned): nothing was recorded;
	// tell their callers.
	RejectedUpdates []RejectedUpdate

	// Result is the workflow's encoded result, when it returned without
	// error.
	Result []byte

	// Timers are the durable timers started by this task, in order: one
	// TimerFired input to deliver at each FireAt.
	Timers []StartedTimer
}

// StartedTimer is a durable timer started by a task.
type StartedTimer struct {
	// Attributes are those of its TimerStarted event; FireAt is when the
	// worker must deliver a TimerFired input for it.
	Attributes *history.TimerStartedAttributes
	// EventID is the ID of its TimerStarted event: the timer's identity,
	// which its TimerFired's StartedEventID must carry.
	EventID int64
}

// ScheduledChild is a child workflow started by a task.
type ScheduledChild struct {
	Attributes *history.ChildWorkflowScheduledAttributes
	EventID    int64
}

// RejectedUpdate is an update the task rejected.
type RejectedUpdate struct {
	Failure  *history.Failure
	UpdateID string
}

// ScheduledActivity is an activity scheduled by a task.
type ScheduledActivity struct {
	// Attributes are those of its ActivityScheduled event.
	Attributes *history.ActivityScheduledAttributes
	// EventID is the ID of its ActivityScheduled event: the activity's
	// identity, which its outcome's ScheduledEventID must carry.
	EventID int64
}

// DroppedInput is an input that Execute did not append.
type DroppedInput struct {
	// Input is the input as given.
	Input history.Event
	// Reason says why it was dropped.
	Reason string
}

// Execute runs one workflow task: it replays params.History, delivers
// params.Inputs, runs the workflow until every coroutine is blocked or it
// returns, and returns the events to append. See the package documentation.
// A returned error fails the task, never the workflow; Execute never
// returns a nil Outcome without an error.
func Execute(ctx context.Context, def *Definition, params *ExecuteParams) (*Outcome, error) {
	out, run, err := Start(ctx, def, params)
	run.Close()
	return out, err
}

// Replay replays params.History (open or closed) and reports whether the
// workflow code still makes the decisions it records: nil, or an error
// wrapping a *workflow.NonDeterminismError (or another error Execute would
// return). Inputs and Now are ignored; nothing is decided. Use it to check
// captured histories against new code.
func Replay(ctx context.Context, def *Definition, params *ExecuteParams) error {
	e, err := newEngine(ctx, def, params)
	if err != nil {
		return err
	}
	defer e.sched.Close()
	tasks, _, err := splitHistory(params.History, params.Decode)
	if err != nil {
		return err
	}
	for i := range tasks {
		if err := e.replayTask(&tasks[i]); err != nil {
			return err
		}
	}
	return nil
}
