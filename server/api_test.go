package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type echoArgs struct {
	Msg string `json:"msg"`
}

func (echoArgs) Kind() string { return "echo" }

type echoWorkflow struct {
	workflow.Defaults[echoArgs, echoArgs]
}

func (w *echoWorkflow) Run(_ workflow.Context, args echoArgs) (echoArgs, error) { return args, nil }

type waitArgs struct{}

func (waitArgs) Kind() string { return "wait_for_go" }

type goSignal struct {
	Value string `json:"value"`
}

func (goSignal) Kind() string { return "go" }

type waitWorkflow struct {
	workflow.Defaults[waitArgs, string]
}

type notesQuery struct{}

func (notesQuery) Kind() string { return "notes" }

type addNote struct {
	Note string `json:"note"`
}

func (addNote) Kind() string { return "add_note" }

func (w *waitWorkflow) Run(ctx workflow.Context, _ waitArgs) (string, error) {
	var notes []string
	workflow.SetQueryHandler(ctx, func(notesQuery) ([]string, error) { return notes, nil })
	workflow.SetUpdateHandler(ctx, func(_ workflow.Context, add addNote) (int, error) {
		if add.Note == "fail" {
			return 0, errors.New("the handler failed")
		}
		notes = append(notes, add.Note)
		return len(notes), nil
	}, &workflow.UpdateHandlerOpts[addNote]{Validator: func(add addNote) error {
		if add.Note == "" {
			return errors.New("note is required")
		}
		return nil
	}})
	sig, err := workflow.GetSignalChannel[goSignal](ctx).Receive(ctx)
	if err != nil {
		return "", err
	}
	return "got " + sig.Value, nil
}

const (
	adminSecret  = "admin-secret-0123456789"
	otherSecret  = "other-secret-0123456789"
	readerSecret = "reader-secret-0123456789"
	writerSecret = "writer-secret-0123456789"
)

type apiBundle struct {
	srv *server.Server
	url string
}

// setupAPI serves the API over a migrated schema with a worker running the
// test workflows. Subtests share it (with their own workflow IDs).
func setupAPI(t *testing.T, config *server.Config) *apiBundle {
	t.Helper()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)

	w, err := worker.New(pool, &worker.Config{Schema: schema})
	require.NoError(t, err)
	worker.AddWorkflow(w, &echoWorkflow{})
	worker.AddWorkflow(w, &waitWorkflow{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})

	if config == nil {
		config = &server.Config{}
	}
	config.Schema = schema
	if config.Tokens == nil {
		config.Tokens = []*server.Token{
			{Name: "admin", Namespaces: []string{server.NamespaceAll}, Role: server.RoleAdmin, Secret: adminSecret},
			{Name: "other", Namespaces: []string{"other"}, Role: server.RoleWrite, Secret: otherSecret},
			{Name: "reader", Namespaces: []string{"default"}, Role: server.RoleRead, Secret: readerSecret},
			{Name: "writer", Namespaces: []string{"default", "billing"}, Role: server.RoleWrite, Secret: writerSecret},
		}
	}
	srv, err := server.New(pool, config)
	require.NoError(t, err)
	httpServer := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		httpServer.Close()
		require.NoError(t, srv.Close())
	})
	return &apiBundle{srv: srv, url: httpServer.URL}
}

// call sends a request and returns the status and body. body is JSON-encoded
// unless it is a string, sent as is.
func call(t *testing.T, b *apiBundle, method, path, token string, body any) (int, []byte) {
	t.Helper()
	var reader io.Reader
	switch body := body.(type) {
	case nil:
	case string:
		reader = strings.NewReader(body)
	default:
		data, err := json.Marshal(body)
		require.NoError(t, err)
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.url+path, reader)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	checkResponse(t, req, resp.StatusCode, resp.Header, data)
	return resp.StatusCode, data
}

// rawGet is a GET safe off the test goroutine: nil unless it answered 200
// with a T.
func rawGet[T any](ctx context.Context, url, token string) *T {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := new(T)
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(out) != nil {
		return nil
	}
	return out
}

func callJSON[T any](t *testing.T, b *apiBundle, wantStatus int, method, path, token string, body any) *T {
	t.Helper()
	status, data := call(t, b, method, path, token, body)
	require.Equal(t, wantStatus, status, string(data))
	out := new(T)
	require.NoError(t, json.Unmarshal(data, out), string(data))
	return out
}

