package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/workflow"
)

// TestUIQueryAndSignalKinds covers a run page's query card (read role,
// CSRF, escaped answer, errors in the card) and the signal kinds it offers.
func TestUIQueryAndSignalKinds(t *testing.T) {
	t.Parallel()
	b := setupUI(t, nil)
	run := b.start(t, "wait_for_go", "ui-query", nil)
	runPath := "/ui/namespaces/default/workflows/ui-query"
	require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/workflows/ui-query/update", writerSecret,
		&server.UpdateRequest{Kind: "add_note", Args: json.RawMessage(`{"note":"<b>bold</b>"}`)}, nil))

	reader := b.browser(t)
	reader.login(readerSecret)
	page := pageOf(t, reader, runPath)
	require.Contains(t, page, `id="query-form"`, "a reader may query")
	require.NotContains(t, page, `id="received-signals"`, "no signal received yet")
	send := func(form url.Values) (*http.Response, string) {
		t.Helper()
		form.Set("run_id", run.RunID.String())
		return reader.do(http.MethodPost, runPath+"/query", form, nil)
	}

	t.Run("Answer", func(t *testing.T) {
		resp, page := send(url.Values{"csrf": {csrfOf(t, page)}, "kind": {"notes"}})
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `<pre class="json" id="query-answer">[
  &#34;\u003cb\u003ebold\u003c/b\u003e&#34;
]</pre>`)
		require.NotContains(t, page, "<b>bold</b>")
		// The answer's page does not refresh itself: a reload would send
		// the query's POST again.
		require.NotContains(t, page, "data-live=")
		require.NotContains(t, page, `http-equiv="refresh"`)
		require.Contains(t, page, `id="back-to-live"`)
		require.Contains(t, page, `id="query-kind" required placeholder="e.g. status" spellcheck="false" value="notes"`)
	})

	t.Run("StackTrace", func(t *testing.T) {
		require.Contains(t, page, `id="stack-trace"`, "a running run offers its stack trace")
		resp, page := send(url.Values{"csrf": {csrfOf(t, page)}, "kind": {workflow.QueryStackTrace}})
		require.Equal(t, http.StatusOK, resp.StatusCode)
		_, stack, found := strings.Cut(page, `<pre id="query-stack">`)
		require.True(t, found, "no stack shown: %s", page)
		stack, _, _ = strings.Cut(stack, "</pre>")
		require.Contains(t, stack, "[running]:")
		require.Contains(t, stack, "server_test.(*waitWorkflow).Run", "the workflow's own code")
	})

	t.Run("Handlers", func(t *testing.T) {
		require.Contains(t, page, `id="handlers"`)
		resp, page := send(url.Values{"csrf": {csrfOf(t, page)}, "kind": {workflow.QueryHandlers}})
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `id="query-answer"`)
		require.Contains(t, page, "&#34;notes&#34;", "its query")
		require.Contains(t, page, "&#34;add_note&#34;", "its update")
	})

	t.Run("Errors", func(t *testing.T) {
		resp, _ := send(url.Values{"kind": {"notes"}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
		resp, page := send(url.Values{"csrf": {csrfOf(t, page)}, "kind": {"nosuch"}})
		require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
		require.Contains(t, page, `id="query-error"`)
		require.Contains(t, page, "nosuch")
		resp, page = send(url.Values{"csrf": {csrfOf(t, page)}, "kind": {"notes"}, "args": {"{nope"}})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, page, `id="query-error"`)
		require.Contains(t, page, "{nope", "the form keeps what was typed")
	})

	t.Run("ReceivedSignalKinds", func(t *testing.T) {
		for _, kind := range []string{"poke<i>", "nudge", "poke<i>"} {
			require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/workflows/ui-query/signal", writerSecret,
				&server.SignalRequest{Kind: kind}, nil))
		}
		writer := b.browser(t)
		writer.login(writerSecret)
		// The page offers them once the run's task has recorded them (the
		// timeline, read after the kinds, may show them first).
		var page string
		require.Eventually(t, func() bool {
			page = pageOf(t, writer, runPath)
			return strings.Contains(page, `id="received-signals"`) && strings.Contains(page, `<option value="nudge">`)
		}, 30*time.Second, 50*time.Millisecond)
		require.Contains(t, page, `list="signal-kinds"`)
		require.Contains(t, page, `<datalist id="signal-kinds"><option value="nudge"><option value="poke&lt;i&gt;"></datalist>`)
		require.Contains(t, page, `Received so far: <code>nudge</code>, <code>poke&lt;i&gt;</code>`)
	})
}

// TestUIQueryTimeout: a query no worker answers ends within the request's
// time limit as a query timeout the card shows.
func TestUIQueryTimeout(t *testing.T) {
	t.Parallel()
	b := setupUI(t, &server.Config{AllowUnauthenticated: true, RequestTimeout: 3 * time.Second})
	b.startOn(t, "echo", "ui-query-unserved", "nobody-polls")
	br := b.browser(t)
	path := "/ui/namespaces/default/workflows/ui-query-unserved"
	resp, page := br.do(http.MethodPost, path+"/query", url.Values{"csrf": {csrfOf(t, pageOf(t, br, path))}, "kind": {"notes"}}, nil)
	require.Equal(t, http.StatusGatewayTimeout, resp.StatusCode)
	require.Contains(t, page, `id="query-error"`)
	require.Contains(t, page, "no worker answered query notes")
}
