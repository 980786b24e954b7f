package history

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// EventType names the kind of an event. The values are persisted; never
// rename one.
type EventType string

// The event types. Inputs come from outside the workflow, commands are decided
// by workflow code, and WorkflowTaskStarted separates the two.
const (
	// EventWorkflowStarted is always event 1 of a run. Input.
	EventWorkflowStarted EventType = "WorkflowStarted"
	// EventWorkflowTaskStarted is the boundary of a workflow task. It carries
	// the time workflow code saw during that task.
	EventWorkflowTaskStarted EventType = "WorkflowTaskStarted"
	// EventActivityScheduled records that workflow code scheduled an
	// activity; its event ID is the activity's identity. Command.
	EventActivityScheduled EventType = "ActivityScheduled"
	// EventActivityCompleted is an activity's successful outcome. Input.
	EventActivityCompleted EventType = "ActivityCompleted"
	// EventActivityFailed is an activity's final failure (after retries).
	// Input.
	EventActivityFailed EventType = "ActivityFailed"
	// EventActivityTimedOut is an activity that ran out of time. Input.
	EventActivityTimedOut EventType = "ActivityTimedOut"
	// EventActivityCanceled is an activity that was cancelled. Input.
	EventActivityCanceled EventType = "ActivityCanceled"
	// EventMarkerRecorded records a value decided by workflow code that
	// must be replayed rather than recomputed (a side effect). Command.
	EventMarkerRecorded EventType = "MarkerRecorded"
	// EventWorkflowCompleted is a run's successful end. Command.
	EventWorkflowCompleted EventType = "WorkflowCompleted"
	// EventWorkflowFailed is a run that returned an error. Command.
	EventWorkflowFailed EventType = "WorkflowFailed"
	// EventCancelRequested asks the run to cancel itself: workflow code sees
	// its Context cancelled. Input.
	EventCancelRequested EventType = "CancelRequested"
	// EventActivityCancelRequested records that workflow code cancelled an
	// activity (the worker cancels its River job; any later outcome is
	// dropped, the workflow having moved on). Command.
	EventActivityCancelRequested EventType = "ActivityCancelRequested"
	// EventWorkflowCanceled is a run that ended because it was cancelled
	// (it returned workflow.ErrCanceled after a CancelRequested). Command.
	EventWorkflowCanceled EventType = "WorkflowCanceled"
	// EventTimerStarted records that workflow code started a durable timer;
	// its event ID is the timer's identity. Command.
	EventTimerStarted EventType = "TimerStarted"
	// EventTimerFired is a timer that reached its fire time. Input.
	EventTimerFired EventType = "TimerFired"
	// EventTimerCanceled records that workflow code cancelled a timer (any
	// later TimerFired for it is dropped). Command.
	EventTimerCanceled EventType = "TimerCanceled"
	// EventSignalReceived is a signal sent to the run. Input.
	EventSignalReceived EventType = "SignalReceived"
	// EventWorkflowContinuedAsNew ends a run that asked to start over as a
	// new run of the same workflow ID with fresh args (and a fresh
	// history). Command.
	EventWorkflowContinuedAsNew EventType = "WorkflowContinuedAsNew"
	// EventUpdateAccepted is an update the workflow's validator accepted; its
	// handler runs from here. Input (a rejected update never enters history).
	EventUpdateAccepted EventType = "UpdateAccepted"
	// EventUpdateCompleted is the result of an update's handler. Command.
	EventUpdateCompleted EventType = "UpdateCompleted"
	// EventChildWorkflowScheduled records that workflow code started a child
	// workflow; its event ID is the child's identity in this run. Command.
	EventChildWorkflowScheduled EventType = "ChildWorkflowScheduled"
	// EventChildWorkflowCompleted is a child's successful end. Input.
	EventChildWorkflowCompleted EventType = "ChildWorkflowCompleted"
	// EventChildWorkflowFailed is a child that did not complete: it failed,
	// was cancelled, terminated or timed out, or could not start. Input.
	EventChildWorkflowFailed EventType = "ChildWorkflowFailed"
)

