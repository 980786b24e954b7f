package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/weirhq/weir/client"
)

// StartRequest is the body of POST /api/v1/namespaces/{namespace}/workflows.
type StartRequest struct {
	// Args are the workflow's args as JSON.
	Args json.RawMessage `json:"args,omitempty"`

	// ExecutionTimeout bounds the workflow across its runs, as a Go
	// duration ("1h"). Optional.
	ExecutionTimeout string `json:"execution_timeout,omitempty"`

	// IDReusePolicy is allow_duplicate (the default),
	// allow_duplicate_failed_only or reject_duplicate.
	IDReusePolicy string `json:"id_reuse_policy,omitempty"`

	// Kind is the workflow's kind. Required.
	Kind string `json:"kind"`

	// Queue is the River queue of the run's tasks. Optional.
	Queue string `json:"queue,omitempty"`

	// RequestID makes the start idempotent: a repeat with the same args
	// returns the same run with created false. Optional.
	RequestID string `json:"request_id,omitempty"`

	// RunTimeout bounds this run, as a Go duration. Optional.
	RunTimeout string `json:"run_timeout,omitempty"`

	// WorkflowID is the run's stable identity. Optional: a random UUID.
	WorkflowID string `json:"workflow_id,omitempty"`
}

// RunResponse is the body of a start: 201 when it created the run, 200 when
// it replayed an earlier start with the same request ID.
type RunResponse struct {
	Created    bool      `json:"created"`
	Generation int64     `json:"generation"`
	Namespace  string    `json:"namespace"`
	RunID      uuid.UUID `json:"run_id"`
	WorkflowID string    `json:"workflow_id"`
}

var policies = map[string]client.IDReusePolicy{
	"allow_duplicate":             client.IDReuseAllowDuplicate,
	"allow_duplicate_failed_only": client.IDReuseAllowDuplicateFailedOnly,
	"reject_duplicate":            client.IDReuseRejectDuplicate,
}

func policyName(p client.IDReusePolicy) string {
	for name, policy := range policies {
		if policy == p {
			return name
		}
	}
	return p.String()
}

// checkCall checks what signal, query and update requests share: the kind
// of the what ("signal", …), the caller's ID (in field idField, "" if the
// call has none) and the args; prefix qualifies the field names
// ("signal." inside a signal-with-start).
func checkCall(prefix, what, kind, idField, id string, args json.RawMessage) error {
	if !validName(kind) {
		return invalidArgument(prefix+"kind", "invalid %s kind %q: %s", what, kind, nameRule)
	}
	if idField != "" && len(id) > 255 {
		return invalidArgument(prefix+idField, "%s is %d bytes; at most 255", idField, len(id))
	}
	return checkJSONText(prefix+"args", args)
}

// checkQueue checks a River queue name, if one is given.
func checkQueue(queue string) error {
	if queue != "" && (len(queue) > 64 || !queueRE.MatchString(queue)) {
		return invalidArgument("queue", "invalid queue %q: lowercase letters and digits separated by _ or -, at most 64", queue)
	}
	return nil
}

// startOpts checks a start request and turns it into StartOpts.
func startOpts(req *StartRequest) (*client.StartOpts, error) {
	if !validName(req.Kind) {
		return nil, invalidArgument("kind", "invalid workflow kind %q: %s", req.Kind, nameRule)
	}
	if len(req.WorkflowID) > 1000 {
		return nil, invalidArgument("workflow_id", "workflow_id is %d bytes; at most 1000", len(req.WorkflowID))
	}
	if len(req.RequestID) > 255 {
		return nil, invalidArgument("request_id", "request_id is %d bytes; at most 255", len(req.RequestID))
	}
	if err := checkQueue(req.Queue); err != nil {
		return nil, err
	}
	opts := &client.StartOpts{Queue: req.Queue, RequestID: req.RequestID, WorkflowID: req.WorkflowID}
	if req.IDReusePolicy != "" {
		policy, ok := policies[req.IDReusePolicy]
		if !ok {
			return nil, invalidArgument("id_reuse_policy", "unknown id_reuse_policy %q", req.IDReusePolicy)
		}
		opts.IDReusePolicy = policy
	}
	var err error
	if opts.RunTimeout, err = parseDuration("run_timeout", req.RunTimeout); err != nil {
		return nil, err
	}
	if opts.ExecutionTimeout, err = parseDuration("execution_timeout", req.ExecutionTimeout); err != nil {
		return nil, err
	}
	return opts, nil
}

