package server

import (
	"encoding/json"
	"net/http"

	"github.com/weirhq/weir/client"
)

// QueryRequest is the body of POST …/workflows/{workflow_id}/query.
type QueryRequest struct {
	// Args are the query's args as JSON.
	Args json.RawMessage `json:"args,omitempty"`

	// Kind is the query's kind. Required.
	Kind string `json:"kind"`

	// Timeout bounds the wait for a worker's answer, as a Go duration.
	// Optional: the client's default.
	Timeout string `json:"timeout,omitempty"`
}

// UpdateRequest is the body of POST …/workflows/{workflow_id}/update.
type UpdateRequest struct {
	// Args are the update's args as JSON.
	Args json.RawMessage `json:"args,omitempty"`

	// Kind is the update's kind. Required.
	Kind string `json:"kind"`

	// UpdateID makes the update idempotent: sending it again returns the
	// first answer. Optional.
	UpdateID string `json:"update_id,omitempty"`
}

// ValueResponse is the answer of a query or an update.
type ValueResponse struct {
	// Result is what the handler returned, as JSON.
	Result json.RawMessage `json:"result"`
}

// SignalWithStartRequest is the body of POST
// …/workflows/{workflow_id}/signal-with-start.
type SignalWithStartRequest struct {
	// Signal is the signal to send.
	Signal SignalRequest `json:"signal"`

	// Start starts the workflow if it has no live run; its workflow_id, if
	// given, must match the path's.
	Start StartRequest `json:"start"`
}

func (s *Server) handleQuery(r *http.Request) (int, any, error) {
	c, workflowID, runID, req, err := targetBody[QueryRequest](s, r, false)
	if err != nil {
		return 0, nil, err
	}
	if err := checkCall("", "query", req.Kind, "", "", req.Args); err != nil {
		return 0, nil, err
	}
	opts := &client.QueryOpts{}
	if opts.Timeout, err = parseDuration("timeout", req.Timeout); err != nil {
		return 0, nil, err
	}
	var result json.RawMessage
	if err := c.Query(r.Context(), workflowID, runID, client.RawArgs{JSON: req.Args, KindName: req.Kind}, &result, opts); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, &ValueResponse{Result: result}, nil
}

func (s *Server) handleUpdate(r *http.Request) (int, any, error) {
	c, workflowID, runID, req, err := targetBody[UpdateRequest](s, r, false)
	if err != nil {
		return 0, nil, err
	}
	if err := checkCall("", "update", req.Kind, "update_id", req.UpdateID, req.Args); err != nil {
		return 0, nil, err
	}
	var result json.RawMessage
	err = c.Update(r.Context(), workflowID, runID, client.RawArgs{JSON: req.Args, KindName: req.Kind}, &result,
		&client.UpdateOpts{UpdateID: req.UpdateID})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, &ValueResponse{Result: result}, nil
}

func (s *Server) handleSignalWithStart(r *http.Request) (int, any, error) {
	c, workflowID, _, req, err := targetBody[SignalWithStartRequest](s, r, false)
	if err != nil {
		return 0, nil, err
	}
	if req.Start.WorkflowID != "" && req.Start.WorkflowID != workflowID {
		return 0, nil, invalidArgument("start.workflow_id", "start.workflow_id %q is not the path's %q", req.Start.WorkflowID, workflowID)
	}
	req.Start.WorkflowID = workflowID
	opts, err := startOpts(&req.Start)
	if err != nil {
		return 0, nil, err
	}
	if err := checkCall("signal.", "signal", req.Signal.Kind, "request_id", req.Signal.RequestID, req.Signal.Args); err != nil {
		return 0, nil, err
	}
	run, err := c.SignalWithStart(r.Context(), client.RawArgs{JSON: req.Start.Args, KindName: req.Start.Kind}, opts,
		client.RawArgs{JSON: req.Signal.Args, KindName: req.Signal.Kind}, &client.SignalOpts{RequestID: req.Signal.RequestID})
	if err != nil {
		return 0, nil, err
	}
	return started(run)
}