// callError expects an error response with status and code.
func callError(t *testing.T, b *apiBundle, status int, code, method, path, token string, body any) *server.Error {
	t.Helper()
	resp := callJSON[server.ErrorResponse](t, b, status, method, path, token, body)
	require.NotNil(t, resp.Error)
	require.Equal(t, code, resp.Error.Code, resp.Error.Message)
	require.NotEmpty(t, resp.Error.Message)
	return resp.Error
}

func workflowsPath(namespace string) string { return "/api/v1/namespaces/" + namespace + "/workflows" }

func workflowPath(namespace, workflowID, suffix string) string {
	return workflowsPath(namespace) + "/" + url.PathEscape(workflowID) + suffix
}

func start(t *testing.T, b *apiBundle, namespace string, req *server.StartRequest) *server.RunResponse {
	t.Helper()
	return callJSON[server.RunResponse](t, b, http.StatusCreated, http.MethodPost, workflowsPath(namespace), adminSecret, req)
}

// awaitResult long-polls until the run closes.
func awaitResult(t *testing.T, b *apiBundle, namespace, workflowID string) *server.ResultResponse {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		res := callJSON[server.ResultResponse](t, b, http.StatusOK, http.MethodGet,
			workflowPath(namespace, workflowID, "/result?wait=10s"), readerSecret, nil)
		if res.Closed {
			return res
		}
	}
	require.FailNow(t, "run did not close in time", workflowID)
	return nil
}