func (s *Server) handleStart(r *http.Request) (int, any, error) {
	var req StartRequest
	if err := decodeBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	opts, err := startOpts(&req)
	if err != nil {
		return 0, nil, err
	}
	c, err := s.client(r.PathValue("namespace"))
	if err != nil {
		return 0, nil, err
	}
	run, err := c.Start(r.Context(), client.RawArgs{JSON: req.Args, KindName: req.Kind}, opts)
	if err != nil {
		return 0, nil, err
	}
	return started(run)
}

// started answers a start: 201 when it created the run, 200 when it
// replayed an earlier start with the same request ID.
func started(run *client.Run) (int, any, error) {
	if run.Created {
		return http.StatusCreated, runResponse(run), nil
	}
	return http.StatusOK, runResponse(run), nil
}

// SignalRequest is the body of POST …/workflows/{workflow_id}/signal.
type SignalRequest struct {
	// Args are the signal's args as JSON.
	Args json.RawMessage `json:"args,omitempty"`

	// Kind is the signal's kind. Required.
	Kind string `json:"kind"`

	// RequestID makes the signal idempotent: a repeat to the same run is
	// dropped. Optional.
	RequestID string `json:"request_id,omitempty"`
}

// ReasonRequest is the body of cancel and terminate; the body may be empty.
type ReasonRequest struct {
	// Reason is recorded with the cancellation or termination.
	Reason string `json:"reason,omitempty"`
}

// AckResponse is the body of a signal, cancel or terminate that was
// accepted.
type AckResponse struct {
	// RunID is the run_id the request named; absent when it named the
	// workflow's latest run.
	RunID *uuid.UUID `json:"run_id,omitempty"`

	// WorkflowID is the workflow's ID.
	WorkflowID string `json:"workflow_id"`
}

func ack(workflowID string, runID uuid.UUID) *AckResponse {
	resp := &AckResponse{WorkflowID: workflowID}
	if runID != uuid.Nil {
		resp.RunID = &runID
	}
	return resp
}

func (s *Server) handleSignal(r *http.Request) (int, any, error) {
	c, workflowID, runID, req, err := targetBody[SignalRequest](s, r, false)
	if err != nil {
		return 0, nil, err
	}
	if err := checkCall("", "signal", req.Kind, "request_id", req.RequestID, req.Args); err != nil {
		return 0, nil, err
	}
	err = c.Signal(r.Context(), workflowID, runID, client.RawArgs{JSON: req.Args, KindName: req.Kind},
		&client.SignalOpts{RequestID: req.RequestID})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, ack(workflowID, runID), nil
}

func (s *Server) handleCancel(r *http.Request) (int, any, error) {
	return s.closeRun(r, (*client.Client).Cancel)
}

func (s *Server) handleTerminate(r *http.Request) (int, any, error) {
	return s.closeRun(r, (*client.Client).Terminate)
}

// closeRun serves cancel and terminate: end is the client's method.
func (s *Server) closeRun(r *http.Request, end func(*client.Client, context.Context, string, uuid.UUID, string) error) (int, any, error) {
	c, workflowID, runID, req, err := targetBody[ReasonRequest](s, r, true)
	if err != nil {
		return 0, nil, err
	}
	if err := end(c, r.Context(), workflowID, runID, req.Reason); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, ack(workflowID, runID), nil
}

// DescribeResponse is the body of GET …/workflows/{workflow_id}.
type DescribeResponse struct {
	// Args are the run's args, when its codec wrote JSON.
	Args              json.RawMessage `json:"args,omitempty"`
	ClosedAt          *time.Time      `json:"closed_at,omitempty"`
	CreatedAt         time.Time       `json:"created_at"`
	ExecutionDeadline *time.Time      `json:"execution_deadline,omitempty"`
	Failure           *client.Failure `json:"failure,omitempty"`
	Generation        int64           `json:"generation"`
	HistoryLength     int64           `json:"history_length"`
	Kind              string          `json:"kind"`
	Namespace         string          `json:"namespace"`
	// Parent is the run that started this one as a child workflow.
	Parent            *RunRefJSON            `json:"parent,omitempty"`
	PendingActivities []*PendingActivityJSON `json:"pending_activities"`
	PendingInbox      []*PendingInboxJSON    `json:"pending_inbox"`
	// PendingTimers are the durable timers not yet fired nor cancelled.
	PendingTimers []*PendingTimerJSON `json:"pending_timers"`
	Queue         string              `json:"queue"`
	// Result is the run's result, once it completed, when its codec wrote
	// JSON.
	Result      json.RawMessage `json:"result,omitempty"`
	RunDeadline *time.Time      `json:"run_deadline,omitempty"`
	RunID       uuid.UUID       `json:"run_id"`
	State       string          `json:"state"`
	// TaskFailure is the last failure of the running run's workflow task,
	// while it retries.
	TaskFailure *TaskFailureJSON `json:"task_failure,omitempty"`
	TaskJobID   *int64           `json:"task_job_id,omitempty"`
	// TaskWorkers says whether live workers serve the running run.
	TaskWorkers *TaskWorkersJSON `json:"task_workers,omitempty"`
	UpdatedAt   time.Time        `json:"updated_at"`
	WorkflowID  string           `json:"workflow_id"`
}

