package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/google/uuid"

	"github.com/weirhq/weir/client"
)

// Error codes of the API. Each error response is
//
//	{"error": {"code": "...", "message": "...", "data": {...}}}
//
// with data holding the IDs involved.
const (
	CodeDeadlineExceeded       = "deadline_exceeded"
	CodeInternal               = "internal"
	CodeInvalidArgument        = "invalid_argument"
	CodeNotFound               = "not_found"
	CodePayloadTooLarge        = "payload_too_large"
	CodePermissionDenied       = "permission_denied"
	CodeQueryFailed            = "query_failed"
	CodeQueryTimeout           = "query_timeout"
	CodeRequestConflict        = "request_conflict"
	CodeRunClosed              = "run_closed"
	CodeScheduleAlreadyExists  = "schedule_already_exists"
	CodeUnauthenticated        = "unauthenticated"
	CodeUnavailable            = "unavailable"
	CodeUnimplemented          = "unimplemented"
	CodeUpdateFailed           = "update_failed"
	CodeUpdateRejected         = "update_rejected"
	CodeWorkflowAlreadyStarted = "workflow_already_started"
	CodeWorkflowIDReuse        = "workflow_id_reuse"
)

// ErrorResponse is the body of every error the API returns.
type ErrorResponse struct {
	Error *Error `json:"error"`
}

// Error is an API error: a stable code, a message for people and structured
// data for programs.
type Error struct {
	// Code is one of the Code constants.
	Code string `json:"code"`

	// Data holds the IDs and values involved, by name.
	Data map[string]any `json:"data,omitempty"`

	// Message explains the error.
	Message string `json:"message"`

	// Status is the HTTP status the error is sent with.
	Status int `json:"-"`
}

// Error implements error.
func (e *Error) Error() string { return e.Code + ": " + e.Message }

func newError(status int, code, message string, data map[string]any) *Error {
	return &Error{Code: code, Data: data, Message: message, Status: status}
}

func invalidArgument(field, format string, args ...any) *Error {
	return newError(http.StatusBadRequest, CodeInvalidArgument, fmt.Sprintf(format, args...), map[string]any{"field": field})
}

