package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/server"
)

func TestServe(t *testing.T) {
	t.Parallel()

	t.Run("ShutdownEndsLongPollsCleanly", func(t *testing.T) {
		t.Parallel()
		b := setupAPI(t, &server.Config{AllowUnauthenticated: true})
		workflowID := "shutdown-" + uuid.NewString()
		start(t, b, "default", &server.StartRequest{Kind: "wait_for_go", WorkflowID: workflowID})

		listener, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		served := make(chan error, 1)
		go func() { served <- b.srv.Serve(ctx, listener) }()

		base := "http://" + listener.Addr().String()
		// Wait until the server answers, then open a long poll.
		deadline := time.Now().Add(10 * time.Second)
		for rawGet[server.HealthResponse](t.Context(), base+"/healthz", "") == nil {
			require.True(t, time.Now().Before(deadline), "server did not come up")
		}
		inFlight := make(chan *server.ResultResponse, 1)
		go func() {
			defer close(inFlight)
			inFlight <- rawGet[server.ResultResponse](t.Context(), base+workflowPath("default", workflowID, "/result?wait=60s"), "")
		}()
		// The long poll is in flight once the in-flight gauge shows it.
		for !strings.Contains(metricsText(t, base), "weir_http_requests_in_flight 2") {
			require.True(t, time.Now().Before(deadline), "long poll did not start")
		}

		cancel()
		select {
		case res := <-inFlight:
			require.NotNil(t, res, "the long poll must answer 200, not break")
			require.False(t, res.Closed)
			require.Equal(t, "running", res.State)
		case <-time.After(30 * time.Second):
			require.FailNow(t, "long poll outlived shutdown")
		}
		select {
		case err := <-served:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			require.FailNow(t, "Serve did not return")
		}
	})

	t.Run("Metrics", func(t *testing.T) {
		t.Parallel()
		b := setupAPI(t, nil)
		call(t, b, "GET", workflowsPath("default"), readerSecret, nil)
		call(t, b, "GET", workflowsPath("default"), "", nil)
		text := metricsText(t, b.url)
		require.Contains(t, text, `weir_http_requests_total{code="200",route="GET /api/v1/namespaces/{namespace}/workflows"} 1`)
		require.Contains(t, text, `weir_http_requests_total{code="401",route="GET /api/v1/namespaces/{namespace}/workflows"} 1`)
		require.Contains(t, text, "weir_db_pool_total_connections")
		require.Contains(t, text, "go_goroutines")
	})

	t.Run("OpenWithoutTokens", func(t *testing.T) {
		t.Parallel()
		b := setupAPI(t, &server.Config{AllowUnauthenticated: true, Tokens: []*server.Token{}})
		callJSON[server.ListResponse](t, b, 200, "GET", workflowsPath("default"), "", nil)
	})

	t.Run("RequestTimeoutIsDeadlineExceeded", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		srv, err := server.New(poolFor(t), &server.Config{
			AllowUnauthenticated: true, RequestTimeout: time.Nanosecond, Schema: dbtest.TestSchema(ctx, t),
		})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, srv.Close()) })
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1/api/v1/namespaces/default/workflows", nil)
		srv.Handler().ServeHTTP(rec, req)
		require.Equal(t, http.StatusGatewayTimeout, rec.Code, rec.Body.String())
		var resp server.ErrorResponse
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
		require.Equal(t, server.CodeDeadlineExceeded, resp.Error.Code)
		checkResponse(t, req, rec.Code, rec.Header(), rec.Body.Bytes())
	})

	t.Run("RejectsBadTokens", func(t *testing.T) {
		t.Parallel()
		for name, tokens := range map[string][]*server.Token{
			"short":     {{Name: "a", Namespaces: []string{"*"}, Role: server.RoleRead, Secret: "short"}},
			"role":      {{Name: "a", Namespaces: []string{"*"}, Role: "owner", Secret: adminSecret}},
			"namespace": {{Name: "a", Role: server.RoleRead, Secret: adminSecret}},
			"name":      {{Namespaces: []string{"*"}, Role: server.RoleRead, Secret: adminSecret}},
			"duplicate": {
				{Name: "a", Namespaces: []string{"*"}, Role: server.RoleRead, Secret: adminSecret},
				{Name: "b", Namespaces: []string{"*"}, Role: server.RoleAdmin, Secret: adminSecret},
			},
		} {
			_, err := server.New(poolFor(t), &server.Config{Tokens: tokens})
			require.Error(t, err, name)
		}
	})

	t.Run("ParseTokens", func(t *testing.T) {
		t.Parallel()
		tokens, err := server.ParseTokens("ci:write:orders,billing:" + writerSecret + "; ops:admin:*:" + adminSecret + ":with:colons\n")
		require.NoError(t, err)
		require.Equal(t, []*server.Token{
			{Name: "ci", Namespaces: []string{"orders", "billing"}, Role: server.RoleWrite, Secret: writerSecret},
			{Name: "ops", Namespaces: []string{"*"}, Role: server.RoleAdmin, Secret: adminSecret + ":with:colons"},
		}, tokens)
		for _, bad := range []string{"ci:write:" + writerSecret, "ci:boss:*:" + writerSecret, "ci:read:*:short"} {
			_, err := server.ParseTokens(bad)
			require.Error(t, err, bad)
			require.NotContains(t, err.Error(), writerSecret, "errors never show secrets")
		}
	})
}