// PendingActivityJSON is a client.PendingActivity in a DescribeResponse.
// It and the other JSON twins of client types have their fields, in order.
type PendingActivityJSON struct {
	Attempt          int        `json:"attempt"`
	AttemptedAt      *time.Time `json:"attempted_at,omitempty"`
	JobID            int64      `json:"job_id"`
	JobState         string     `json:"job_state"`
	Kind             string     `json:"kind"`
	LastError        string     `json:"last_error,omitempty"`
	LeaseExpiresAt   *time.Time `json:"lease_expires_at,omitempty"`
	MaxAttempts      int        `json:"max_attempts"`
	ScheduledAt      *time.Time `json:"scheduled_at,omitempty"`
	ScheduledEventID int64      `json:"scheduled_event_id"`
}

// PendingInboxJSON is a client.PendingInboxItem in a DescribeResponse.
type PendingInboxJSON struct {
	CreatedAt time.Time `json:"created_at"`
	DedupKey  string    `json:"dedup_key"`
	Type      string    `json:"type"`
}

func (s *Server) handleDescribe(r *http.Request) (int, any, error) {
	c, workflowID, runID, err := s.target(r)
	if err != nil {
		return 0, nil, err
	}
	d, err := c.Describe(r.Context(), workflowID, runID)
	if err != nil {
		return 0, nil, err
	}
	resp := &DescribeResponse{
		ClosedAt: d.ClosedAt, CreatedAt: d.CreatedAt, ExecutionDeadline: d.ExecutionDeadline, Failure: d.Failure,
		Generation: d.Generation, HistoryLength: d.HistoryLength, Kind: d.Kind, Namespace: d.Namespace,
		Parent: (*RunRefJSON)(d.Parent), PendingActivities: []*PendingActivityJSON{}, PendingInbox: []*PendingInboxJSON{},
		PendingTimers: []*PendingTimerJSON{}, Queue: d.Queue, RunDeadline: d.RunDeadline, RunID: d.RunID, State: d.State,
		TaskFailure: (*TaskFailureJSON)(d.TaskFailure), TaskJobID: d.TaskJobID, UpdatedAt: d.UpdatedAt, WorkflowID: d.WorkflowID,
	}
	// Payloads show when their codec wrote JSON.
	if json.Valid(d.Args) {
		resp.Args = d.Args
	}
	if json.Valid(d.Result) {
		resp.Result = d.Result
	}
	if t := d.TaskWorkers; t != nil {
		resp.TaskWorkers = &TaskWorkersJSON{OnQueue: t.OnQueue, Problem: t.Problem(), Serving: t.Serving}
	}
	for _, t := range d.PendingTimers {
		resp.PendingTimers = append(resp.PendingTimers, (*PendingTimerJSON)(t))
	}
	for _, a := range d.PendingActivities {
		resp.PendingActivities = append(resp.PendingActivities, (*PendingActivityJSON)(a))
	}
	for _, item := range d.PendingInbox {
		resp.PendingInbox = append(resp.PendingInbox, (*PendingInboxJSON)(item))
	}
	return http.StatusOK, resp, nil
}

// ListResponse is the body of GET /api/v1/namespaces/{namespace}/workflows.
type ListResponse struct {
	// NextCursor continues the listing (as the cursor parameter, with the
	// same filters); absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`

	// Runs are the page's runs, newest first.
	Runs []*RunSummaryJSON `json:"runs"`
}

