package replay

import (
	"errors"
	"fmt"
	"strings"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/workflow"
)

// Failure types given to weir's own error types.
const (
	FailureTypeActivity = "ActivityError"
	// FailureTypeActivityResultType is a *workflow.ActivityResultTypeError.
	FailureTypeActivityResultType = "ActivityResultTypeMismatch"
	FailureTypeCanceled           = "Canceled"
	FailureTypePanic              = "PanicError"
	FailureTypePayload            = "PayloadTooLarge"
	FailureTypeTimeout            = "TimeoutError"
)

// FailureFromError converts an error to its persisted form, following the
// chain of causes. A *workflow.ApplicationError keeps its message, type,
// non-retryable flag and details; weir's error types get the FailureTypeXxx
// types; any other error gets its Go type (as retry policies'
// NonRetryableErrorTypes expect) and its message, less the text of the cause
// it wraps (recorded as its cause), so no text is repeated. The activity worker uses it too, for what
// activities return. It returns nil for nil.
func FailureFromError(err error) *history.Failure {
	return failureFromError(err, 0)
}

// maxFailureDepth bounds cause chains (a cyclic Unwrap must not hang us).
const maxFailureDepth = 32

func failureFromError(err error, depth int) *history.Failure {
	if err == nil || depth >= maxFailureDepth {
		return nil
	}
	switch e := err.(type) { //nolint:errorlint // each error of the chain is converted on its own
	case *workflow.ApplicationError:
		return &history.Failure{
			Message:      e.Message,
			Type:         e.Type,
			NonRetryable: e.NonRetryable,
			Details:      e.Details,
			Cause:        failureFromError(e.Cause, depth+1),
		}
	case *workflow.ActivityError:
		return &history.Failure{
			Message: fmt.Sprintf("activity %s (event %d, attempt %d) failed", e.Kind, e.ScheduledEventID, e.Attempt),
			Type:    FailureTypeActivity,
			Cause:   failureFromError(e.Cause, depth+1),
		}
	case *workflow.PanicError:
		return &history.Failure{Message: fmt.Sprint(e.Value), Type: FailureTypePanic, Stack: e.Stack}
	case *workflow.ActivityResultTypeError:
		return &history.Failure{Message: e.Error(), Type: FailureTypeActivityResultType, NonRetryable: true}
	case *workflow.PayloadTooLargeError:
		return &history.Failure{Message: e.Error(), Type: FailureTypePayload, NonRetryable: true}
	case *workflow.TimeoutError:
		return &history.Failure{
			Message: "timed out (" + e.TimeoutType + ")",
			Type:    FailureTypeTimeout,
			Cause:   failureFromError(e.LastFailure, depth+1),
		}
	}
	if err == workflow.ErrCanceled { //nolint:errorlint // the sentinel itself, not what wraps it
		return &history.Failure{Message: err.Error(), Type: FailureTypeCanceled}
	}
	cause := errors.Unwrap(err)
	return &history.Failure{
		Message: ownMessage(err, cause),
		Type:    fmt.Sprintf("%T", err),
		Cause:   failureFromError(cause, depth+1),
	}
}

// ownMessage is what err's text adds to its cause's: "charging order 7" of
// fmt.Errorf("charging order 7: %w", cause), whose text ends with the
// cause's, which the failure's cause records. The whole text otherwise.
func ownMessage(err, cause error) string {
	msg := err.Error()
	if cause == nil {
		return msg
	}
	if own, ok := strings.CutSuffix(msg, ": "+cause.Error()); ok && own != "" {
		return own
	}
	return msg
}