func metricsText(t *testing.T, base string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(data)
}

func poolFor(t *testing.T) *pgxpool.Pool { return dbtest.Pool(t.Context(), t) }

// TestOpenServerRefusesOtherSites: without tokens the server obeys no web
// page of another site: a cross-site text/plain or bodiless POST, a foreign
// Origin and a foreign Host (DNS rebinding) are refused, and nothing
// starts or ends; loopback callers with JSON are served.
func TestOpenServerRefusesOtherSites(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, &server.Config{AllowUnauthenticated: true, Tokens: []*server.Token{}})
	run := start(t, b, "default", &server.StartRequest{Kind: "wait_for_go", WorkflowID: "open-guard"})
	_, port, err := net.SplitHostPort(strings.TrimPrefix(b.url, "http://"))
	require.NoError(t, err)

	send := func(method, path, host, origin, contentType, body string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, b.url+path, strings.NewReader(body))
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode
	}
	startBody := `{"kind":"wait_for_go","workflow_id":"open-guard-evil"}`
	terminate := workflowPath("default", "open-guard", "/terminate")
	for _, tc := range []struct {
		name, method, path, host, origin, contentType, body string
		want                                                int
	}{
		{"text/plain start", http.MethodPost, workflowsPath("default"), "", "", "text/plain", startBody, http.StatusUnsupportedMediaType},
		{"form start", http.MethodPost, workflowsPath("default"), "", "", "application/x-www-form-urlencoded", startBody, http.StatusUnsupportedMediaType},
		{"bodiless terminate", http.MethodPost, terminate, "", "", "", "", http.StatusUnsupportedMediaType},
		{"foreign origin", http.MethodPost, terminate, "", "https://evil.example", "application/json", "", http.StatusForbidden},
		{"null origin", http.MethodPost, terminate, "", "null", "application/json", "", http.StatusForbidden},
		{"rebound host, API", http.MethodGet, workflowsPath("default"), "evil.example:" + port, "", "", "", http.StatusForbidden},
		{"rebound host, UI", http.MethodGet, "/ui/namespaces/default/workflows", "evil.example:" + port, "", "", "", http.StatusForbidden},
		{"rebound host, write", http.MethodPost, terminate, "127.0.0.1.evil.example", "", "application/json", "", http.StatusForbidden},
		{"localhost", http.MethodGet, workflowsPath("default"), "localhost:" + port, "", "", "", http.StatusOK},
		{"loopback origin", http.MethodGet, workflowsPath("default"), "[::1]:" + port, "http://localhost:" + port, "", "", http.StatusOK},
	} {
		require.Equal(t, tc.want, send(tc.method, tc.path, tc.host, tc.origin, tc.contentType, tc.body), tc.name)
	}
	d := callJSON[server.DescribeResponse](t, b, http.StatusOK, http.MethodGet, workflowPath("default", "open-guard", ""), "", nil)
	require.Equal(t, "running", d.State, "no refused request ended the run")
	callError(t, b, http.StatusNotFound, server.CodeNotFound, http.MethodGet, workflowPath("default", "open-guard-evil", ""), "", nil)

	// The loopback JSON caller is served.
	require.Equal(t, http.StatusOK, send(http.MethodPost, terminate+"?run_id="+run.RunID.String(), "", "http://127.0.0.1:"+port, "application/json; charset=utf-8", `{"reason":"done"}`))
}