func TestAPI(t *testing.T) {
	t.Parallel()

	b := setupAPI(t, nil)

	t.Run("AuthFailures", func(t *testing.T) {
		t.Parallel()
		path := workflowsPath("default")

		for _, header := range []string{"", "Bearer", "Basic " + adminSecret, "Bearer not-a-token-at-all-000"} {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.url+path, nil)
			require.NoError(t, err)
			if header != "" {
				req.Header.Set("Authorization", header)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			var body server.ErrorResponse
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			resp.Body.Close()
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, header)
			require.Equal(t, server.CodeUnauthenticated, body.Error.Code)
			require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
		}
		// A prefix of a real secret is not the secret.
		callError(t, b, http.StatusUnauthorized, server.CodeUnauthenticated, http.MethodGet, path, adminSecret[:len(adminSecret)-1], nil)

		// Outside the token's namespaces.
		e := callError(t, b, http.StatusForbidden, server.CodePermissionDenied, http.MethodGet, workflowsPath("billing"), readerSecret, nil)
		require.Equal(t, "billing", e.Data["namespace"])
		callError(t, b, http.StatusForbidden, server.CodePermissionDenied, http.MethodPost, workflowsPath("default"), otherSecret,
			&server.StartRequest{Kind: "echo"})

		// Under the token's role: a reader may not start, signal, cancel or terminate.
		e = callError(t, b, http.StatusForbidden, server.CodePermissionDenied, http.MethodPost, path, readerSecret, &server.StartRequest{Kind: "echo"})
		require.Equal(t, "write", e.Data["required_role"])
		require.Equal(t, "read", e.Data["role"])
		for _, suffix := range []string{"/signal", "/cancel", "/terminate"} {
			callError(t, b, http.StatusForbidden, server.CodePermissionDenied, http.MethodPost, workflowPath("default", "x", suffix), readerSecret, nil)
		}
		// Creating schedules needs admin (more in TestScheduleAPI).
		callError(t, b, http.StatusForbidden, server.CodePermissionDenied, http.MethodPost, "/api/v1/namespaces/default/schedules", writerSecret, nil)

		// Readers read.
		callJSON[server.ListResponse](t, b, http.StatusOK, http.MethodGet, path, readerSecret, nil)
		// The writer writes in each of its namespaces.
		callJSON[server.RunResponse](t, b, http.StatusCreated, http.MethodPost, workflowsPath("billing"), writerSecret,
			&server.StartRequest{Kind: "echo", Args: json.RawMessage(`{"msg":"b"}`)})
	})

	t.Run("BodiesMalformedOrOversized", func(t *testing.T) {
		t.Parallel()
		path := workflowsPath("default")
		for _, body := range []string{"", "{", "[1]", `{"kind":"echo"} {}`, `{"kind":"echo","bogus":1}`, `{"kind":"echo","args":{"msg":}}`} {
			e := callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodPost, path, writerSecret, body)
			require.Equal(t, "body", e.Data["field"], body)
		}
		for field, req := range map[string]*server.StartRequest{
			"kind":              {Kind: "bad kind!"},
			"queue":             {Kind: "echo", Queue: "Not A Queue"},
			"id_reuse_policy":   {Kind: "echo", IDReusePolicy: "sometimes"},
			"run_timeout":       {Kind: "echo", RunTimeout: "soon"},
			"execution_timeout": {Kind: "echo", ExecutionTimeout: "-1s"},
			"workflow_id":       {Kind: "echo", WorkflowID: strings.Repeat("w", 1001)},
		} {
			e := callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodPost, path, writerSecret, req)
			require.Equal(t, field, e.Data["field"])
		}

		huge := `{"kind":"echo","args":{"msg":"` + strings.Repeat("x", server.MaxBodyBytesDefault) + `"}}`
		e := callError(t, b, http.StatusRequestEntityTooLarge, server.CodePayloadTooLarge, http.MethodPost, path, writerSecret, huge)
		require.InDelta(t, float64(server.MaxBodyBytesDefault), e.Data["limit"], 0)

		// Args within the body limit but over the client's payload limit.
		big := `{"kind":"echo","args":{"msg":"` + strings.Repeat("x", server.MaxBodyBytesDefault-1000) + `"}}`
		callError(t, b, http.StatusRequestEntityTooLarge, server.CodePayloadTooLarge, http.MethodPost, path, writerSecret, big)

		callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodPost,
			workflowPath("default", "x", "/signal"), writerSecret, `{"kind":"go","args":nope}`)
		callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodGet,
			workflowPath("default", "x", "?run_id=not-a-uuid"), readerSecret, nil)
		callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodGet,
			workflowsPath("bad%20namespace"), adminSecret, nil)
	})

	t.Run("CancelAndTerminate", func(t *testing.T) {
		t.Parallel()
		cancelID, terminateID := "cancel-"+uuid.NewString(), "terminate-"+uuid.NewString()
		start(t, b, "default", &server.StartRequest{Kind: "wait_for_go", WorkflowID: cancelID})
		run := start(t, b, "default", &server.StartRequest{Kind: "wait_for_go", WorkflowID: terminateID})

		ack := callJSON[server.AckResponse](t, b, http.StatusOK, http.MethodPost, workflowPath("default", cancelID, "/cancel"), writerSecret, nil)
		require.Equal(t, cancelID, ack.WorkflowID)
		require.Nil(t, ack.RunID)
		res := awaitResult(t, b, "default", cancelID)
		require.Equal(t, "cancelled", res.State)

		path := workflowPath("default", terminateID, "/terminate?run_id="+run.RunID.String())
		ack = callJSON[server.AckResponse](t, b, http.StatusOK, http.MethodPost, path, writerSecret, &server.ReasonRequest{Reason: "test"})
		require.Equal(t, run.RunID, *ack.RunID)
		// Terminating again with the same reason is a no-op; cancelling a terminated run is run_closed.
		callJSON[server.AckResponse](t, b, http.StatusOK, http.MethodPost, path, writerSecret, &server.ReasonRequest{Reason: "test"})
		e := callError(t, b, http.StatusConflict, server.CodeRunClosed, http.MethodPost, workflowPath("default", terminateID, "/cancel"), writerSecret, nil)
		require.Equal(t, "terminated", e.Data["state"])
		require.Equal(t, run.RunID.String(), e.Data["run_id"])
		require.Equal(t, terminateID, e.Data["workflow_id"])
		require.InDelta(t, 1, e.Data["generation"], 0)

		res = awaitResult(t, b, "default", terminateID)
		require.Equal(t, "terminated", res.State)
		require.NotNil(t, res.Failure)
	})

	t.Run("DescribeAndHistory", func(t *testing.T) {
		t.Parallel()
		workflowID := "describe/" + uuid.NewString() // a slash, escaped in the path
		run := start(t, b, "default", &server.StartRequest{Kind: "echo", WorkflowID: workflowID, Args: json.RawMessage(`{"msg":"hi"}`)})
		awaitResult(t, b, "default", workflowID)

		d := callJSON[server.DescribeResponse](t, b, http.StatusOK, http.MethodGet, workflowPath("default", workflowID, ""), readerSecret, nil)
		require.Equal(t, run.RunID, d.RunID)
		require.Equal(t, "completed", d.State)
		require.Equal(t, "echo", d.Kind)
		require.Equal(t, "default", d.Namespace)
		require.NotNil(t, d.ClosedAt)
		require.Positive(t, d.HistoryLength)

		page := callJSON[server.HistoryResponse](t, b, http.StatusOK, http.MethodGet,
			workflowPath("default", workflowID, "/history?limit=1&run_id="+run.RunID.String()), readerSecret, nil)
		require.Len(t, page.Events, 1)
		require.Equal(t, "WorkflowStarted", string(page.Events[0].Type))
		require.Equal(t, int64(1), page.NextAfterEventID)
		rest := callJSON[server.HistoryResponse](t, b, http.StatusOK, http.MethodGet,
			workflowPath("default", workflowID, "/history?after_event_id=1"), readerSecret, nil)
		require.Len(t, rest.Events, int(d.HistoryLength)-1)
		require.Equal(t, "WorkflowCompleted", string(rest.Events[len(rest.Events)-1].Type))

		callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodGet,
			workflowPath("default", workflowID, "/history?limit=0"), readerSecret, nil)
		// The run is in default, not in billing.
		e := callError(t, b, http.StatusNotFound, server.CodeNotFound, http.MethodGet, workflowPath("billing", workflowID, ""), writerSecret, nil)
		require.Equal(t, workflowID, e.Data["workflow_id"])
		callError(t, b, http.StatusNotFound, server.CodeNotFound, http.MethodGet, workflowPath("default", "nope-"+uuid.NewString(), "/history"), readerSecret, nil)
		callError(t, b, http.StatusNotFound, server.CodeNotFound, http.MethodGet, workflowPath("default", "nope-"+uuid.NewString(), "/result"), readerSecret, nil)
	})

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		prefix := "list-" + uuid.NewString() + "-"
		var runIDs []uuid.UUID
		for i := range 5 {
			run := start(t, b, "listns", &server.StartRequest{Kind: "wait_for_go", WorkflowID: prefix + string(rune('a'+i))})
			runIDs = append(runIDs, run.RunID)
		}
		start(t, b, "listns", &server.StartRequest{Kind: "echo", WorkflowID: "elsewhere-" + uuid.NewString()})

		var seen []uuid.UUID
		cursor := ""
		for range 10 {
			q := url.Values{"workflow_id_prefix": {prefix}, "limit": {"2"}, "kind": {"wait_for_go"}, "state": {"running"}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			page := callJSON[server.ListResponse](t, b, http.StatusOK, http.MethodGet, workflowsPath("listns")+"?"+q.Encode(), adminSecret, nil)
			require.LessOrEqual(t, len(page.Runs), 2)
			for _, run := range page.Runs {
				require.Equal(t, "listns", run.Namespace)
				require.Equal(t, "wait_for_go", run.Kind)
				seen = append(seen, run.RunID)
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		require.ElementsMatch(t, runIDs, seen)

		none := callJSON[server.ListResponse](t, b, http.StatusOK, http.MethodGet,
			workflowsPath("listns")+"?state=completed&workflow_id_prefix="+url.QueryEscape(prefix), adminSecret, nil)
		require.Empty(t, none.Runs)
		require.NotNil(t, none.Runs)
		future := callJSON[server.ListResponse](t, b, http.StatusOK, http.MethodGet,
			workflowsPath("listns")+"?created_after="+url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339)), adminSecret, nil)
		require.Empty(t, future.Runs)

		for query, field := range map[string]string{
			"cursor=garbage": "cursor", "limit=1001": "limit", "limit=x": "limit", "state=asleep": "state", "created_before=yesterday": "created_before",
		} {
			e := callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodGet, workflowsPath("listns")+"?"+query, adminSecret, nil)
			require.Equal(t, field, e.Data["field"], query)
		}
	})

	t.Run("ResultLongPollAndSignal", func(t *testing.T) {
		t.Parallel()
		workflowID := "signal-" + uuid.NewString()
		run := start(t, b, "default", &server.StartRequest{Kind: "wait_for_go", WorkflowID: workflowID})

		// Without a wait: at once, not closed.
		res := callJSON[server.ResultResponse](t, b, http.StatusOK, http.MethodGet, workflowPath("default", workflowID, "/result"), readerSecret, nil)
		require.False(t, res.Closed)
		require.Equal(t, "running", res.State)
		require.Equal(t, run.RunID, res.RunID)
		// A short wait ends, still not closed.
		res = callJSON[server.ResultResponse](t, b, http.StatusOK, http.MethodGet, workflowPath("default", workflowID, "/result?wait=1"), readerSecret, nil)
		require.False(t, res.Closed)

		// A long poll in flight returns once the signal lets the run complete.
		polled := make(chan *server.ResultResponse, 1)
		go func() { // no require off the test goroutine: a nil means failure
			defer close(polled)
			polled <- rawGet[server.ResultResponse](t.Context(), b.url+workflowPath("default", workflowID, "/result?wait=60s"), readerSecret)
		}()
		signal := &server.SignalRequest{Kind: "go", Args: json.RawMessage(`{"value":"ahead"}`), RequestID: "sig-1"}
		callJSON[server.AckResponse](t, b, http.StatusOK, http.MethodPost, workflowPath("default", workflowID, "/signal"), writerSecret, signal)
		select {
		case res := <-polled:
			require.NotNil(t, res)
			require.True(t, res.Closed)
			require.Equal(t, "completed", res.State)
			require.JSONEq(t, `"got ahead"`, string(res.Result))
			require.Equal(t, int64(1), res.Generation)
		case <-time.After(60 * time.Second):
			require.FailNow(t, "long poll did not return")
		}

		// A signal to the closed run is run_closed.
		e := callError(t, b, http.StatusConflict, server.CodeRunClosed, http.MethodPost, workflowPath("default", workflowID, "/signal"), writerSecret,
			&server.SignalRequest{Kind: "go", Args: json.RawMessage(`{}`)})
		require.Equal(t, "completed", e.Data["state"])
		callError(t, b, http.StatusNotFound, server.CodeNotFound, http.MethodPost, workflowPath("default", "nope-"+uuid.NewString(), "/signal"), writerSecret,
			&server.SignalRequest{Kind: "go"})
	})

	t.Run("StartIdempotentAndConflicts", func(t *testing.T) {
		t.Parallel()
		workflowID := "start-" + uuid.NewString()
		req := &server.StartRequest{Kind: "wait_for_go", WorkflowID: workflowID, RequestID: "req-1", Args: json.RawMessage(`{}`)}
		first := start(t, b, "default", req)
		require.True(t, first.Created)
		require.Equal(t, int64(1), first.Generation)
		require.Equal(t, "default", first.Namespace)

		// The same request again is a replay (200, created false), never a collision.
		replay := callJSON[server.RunResponse](t, b, http.StatusOK, http.MethodPost, workflowsPath("default"), writerSecret, req)
		require.False(t, replay.Created)
		require.Equal(t, first.RunID, replay.RunID)

		// Another request for the live workflow ID.
		e := callError(t, b, http.StatusConflict, server.CodeWorkflowAlreadyStarted, http.MethodPost, workflowsPath("default"), writerSecret,
			&server.StartRequest{Kind: "wait_for_go", WorkflowID: workflowID, RequestID: "req-2"})
		require.Equal(t, workflowID, e.Data["workflow_id"])
		require.Equal(t, first.RunID.String(), e.Data["run_id"])
		require.InDelta(t, 1, e.Data["generation"], 0)

		// The same request ID with other args.
		e = callError(t, b, http.StatusConflict, server.CodeRequestConflict, http.MethodPost, workflowsPath("default"), writerSecret,
			&server.StartRequest{Kind: "wait_for_go", WorkflowID: workflowID, RequestID: "req-1", Args: json.RawMessage(`{"x":1}`)})
		require.Equal(t, "req-1", e.Data["request_id"])
		require.Equal(t, first.RunID.String(), e.Data["run_id"])

		// Once closed, reject_duplicate refuses the ID.
		callJSON[server.AckResponse](t, b, http.StatusOK, http.MethodPost, workflowPath("default", workflowID, "/terminate"), writerSecret, nil)
		e = callError(t, b, http.StatusConflict, server.CodeWorkflowIDReuse, http.MethodPost, workflowsPath("default"), writerSecret,
			&server.StartRequest{Kind: "wait_for_go", WorkflowID: workflowID, IDReusePolicy: "reject_duplicate"})
		require.Equal(t, "reject_duplicate", e.Data["policy"])
		require.Equal(t, "terminated", e.Data["last_state"])

		// The default policy starts generation 2, with a timeout.
		second := start(t, b, "default", &server.StartRequest{Kind: "wait_for_go", WorkflowID: workflowID, RunTimeout: "1h"})
		require.Equal(t, int64(2), second.Generation)
		d := callJSON[server.DescribeResponse](t, b, http.StatusOK, http.MethodGet, workflowPath("default", workflowID, ""), readerSecret, nil)
		require.Equal(t, second.RunID, d.RunID)
		require.NotNil(t, d.RunDeadline)

		// Echo completes with its args as the result.
		echoID := "echo-" + uuid.NewString()
		start(t, b, "default", &server.StartRequest{Kind: "echo", WorkflowID: echoID, Args: json.RawMessage(`{"msg":"hello"}`)})
		res := awaitResult(t, b, "default", echoID)
		require.Equal(t, "completed", res.State)
		require.JSONEq(t, `{"msg":"hello"}`, string(res.Result))
	})

	t.Run("QueryUpdateSignalWithStart", func(t *testing.T) {
		t.Parallel()
		const id = "interact-1"
		body := map[string]any{
			"start":  map[string]any{"kind": "wait_for_go"},
			"signal": map[string]any{"kind": "nothing_listens", "request_id": "s1"},
		}
		run := callJSON[server.RunResponse](t, b, http.StatusCreated, http.MethodPost, workflowPath("default", id, "/signal-with-start"), writerSecret, body)
		require.True(t, run.Created)
		again := callJSON[server.RunResponse](t, b, http.StatusOK, http.MethodPost, workflowPath("default", id, "/signal-with-start"), writerSecret, body)
		require.False(t, again.Created)
		require.Equal(t, run.RunID, again.RunID)
		callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodPost, workflowPath("default", id, "/signal-with-start"), writerSecret,
			map[string]any{"start": map[string]any{"kind": "wait_for_go", "workflow_id": "other"}, "signal": map[string]any{"kind": "x"}})

		value := callJSON[server.ValueResponse](t, b, http.StatusOK, http.MethodPost, workflowPath("default", id, "/update"), writerSecret,
			&server.UpdateRequest{Kind: "add_note", Args: json.RawMessage(`{"note":"first"}`), UpdateID: "u1"})
		require.JSONEq(t, `1`, string(value.Result))
		value = callJSON[server.ValueResponse](t, b, http.StatusOK, http.MethodPost, workflowPath("default", id, "/update"), writerSecret,
			&server.UpdateRequest{Kind: "add_note", Args: json.RawMessage(`{"note":"first"}`), UpdateID: "u1"})
		require.JSONEq(t, `1`, string(value.Result), "the same update_id: the first answer")

		rejected := callError(t, b, http.StatusConflict, server.CodeUpdateRejected, http.MethodPost, workflowPath("default", id, "/update"), writerSecret,
			&server.UpdateRequest{Kind: "add_note", Args: json.RawMessage(`{"note":""}`)})
		require.Equal(t, run.RunID.String(), rejected.Data["run_id"])
		callError(t, b, http.StatusUnprocessableEntity, server.CodeUpdateFailed, http.MethodPost, workflowPath("default", id, "/update"), writerSecret,
			&server.UpdateRequest{Kind: "add_note", Args: json.RawMessage(`{"note":"fail"}`)})
		callError(t, b, http.StatusForbidden, server.CodePermissionDenied, http.MethodPost, workflowPath("default", id, "/update"), readerSecret,
			&server.UpdateRequest{Kind: "add_note", Args: json.RawMessage(`{"note":"x"}`)})

		notes := callJSON[server.ValueResponse](t, b, http.StatusOK, http.MethodPost, workflowPath("default", id, "/query"), readerSecret,
			&server.QueryRequest{Kind: "notes"})
		require.JSONEq(t, `["first"]`, string(notes.Result))
		failed := callError(t, b, http.StatusUnprocessableEntity, server.CodeQueryFailed, http.MethodPost, workflowPath("default", id, "/query"), readerSecret,
			&server.QueryRequest{Kind: "unknown_query"})
		failure, ok := failed.Data["failure"].(map[string]any)
		require.True(t, ok, "the failure is in data")
		require.Equal(t, "UnknownQuery", failure["type"])

		// A run whose kind no worker runs: nobody answers.
		start(t, b, "default", &server.StartRequest{Kind: "nobody_runs_this", WorkflowID: "no-worker"})
		callError(t, b, http.StatusGatewayTimeout, server.CodeQueryTimeout, http.MethodPost, workflowPath("default", "no-worker", "/query"), readerSecret,
			&server.QueryRequest{Kind: "notes", Timeout: "200ms"})
	})

	t.Run("UnknownRoute", func(t *testing.T) {
		t.Parallel()
		callError(t, b, http.StatusNotFound, server.CodeNotFound, http.MethodGet, "/api/v1/nothing", adminSecret, nil)
	})
}
