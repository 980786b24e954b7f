package workflow

import (
	"errors"
	"fmt"

	"github.com/weirhq/weir/internal/history"
)

var (
	// ErrActivityResultType is matched by every [*ActivityResultTypeError].
	ErrActivityResultType = errors.New("workflow: activity result type mismatch")

	// ErrCanceled is matched (errors.Is) by the error of an activity that
	// was cancelled.
	ErrCanceled = errors.New("workflow: canceled")

	// ErrInvalidActivityOpts is matched by the error of an activity whose
	// options are invalid (it is never scheduled).
	ErrInvalidActivityOpts = errors.New("workflow: invalid activity options")

	// ErrNonDeterminism is matched by every [*NonDeterminismError].
	ErrNonDeterminism = errors.New("workflow: non-deterministic workflow code")

	// ErrPayloadTooLarge is matched by every [*PayloadTooLargeError].
	ErrPayloadTooLarge = errors.New("workflow: payload too large")

	// ErrPanic is matched by every [*PanicError].
	ErrPanic = errors.New("workflow: panic in workflow code")

	// ErrTimeout is matched by every [*TimeoutError].
	ErrTimeout = errors.New("workflow: activity timed out")
)

// ActivityError is the error of an activity's future when the activity
// failed, timed out or was cancelled. Its cause says why: an
// [*ApplicationError] for a failure, a [*TimeoutError], or [ErrCanceled].
type ActivityError struct {
	// Attempt is the activity's last attempt (1 is the first).
	Attempt int
	// Cause is why it failed.
	Cause error
	// Kind is the activity's kind.
	Kind string
	// ScheduledEventID is the ID of its ActivityScheduled event: the
	// activity's identity.
	ScheduledEventID int64
}

// Error implements error.
func (e *ActivityError) Error() string {
	return fmt.Sprintf("activity %s (event %d, attempt %d): %v", e.Kind, e.ScheduledEventID, e.Attempt, e.Cause)
}

// Unwrap returns the cause.
func (e *ActivityError) Unwrap() error { return e.Cause }

// ApplicationError is an error as it crosses the boundary between an activity
// and a workflow (and out of a failed workflow): a message, a type that retry
// policies match against NonRetryableErrorTypes, a non-retryable flag and
// optional encoded details. Return one from an activity to control its retries.
type ApplicationError struct {
	// Cause is the error this one wraps, if any.
	Cause error
	// Details is an optional encoded payload (JSON with the default codec).
	Details []byte
	// Message describes the error.
	Message string
	// NonRetryable stops retries of the activity that returned it.
	NonRetryable bool
	// Type classifies the error. For errors that weren't an
	// ApplicationError it is the error's Go type, e.g. "*errors.errorString".
	Type string
}

// Error implements error.
func (e *ApplicationError) Error() string {
	if e.Cause != nil {
		return e.Message + ": " + e.Cause.Error()
	}
	return e.Message
}

// Unwrap returns the cause.
func (e *ApplicationError) Unwrap() error { return e.Cause }

// TimeoutError is the cause of an [*ActivityError] for an activity that ran
// out of time. It matches [ErrTimeout].
type TimeoutError struct {
	// LastFailure is the previous attempt's error, if any.
	LastFailure error
	// TimeoutType is which timeout fired: "StartToClose", "ScheduleToClose"
	// or "Heartbeat".
	TimeoutType string
}

// Error implements error.
func (e *TimeoutError) Error() string {
	msg := "activity timed out (" + e.TimeoutType + ")"
	if e.LastFailure != nil {
		msg += ", last failure: " + e.LastFailure.Error()
	}
	return msg
}

// Unwrap returns the last failure.
func (e *TimeoutError) Unwrap() error { return e.LastFailure }

// Is matches [ErrTimeout].
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// ContinueAsNewError is returned by a workflow to end its run and start a
// new run of the same workflow ID with fresh args and an empty history. Make
// one with [ContinueAsNew].
type ContinueAsNewError struct {
	// Args are the next run's encoded args.
	Args []byte
	// Kind is the next run's workflow type.
	Kind string
}

