package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/server"
)

// errorLog records the messages of the ERROR records a server logs.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) handler() slog.Handler { return &errorLogHandler{log: l} }

func (l *errorLog) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

type errorLogHandler struct{ log *errorLog }

func (h *errorLogHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelError
}

func (h *errorLogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	h.log.mu.Lock()
	defer h.log.mu.Unlock()
	h.log.msgs = append(h.log.msgs, b.String())
	return nil
}

func (h *errorLogHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *errorLogHandler) WithGroup(string) slog.Handler      { return h }

// TestBadTextRefusedBeforePostgres: NUL bytes and invalid UTF-8, wherever a
// request carries them, are 400 invalid_argument (an HTML page with 400 in
// the UI), and the server logs no error: nothing reached Postgres.
func TestBadTextRefusedBeforePostgres(t *testing.T) {
	t.Parallel()
	var errs errorLog
	config := uiTokens()
	config.Logger = slog.New(errs.handler())
	b := setupUI(t, config)
	run := b.start(t, "wait_for_go", "bad-text", nil)
	require.Equal(t, http.StatusCreated, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/schedules", adminSecret,
		&server.ScheduleRequest{Every: "1h", Kind: "echo", ScheduleID: "bad-text", Paused: true}, nil))

	const ns = "/api/v1/namespaces/default"
	wf := ns + "/workflows/bad-text"
	api := []struct {
		name, method, path, body string
	}{
		{"path ID NUL", http.MethodGet, ns + "/workflows/a%00b", ""},
		{"path ID invalid UTF-8", http.MethodGet, ns + "/workflows/a%FFb", ""},
		{"path ID of a signal", http.MethodPost, ns + "/workflows/%FF/signal", `{"kind":"go"}`},
		{"schedule ID in path", http.MethodGet, ns + "/schedules/%00", ""},
		{"schedule ID in path (delete)", http.MethodDelete, ns + "/schedules/%C0%AE", ""},
		{"list kind", http.MethodGet, ns + "/workflows?kind=%00", ""},
		{"list prefix", http.MethodGet, ns + "/workflows?workflow_id_prefix=%FF", ""},
		{"list cursor", http.MethodGet, ns + "/workflows?cursor=%00", ""},
		{"start workflow ID", http.MethodPost, ns + "/workflows", `{"kind":"echo","workflow_id":"a\u0000b"}`},
		{"start request ID", http.MethodPost, ns + "/workflows", `{"kind":"echo","request_id":"\u0000"}`},
		{"start args NUL", http.MethodPost, ns + "/workflows", `{"kind":"echo","args":{"msg":"\u0000"}}`},
		{"start args invalid UTF-8", http.MethodPost, ns + "/workflows", "{\"kind\":\"echo\",\"args\":{\"msg\":\"\xff\"}}"},
		{"signal request ID", http.MethodPost, wf + "/signal", `{"kind":"go","request_id":"r\u0000"}`},
		{"signal args", http.MethodPost, wf + "/signal", `{"kind":"go","args":{"value":"\u0000"}}`},
		{"cancel reason", http.MethodPost, wf + "/cancel", `{"reason":"\u0000"}`},
		{"terminate reason", http.MethodPost, wf + "/terminate", `{"reason":"x\u0000"}`},
		{"update ID", http.MethodPost, wf + "/update", `{"kind":"add_note","update_id":"\u0000","args":{"note":"n"}}`},
		{"signal-with-start signal", http.MethodPost, wf + "/signal-with-start",
			`{"start":{"kind":"wait_for_go"},"signal":{"kind":"go","request_id":"\u0000"}}`},
		{"schedule ID in body", http.MethodPost, ns + "/schedules", `{"schedule_id":"s\u0000","every":"1h","kind":"echo"}`},
		{"schedule note", http.MethodPost, ns + "/schedules", `{"schedule_id":"s","every":"1h","kind":"echo","note":"\u0000"}`},
		{"schedule args", http.MethodPost, ns + "/schedules", `{"schedule_id":"s","every":"1h","kind":"echo","args":"\u0000"}`},
		{"schedule note update", http.MethodPatch, ns + "/schedules/bad-text", `{"note":"\u0000"}`},
	}
	for _, tc := range api {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, b.url+tc.path, strings.NewReader(tc.body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminSecret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", tc.name, data)
		var body server.ErrorResponse
		require.NoError(t, json.Unmarshal(data, &body), tc.name)
		require.Equal(t, server.CodeInvalidArgument, body.Error.Code, tc.name)
	}

	br := b.browser(t)
	br.login(adminSecret)
	for _, path := range []string{
		"/ui/namespaces/default/workflows?prefix=%FF",
		"/ui/namespaces/default/workflows?kind=%00",
		"/ui/namespaces/default/workflows?cursor=%00",
		"/ui/namespaces/default/workflows/a%00b",
		"/ui/namespaces/default/workflows/a%FF",
		"/ui/namespaces/default/workflows/bad-text/status?run_id=%00",
		"/ui/static/%c0%ae%c0%ae/weir.css",
		"/ui/static/%00",
		"/riverui/api/jobs/%00",
		"/riverui/api/queues/%FF",
	} {
		resp, _ := br.get(path)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
	}
	_, page := br.get("/ui/namespaces/default/workflows/bad-text")
	csrf := csrfOf(t, page)
	for _, form := range []url.Values{
		{"kind": {"go"}, "request_id": {"\x00"}},
		{"kind": {"go"}, "request_id": {"\xff"}},
		{"kind": {"go"}, "args": {`{"value":"\u0000"}`}},
		{"kind": {"go"}, "request_id": {strings.Repeat("r", 256)}}, // the API's bound
	} {
		form.Set("csrf", csrf)
		form.Set("run_id", run.RunID.String())
		resp, _ := br.do(http.MethodPost, "/ui/namespaces/default/workflows/bad-text/signal", form, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, form)
	}
	resp, _ := br.do(http.MethodPost, "/ui/namespaces/default/workflows/bad-text/cancel",
		url.Values{"csrf": {csrf}, "run_id": {run.RunID.String()}, "reason": {"\x00"}}, nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	require.Empty(t, errs.messages(), "no request reached Postgres with bad text")
	var desc server.DescribeResponse
	require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodGet, wf, adminSecret, nil, &desc))
	require.Equal(t, "running", desc.State, "no bad request changed the run")
}

// uiTokens is setupUI's default config.
func uiTokens() *server.Config {
	return &server.Config{Tokens: []*server.Token{
		{Name: "admin", Namespaces: []string{server.NamespaceAll}, Role: server.RoleAdmin, Secret: adminSecret},
		{Name: "other", Namespaces: []string{"other"}, Role: server.RoleWrite, Secret: otherSecret},
		{Name: "reader", Namespaces: []string{"default"}, Role: server.RoleRead, Secret: readerSecret},
		{Name: "writer", Namespaces: []string{"default", "billing"}, Role: server.RoleWrite, Secret: writerSecret},
	}}
}
