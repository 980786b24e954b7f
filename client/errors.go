package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// ErrWorkflowAlreadyStarted is matched (errors.Is) by a
// *WorkflowAlreadyStartedError.
var ErrWorkflowAlreadyStarted = errors.New("weir: workflow already started")

// WorkflowAlreadyStartedError is returned by Start when the workflow ID has a
// live run that a different request started. It is never a success: the
// caller's start did not happen.
type WorkflowAlreadyStartedError struct {
	// Generation is the live run's generation.
	Generation int64

	// Namespace is the workflow's namespace.
	Namespace string

	// RunID is the live run's ID.
	RunID uuid.UUID

	// WorkflowID is the contested workflow ID.
	WorkflowID string
}

func (e *WorkflowAlreadyStartedError) Error() string {
	return fmt.Sprintf("weir: workflow %s already has a live run %s (generation %d) started by another request",
		e.WorkflowID, e.RunID, e.Generation)
}

// Is makes errors.Is(err, ErrWorkflowAlreadyStarted) true.
func (e *WorkflowAlreadyStartedError) Is(target error) bool {
	return target == ErrWorkflowAlreadyStarted
}

// ErrWorkflowIDReuse is matched (errors.Is) by a *WorkflowIDReuseError.
var ErrWorkflowIDReuse = errors.New("weir: workflow ID reuse not allowed")

// WorkflowIDReuseError is returned by Start when the workflow ID's last run
// has closed and the start's IDReusePolicy forbids another.
type WorkflowIDReuseError struct {
	// Generation and RunID identify the last run.
	Generation int64
	RunID      uuid.UUID

	// LastState is how the last run ended.
	LastState string

	// Policy is the policy that refused the start.
	Policy IDReusePolicy

	// WorkflowID is the workflow ID.
	WorkflowID string
}

func (e *WorkflowIDReuseError) Error() string {
	return fmt.Sprintf("weir: workflow %s may not start again under %s: its last run %s (generation %d) ended %s",
		e.WorkflowID, e.Policy, e.RunID, e.Generation, e.LastState)
}

// Is makes errors.Is(err, ErrWorkflowIDReuse) true.
func (e *WorkflowIDReuseError) Is(target error) bool { return target == ErrWorkflowIDReuse }

// ErrRequestConflict is matched (errors.Is) by a *RequestConflictError.
var ErrRequestConflict = errors.New("weir: request ID reused for a different request")

// RequestConflictError means a start reused a request ID with different
// arguments than the start that first used it.
type RequestConflictError struct {
	// Generation and RunID identify the run the request ID belongs to.
	Generation int64
	RunID      uuid.UUID

	// RequestID is the reused request ID.
	RequestID string

	// WorkflowID is the workflow ID of both requests.
	WorkflowID string
}

func (e *RequestConflictError) Error() string {
	return fmt.Sprintf("weir: request ID %q of workflow %s already started run %s (generation %d) with different arguments",
		e.RequestID, e.WorkflowID, e.RunID, e.Generation)
}

// Is makes errors.Is(err, ErrRequestConflict) true.
func (e *RequestConflictError) Is(target error) bool { return target == ErrRequestConflict }

// ErrRunNotFound is matched (errors.Is) by a *RunNotFoundError.
var ErrRunNotFound = errors.New("weir: workflow run not found")

// RunNotFoundError means no run has the given identity.
type RunNotFoundError struct {
	RunID      uuid.UUID
	WorkflowID string
}

func (e *RunNotFoundError) Error() string {
	switch {
	case e.RunID == uuid.Nil:
		return fmt.Sprintf("weir: no workflow %s", e.WorkflowID)
	case e.WorkflowID == "":
		return fmt.Sprintf("weir: no run %s", e.RunID)
	}
	return fmt.Sprintf("weir: workflow %s has no run %s", e.WorkflowID, e.RunID)
}

// Is makes errors.Is(err, ErrRunNotFound) true.
func (e *RunNotFoundError) Is(target error) bool { return target == ErrRunNotFound }

// ErrWorkflowFailed is matched (errors.Is) by a *WorkflowFailedError.
var ErrWorkflowFailed = errors.New("weir: workflow did not complete")