// Error implements error.
func (e *ContinueAsNewError) Error() string {
	return "workflow: continue as new " + e.Kind
}

// ActivityResultTypeError reports an [ExecuteActivity] whose result type
// cannot hold what the activity registered on the worker returns. Its future
// fails with it at once: nothing is scheduled and the activity does not run.
// It is not retried (it is a bug in the code, not an attempt's failure) and
// matches [ErrActivityResultType].
type ActivityResultTypeError struct {
	// Kind is the activity's kind.
	Kind string
	// Registered is the result type of the activity registered on the
	// worker, e.g. "int".
	Registered string
	// Requested is the type ExecuteActivity was asked for, e.g. "string".
	Requested string
}

// Error implements error.
func (e *ActivityResultTypeError) Error() string {
	return fmt.Sprintf("workflow: activity %q returns %s, but ExecuteActivity asks for %s", e.Kind, e.Registered, e.Requested)
}

// Is matches [ErrActivityResultType].
func (e *ActivityResultTypeError) Is(target error) bool { return target == ErrActivityResultType }

// PayloadTooLargeError reports a payload larger than the engine's limit: the
// args of an activity (its future fails with it, and nothing is scheduled),
// a workflow's result (the workflow fails with it) or a side effect's value
// (the task fails). It matches [ErrPayloadTooLarge].
type PayloadTooLargeError struct {
	// Limit is the largest payload allowed, in bytes.
	Limit int
	// Size is the payload's size, in bytes.
	Size int
	// What says which payload, e.g. `args of activity "charge"`.
	What string
}

// Error implements error.
func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("workflow: %s: payload of %d bytes is over the limit of %d", e.What, e.Size, e.Limit)
}

// Is matches [ErrPayloadTooLarge].
func (e *PayloadTooLargeError) Is(target error) bool { return target == ErrPayloadTooLarge }

// checkPayload returns a *PayloadTooLargeError if data is over limit; what
// names the payload in it.
func checkPayload(limit int, data []byte, what func() string) error {
	if limit > 0 && len(data) > limit {
		return &PayloadTooLargeError{Limit: limit, Size: len(data), What: what()}
	}
	return nil
}

// PanicError is a panic in workflow code. The engine fails the workflow
// task with it (the task is retried and stays visible); it never fails the
// workflow. It matches [ErrPanic].
type PanicError struct {
	// Stack is the stack of the panicking coroutine, taken where it panicked.
	Stack string
	// Value is what the code panicked with.
	Value any
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("workflow: panic: %v", e.Value) }

// Is matches [ErrPanic].
func (e *PanicError) Is(target error) bool { return target == ErrPanic }

// Unwrap returns Value if it is an error (code that panics with an error).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// NonDeterminismError says that replayed workflow code did something other
// than what its history records, usually because the code changed while
// runs were in flight. The engine fails the workflow task with it (retried,
// visible) and never the workflow. It matches [ErrNonDeterminism].
type NonDeterminismError struct {
	// EventID is the history event where replay diverged: the recorded
	// command that didn't match, or the task boundary after which code
	// produced too few or too many commands.
	EventID int64
	// Expected is what history records there.
	Expected string
	// Got is what the code did.
	Got string
}

// Error implements error.
func (e *NonDeterminismError) Error() string {
	return fmt.Sprintf("workflow: non-deterministic code at event %d: history has %s, code did %s", e.EventID, e.Expected, e.Got)
}

// Is matches [ErrNonDeterminism].
func (e *NonDeterminismError) Is(target error) bool { return target == ErrNonDeterminism }

// errorFromFailure turns a persisted failure back into an error.
func errorFromFailure(f *history.Failure) error {
	if f == nil {
		return nil
	}
	return &ApplicationError{
		Cause:        errorFromFailure(f.Cause),
		Details:      f.Details,
		Message:      f.Message,
		NonRetryable: f.NonRetryable,
		Type:         f.Type,
	}
}