// EventTypes returns every event type, inputs first, then the boundary, then
// commands (for a check constraint, say).
func EventTypes() []EventType {
	return []EventType{
		EventWorkflowStarted, EventActivityCompleted, EventActivityFailed, EventActivityTimedOut,
		EventActivityCanceled, EventTimerFired, EventSignalReceived, EventCancelRequested, EventUpdateAccepted,
		EventChildWorkflowCompleted, EventChildWorkflowFailed,
		EventWorkflowTaskStarted,
		EventActivityScheduled, EventActivityCancelRequested, EventTimerStarted, EventTimerCanceled,
		EventMarkerRecorded, EventWorkflowCompleted, EventWorkflowFailed, EventWorkflowCanceled,
		EventWorkflowContinuedAsNew, EventUpdateCompleted, EventChildWorkflowScheduled,
	}
}

// ErrInvalidEvent is matched (with errors.Is) by every error that reports an
// event or attributes that can't be decoded or are incomplete.
var ErrInvalidEvent = errors.New("history: invalid event")

// Event is one entry of a run's history.
type Event struct {
	// ID is the event's position in the run's history: 1, 2, 3… without
	// gaps. Inputs handed to the engine carry 0; the engine numbers them.
	ID int64 `json:"id"`

	// Type says what happened and how to decode Attributes.
	Type EventType `json:"type"`

	// Attributes are the JSON-encoded attributes of Type (for example
	// [ActivityScheduledAttributes] for [EventActivityScheduled]).
	Attributes json.RawMessage `json:"attributes"`

	// Time is the database time at which the event was appended.
	Time time.Time `json:"time"`
}

// IsInput reports whether t is an input: an outcome that arrives from outside
// workflow code and is delivered to it at the next task boundary.
func (t EventType) IsInput() bool {
	switch t {
	case EventWorkflowStarted, EventActivityCompleted, EventActivityFailed,
		EventActivityTimedOut, EventActivityCanceled, EventCancelRequested, EventTimerFired,
		EventSignalReceived, EventUpdateAccepted, EventChildWorkflowCompleted, EventChildWorkflowFailed:
		return true
	}
	return false
}

// IsCommand reports whether t is a command: an event decided by workflow code.
func (t EventType) IsCommand() bool {
	switch t {
	case EventActivityScheduled, EventActivityCancelRequested, EventMarkerRecorded,
		EventTimerStarted, EventTimerCanceled,
		EventWorkflowCompleted, EventWorkflowFailed, EventWorkflowCanceled,
		EventWorkflowContinuedAsNew, EventUpdateCompleted, EventChildWorkflowScheduled:
		return true
	}
	return false
}

// IsTerminal reports whether t ends a run.
func (t EventType) IsTerminal() bool {
	switch t {
	case EventWorkflowCompleted, EventWorkflowFailed, EventWorkflowCanceled, EventWorkflowContinuedAsNew:
		return true
	}
	return false
}

// InvalidEventError reports an event that can't be decoded or is incomplete.
// It matches [ErrInvalidEvent].
type InvalidEventError struct {
	// ID is the event's ID (0 for an input not numbered yet).
	ID int64
	// Type is the event's type as found.
	Type EventType
	// Reason says what is wrong.
	Reason string
	// Err is the underlying decoding error, if any.
	Err error
}

// Error implements error.
func (e *InvalidEventError) Error() string {
	msg := fmt.Sprintf("history: invalid %s event %d: %s", e.Type, e.ID, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying decoding error.
func (e *InvalidEventError) Unwrap() error { return e.Err }

// Is matches [ErrInvalidEvent].
func (e *InvalidEventError) Is(target error) bool { return target == ErrInvalidEvent }