// RunSummaryJSON is a run in a ListResponse.
type RunSummaryJSON struct {
	ClosedAt   *time.Time `json:"closed_at,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	Generation int64      `json:"generation"`
	Kind       string     `json:"kind"`
	Namespace  string     `json:"namespace"`
	Queue      string     `json:"queue"`
	RunID      uuid.UUID  `json:"run_id"`
	State      string     `json:"state"`
	WorkflowID string     `json:"workflow_id"`
}

// States are the states a run can be in.
var States = []string{"running", "completed", "failed", "cancelled", "terminated", "continued_as_new", "timed_out"}

func (s *Server) handleList(r *http.Request) (int, any, error) {
	q := r.URL.Query()
	namespace := r.PathValue("namespace")
	opts := &client.ListOpts{
		Cursor: q.Get("cursor"), Kind: q.Get("kind"), Namespace: namespace, State: q.Get("state"),
		WorkflowIDPrefix: q.Get("workflow_id_prefix"),
	}
	if opts.State != "" && !slices.Contains(States, opts.State) {
		return 0, nil, invalidArgument("state", "unknown state %q", opts.State)
	}
	var err error
	if opts.Limit, err = parseInt(q, "limit", 1, client.ListLimitMax); err != nil {
		return 0, nil, err
	}
	for name, dst := range map[string]*time.Time{"created_after": &opts.CreatedAfter, "created_before": &opts.CreatedBefore} {
		if v := q.Get(name); v != "" {
			if *dst, err = time.Parse(time.RFC3339Nano, v); err != nil {
				return 0, nil, invalidArgument(name, "%s is not an RFC 3339 time: %q", name, v)
			}
		}
	}
	c, err := s.client(namespace)
	if err != nil {
		return 0, nil, err
	}
	res, err := c.List(r.Context(), opts)
	if err != nil {
		return 0, nil, err
	}
	resp := &ListResponse{NextCursor: res.NextCursor, Runs: []*RunSummaryJSON{}}
	for _, run := range res.Runs {
		resp.Runs = append(resp.Runs, (*RunSummaryJSON)(run))
	}
	return http.StatusOK, resp, nil
}

// HistoryResponse is the body of GET …/workflows/{workflow_id}/history.
type HistoryResponse struct {
	// Events are the page's events, in order.
	Events []*client.Event `json:"events"`

	// NextAfterEventID continues with the next page (as after_event_id);
	// absent when this page is the last so far.
	NextAfterEventID int64 `json:"next_after_event_id,omitempty"`
}

func (s *Server) handleHistory(r *http.Request) (int, any, error) {
	c, workflowID, runID, err := s.target(r)
	if err != nil {
		return 0, nil, err
	}
	q := r.URL.Query()
	limit, err := parseInt(q, "limit", 1, client.HistoryPageSizeMax)
	if err != nil {
		return 0, nil, err
	}
	after, err := parseInt(q, "after_event_id", 0, 1<<62)
	if err != nil {
		return 0, nil, err
	}
	page, err := c.History(r.Context(), workflowID, runID, &client.HistoryOpts{AfterEventID: int64(after), Limit: limit})
	if err != nil {
		return 0, nil, err
	}
	resp := &HistoryResponse{Events: page.Events, NextAfterEventID: page.NextAfterEventID}
	if resp.Events == nil {
		resp.Events = []*client.Event{}
	}
	return http.StatusOK, resp, nil
}

// ResultResponse is the body of GET …/workflows/{workflow_id}/result.
type ResultResponse struct {
	// Closed is false when the run was still running when the wait ended
	// (or the server began shutting down): ask again.
	Closed bool `json:"closed"`

	// Failure is how a run that did not complete ended, if it says.
	Failure *client.Failure `json:"failure,omitempty"`

	// Generation, RunID and WorkflowID identify the run.
	Generation int64     `json:"generation"`
	RunID      uuid.UUID `json:"run_id"`
	WorkflowID string    `json:"workflow_id"`

	// Result is a completed run's result as JSON.
	Result json.RawMessage `json:"result,omitempty"`

	// State is the run's state: running until it closes.
	State string `json:"state"`
}

func (s *Server) handleResult(r *http.Request) (int, any, error) {
	c, workflowID, runID, err := s.target(r)
	if err != nil {
		return 0, nil, err
	}
	wait, err := parseWait(r.URL.Query().Get("wait"), s.config.MaxWait)
	if err != nil {
		return 0, nil, err
	}
	d, err := c.Describe(r.Context(), workflowID, runID)
	if err != nil {
		return 0, nil, err
	}
	resp := &ResultResponse{Generation: d.Generation, RunID: d.RunID, State: d.State, WorkflowID: d.WorkflowID}
	if d.State == "running" && wait == 0 {
		return http.StatusOK, resp, nil
	}

	// The run belongs to the namespace (Describe said so); the waiter awaits
	// it by run ID on the server's one listener connection.
	waitCtx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	stopWaiting := context.AfterFunc(s.stopCtx, cancel)
	defer stopWaiting()

	var result json.RawMessage
	err = s.waiter.GetRun(workflowID, d.RunID).Get(waitCtx, &result)
	var failed *client.WorkflowFailedError
	switch {
	case err == nil:
		resp.Closed, resp.Result, resp.State = true, result, "completed"
		if len(resp.Result) == 0 {
			resp.Result = json.RawMessage("null")
		}
	case errors.As(err, &failed):
		resp.Closed, resp.Failure, resp.State = true, failed.Failure, failed.State
	case waitCtx.Err() != nil && r.Context().Err() == nil:
		// The wait ended (or shutdown began) before the run closed.
	default:
		return 0, nil, err
	}
	return http.StatusOK, resp, nil
}

// target reads the namespace's client, the workflow ID and the optional
// run_id of a per-workflow route.
func (s *Server) target(r *http.Request) (*client.Client, string, uuid.UUID, error) {
	workflowID := r.PathValue("workflow_id")
	c, runID, err := s.runTarget(r.PathValue("namespace"), workflowID, r.URL.Query().Get("run_id"))
	return c, workflowID, runID, err
}

// runTarget checks a workflow ID and a run ID ("" for the workflow's latest
// run) and returns the namespace's client and the run ID.
func (s *Server) runTarget(namespace, workflowID, runID string) (*client.Client, uuid.UUID, error) {
	if workflowID == "" || len(workflowID) > 1000 {
		return nil, uuid.Nil, invalidArgument("workflow_id", "workflow_id must be 1 to 1000 bytes")
	}
	var id uuid.UUID
	if runID != "" {
		var err error
		if id, err = uuid.Parse(runID); err != nil {
			return nil, uuid.Nil, invalidArgument("run_id", "run_id is not a UUID: %q", runID)
		}
	}
	c, err := s.client(namespace)
	return c, id, err
}

// targetBody is target, then the request's body decoded into a T
// (allowEmpty as decodeBody's).
func targetBody[T any](s *Server, r *http.Request, allowEmpty bool) (*client.Client, string, uuid.UUID, *T, error) {
	c, workflowID, runID, err := s.target(r)
	if err != nil {
		return nil, "", uuid.Nil, nil, err
	}
	req := new(T)
	if err := decodeBody(r, req, allowEmpty); err != nil {
		return nil, "", uuid.Nil, nil, err
	}
	return c, workflowID, runID, req, nil
}

// decodeBody reads one JSON object into v, rejecting unknown fields and
// trailing data, and checks its text (checkBodyText). An empty body is
// allowed only when allowEmpty.
func decodeBody(r *http.Request, v any, allowEmpty bool) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var maxBytes *http.MaxBytesError
		if errors.As(err, &maxBytes) {
			return err
		}
		return invalidArgument("body", "reading the body: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if allowEmpty {
			return nil
		}
		return invalidArgument("body", "the body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalidArgument("body", "malformed JSON body: %v", err)
	}
	if dec.More() {
		return invalidArgument("body", "malformed JSON body: data after the object")
	}
	return checkBodyText(v)
}

func parseDuration(field, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, invalidArgument(field, "%s is not a non-negative duration such as \"90s\": %q", field, v)
	}
	return d, nil
}

// parseWait reads a wait as a duration ("30s") or whole seconds ("30"),
// capped at limit.
func parseWait(v string, limit time.Duration) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	wait, err := time.ParseDuration(v)
	if err != nil {
		seconds, convErr := strconv.ParseInt(v, 10, 64)
		if convErr != nil && !errors.Is(convErr, strconv.ErrRange) {
			return 0, invalidArgument("wait", "wait is not a duration (\"30s\") or whole seconds: %q", v)
		}
		switch {
		case seconds < 0:
			wait = -1
		case seconds > int64(limit/time.Second):
			wait = limit // also when seconds would overflow a Duration
		default:
			wait = time.Duration(seconds) * time.Second
		}
	}
	if wait < 0 {
		return 0, invalidArgument("wait", "wait must not be negative: %q", v)
	}
	return min(wait, limit), nil
}

func parseInt(q map[string][]string, name string, lo, hi int) (int, error) {
	values := q[name]
	if len(values) == 0 || values[0] == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(values[0])
	if err != nil || n < lo || n > hi {
		return 0, invalidArgument(name, "%s must be an integer from %d to %d: %q", name, lo, hi, values[0])
	}
	return n, nil
}