// WorkflowFailedError is returned by Get when the run ended in any state
// but completed: failed, cancelled, terminated, timed out.
type WorkflowFailedError struct {
	// Failure is the failure the workflow returned, if it returned one.
	Failure *Failure

	// Generation and RunID identify the run.
	Generation int64
	RunID      uuid.UUID

	// State is the run's final state ("failed", "cancelled", …).
	State string

	// WorkflowID is the run's workflow ID.
	WorkflowID string
}

func (e *WorkflowFailedError) Error() string {
	msg := fmt.Sprintf("weir: workflow %s run %s %s", e.WorkflowID, e.RunID, e.State)
	if e.Failure != nil {
		msg += ": " + e.Failure.Error()
	}
	return msg
}

// ErrWorkflowTimedOut is matched (errors.Is) by a *WorkflowFailedError of a
// run that timed out.
var ErrWorkflowTimedOut = errors.New("weir: workflow timed out")

// ErrWorkflowTerminated is matched (errors.Is) by a *WorkflowFailedError of
// a run that was terminated.
var ErrWorkflowTerminated = errors.New("weir: workflow terminated")

// Is makes errors.Is(err, ErrWorkflowFailed) true, and ErrWorkflowTimedOut
// or ErrWorkflowTerminated for runs that ended so.
func (e *WorkflowFailedError) Is(target error) bool {
	switch target {
	case ErrWorkflowFailed:
		return true
	case ErrWorkflowTimedOut:
		return e.State == "timed_out"
	case ErrWorkflowTerminated:
		return e.State == "terminated"
	}
	return false
}

// Unwrap exposes the failure to errors.As.
func (e *WorkflowFailedError) Unwrap() error {
	if e.Failure == nil {
		return nil
	}
	return e.Failure
}

// Failure is an error as stored in history: what a workflow or activity
// returned, with its type, so callers can branch on it.
type Failure struct {
	// Cause is the wrapped failure, if any.
	Cause *Failure `json:"cause,omitempty"`

	// Details are codec-encoded details the failure carries.
	Details []byte `json:"details,omitempty"`

	// Message is the error's text.
	Message string `json:"message"`

	// NonRetryable marks failures that retry policies must not retry.
	NonRetryable bool `json:"non_retryable,omitempty"`

	// Stack is the stack trace of a panic, when the failure was one.
	Stack string `json:"stack,omitempty"`

	// Type names the error's kind (an application error type, "panic",
	// "timeout", "canceled", …).
	Type string `json:"type,omitempty"`
}

// Error is the failure's message, then its causes', each once: a message
// that already ends with its cause's text (a Go error wrapping another)
// does not repeat it. An application's error type ("InvalidName: name is
// required") prefixes its message; Go type names ("*fmt.wrapError") and the
// types of weir's wrappers, whose messages say what they are, do not.
func (f *Failure) Error() string {
	msg := f.Message
	if shownType(f.Type) {
		msg = strings.TrimSuffix(f.Type+": "+msg, ": ")
	}
	if f.Cause == nil {
		return msg
	}
	cause := f.Cause.Error()
	switch {
	case msg == "" || msg == cause:
		return cause
	case strings.HasSuffix(msg, cause):
		return msg
	}
	return msg + ": " + cause
}

// ShownType is the failure's type as a person reads it: empty when Type is
// the name of a Go type ("*fmt.wrapError"), which weir records for an error
// that names no type of its own, else Type.
func (f *Failure) ShownType() string {
	if strings.HasPrefix(f.Type, "*") || strings.Contains(f.Type, ".") {
		return ""
	}
	return f.Type
}

// shownType reports whether Failure.Error prints type t: not a Go type's
// name ("*fmt.wrapError", which weir records for errors that name no type
// themselves), nor a wrapper of weir's whose message says what it is.
func shownType(t string) bool {
	switch t {
	case "", "ActivityError", "Canceled", "TimeoutError":
		return false
	}
	return !strings.HasPrefix(t, "*") && !strings.Contains(t, ".")
}

// Unwrap returns the cause.
func (f *Failure) Unwrap() error {
	if f.Cause == nil {
		return nil
	}
	return f.Cause
}

func decodeFailure(data []byte) *Failure {
	if len(data) == 0 {
		return nil
	}
	var f Failure
	if err := json.Unmarshal(data, &f); err != nil {
		return &Failure{Message: string(data), Type: "undecodable"}
	}
	return &f
}