// apiError turns an error from the client (or from reading a request) into
// the API error it stands for.
func (s *Server) apiError(r *http.Request, err error) *Error {
	var (
		apiErr   *Error
		started  *client.WorkflowAlreadyStartedError
		reuse    *client.WorkflowIDReuseError
		conflict *client.RequestConflictError
		notFound *client.RunNotFoundError
		closed   *client.RunClosedError
		maxBytes *http.MaxBytesError
		qTimeout *client.QueryTimeoutError
		qFailed  *client.QueryFailedError
		rejected *client.UpdateRejectedError
		uFailed  *client.UpdateFailedError
		noSched  *client.ScheduleNotFoundError
		noFill   *client.BackfillNotFoundError
		tooLarge *client.BackfillTooLargeError
	)
	switch {
	case errors.As(err, &apiErr):
		return apiErr
	case errors.As(err, &started):
		return newError(http.StatusConflict, CodeWorkflowAlreadyStarted, started.Error(), map[string]any{
			"generation": started.Generation, "namespace": started.Namespace,
			"run_id": started.RunID.String(), "workflow_id": started.WorkflowID,
		})
	case errors.As(err, &reuse):
		return newError(http.StatusConflict, CodeWorkflowIDReuse, reuse.Error(), map[string]any{
			"generation": reuse.Generation, "last_state": reuse.LastState, "policy": policyName(reuse.Policy),
			"run_id": reuse.RunID.String(), "workflow_id": reuse.WorkflowID,
		})
	case errors.As(err, &conflict):
		return newError(http.StatusConflict, CodeRequestConflict, conflict.Error(), map[string]any{
			"generation": conflict.Generation, "request_id": conflict.RequestID,
			"run_id": conflict.RunID.String(), "workflow_id": conflict.WorkflowID,
		})
	case errors.As(err, &notFound):
		data := map[string]any{"workflow_id": notFound.WorkflowID}
		if notFound.RunID != uuid.Nil {
			data["run_id"] = notFound.RunID.String()
		}
		return newError(http.StatusNotFound, CodeNotFound, notFound.Error(), data)
	case errors.As(err, &noSched):
		return newError(http.StatusNotFound, CodeNotFound, noSched.Error(), map[string]any{
			"namespace": noSched.Namespace, "schedule_id": noSched.ID,
		})
	case errors.As(err, &noFill):
		return newError(http.StatusNotFound, CodeNotFound, noFill.Error(), map[string]any{
			"backfill_id": noFill.ID.String(), "namespace": noFill.Namespace,
		})
	case errors.As(err, &tooLarge):
		return newError(http.StatusBadRequest, CodeInvalidArgument, tooLarge.Error(), map[string]any{
			"field": "end", "max_due_times": tooLarge.Max, "schedule_id": tooLarge.ScheduleID,
		})
	case errors.As(err, &closed):
		return newError(http.StatusConflict, CodeRunClosed, closed.Error(), map[string]any{
			"generation": closed.Generation, "run_id": closed.RunID.String(),
			"state": closed.State, "workflow_id": closed.WorkflowID,
		})
	case errors.As(err, &qTimeout):
		return newError(http.StatusGatewayTimeout, CodeQueryTimeout, qTimeout.Error(), map[string]any{
			"query": qTimeout.Query, "run_id": qTimeout.RunID.String(), "workflow_id": qTimeout.WorkflowID,
		})
	case errors.As(err, &qFailed):
		return newError(http.StatusUnprocessableEntity, CodeQueryFailed, qFailed.Error(), map[string]any{
			"failure": qFailed.Failure, "query": qFailed.Query, "run_id": qFailed.RunID.String(), "workflow_id": qFailed.WorkflowID,
		})
	case errors.As(err, &rejected):
		return newError(http.StatusConflict, CodeUpdateRejected, rejected.Error(), map[string]any{
			"failure": rejected.Failure, "run_id": rejected.RunID.String(), "update_id": rejected.UpdateID, "workflow_id": rejected.WorkflowID,
		})
	case errors.As(err, &uFailed):
		return newError(http.StatusUnprocessableEntity, CodeUpdateFailed, uFailed.Error(), map[string]any{
			"failure": uFailed.Failure, "run_id": uFailed.RunID.String(), "update_id": uFailed.UpdateID, "workflow_id": uFailed.WorkflowID,
		})
	case errors.As(err, &maxBytes):
		return newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
			fmt.Sprintf("request body exceeds %d bytes", maxBytes.Limit), map[string]any{"limit": maxBytes.Limit})
	case errors.Is(err, client.ErrPayloadTooLarge):
		return newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, err.Error(), nil)
	case errors.Is(err, client.ErrPayload):
		return newError(http.StatusBadRequest, CodeInvalidArgument, err.Error(), map[string]any{"field": "args"})
	case errors.Is(err, client.ErrInvalidCursor):
		return newError(http.StatusBadRequest, CodeInvalidArgument, err.Error(), map[string]any{"field": "cursor"})
	case errors.Is(err, context.DeadlineExceeded):
		return newError(http.StatusGatewayTimeout, CodeDeadlineExceeded, "the request took longer than the server allows", nil)
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The caller went away (gave up a long poll, say): nothing failed
		// here, and no one reads the answer.
		s.config.Logger.DebugContext(r.Context(), "API request cancelled by its caller",
			slog.String("method", r.Method), slog.String("path", r.URL.Path))
		return newError(http.StatusServiceUnavailable, CodeUnavailable, "the request was cancelled by its caller", nil)
	default:
		s.config.Logger.ErrorContext(r.Context(), "API request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		return newError(http.StatusInternalServerError, CodeInternal, "internal error (logged by the server)", nil)
	}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	apiErr := s.apiError(r, err)
	if apiErr.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="weir"`)
	}
	s.writeJSON(w, apiErr.Status, &ErrorResponse{Error: apiErr})
}
