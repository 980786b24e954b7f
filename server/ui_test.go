package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// uiOrderArgs starts an order workflow: reserve stock (an activity whose
// first attempt fails), then wait for an approval signal.
type uiOrderArgs struct {
	Customer string `json:"customer"`
	Items    int    `json:"items"`
	OrderID  string `json:"order_id"`
}

func (uiOrderArgs) Kind() string { return "ui_order" }

type uiOrderResult struct {
	ApprovedBy  string `json:"approved_by"`
	Reservation string `json:"reservation"`
}

type uiApprove struct {
	By string `json:"by"`
}

func (uiApprove) Kind() string { return "approve" }

type uiOrderWorkflow struct {
	workflow.Defaults[uiOrderArgs, uiOrderResult]
}

func (w *uiOrderWorkflow) Run(ctx workflow.Context, args uiOrderArgs) (uiOrderResult, error) {
	reservation, err := workflow.ExecuteActivity[string](ctx, uiReserveArgs{OrderID: args.OrderID, Items: args.Items},
		&workflow.ActivityOpts{RetryPolicy: &workflow.RetryPolicy{InitialInterval: 10 * time.Millisecond}}).Get(ctx)
	if err != nil {
		return uiOrderResult{}, err
	}
	approval, err := workflow.GetSignalChannel[uiApprove](ctx).Receive(ctx)
	if err != nil {
		return uiOrderResult{}, err
	}
	return uiOrderResult{ApprovedBy: approval.By, Reservation: reservation}, nil
}

type uiReserveArgs struct {
	Items   int    `json:"items"`
	OrderID string `json:"order_id"`
}

func (uiReserveArgs) Kind() string { return "reserve_stock" }

type uiReserveActivity struct {
	activity.Defaults[uiReserveArgs, string]
}

func (a *uiReserveActivity) Execute(ctx context.Context, args uiReserveArgs) (string, error) {
	if info, _ := activity.GetInfo(ctx); info.Attempt == 1 {
		return "", errors.New("warehouse API: 503 Service Unavailable")
	}
	return "rsv-" + args.OrderID, nil
}

type uiFailArgs struct {
	Reason string `json:"reason"`
}

func (uiFailArgs) Kind() string { return "ui_fail" }

type uiFailWorkflow struct {
	workflow.Defaults[uiFailArgs, string]
}

func (w *uiFailWorkflow) Run(_ workflow.Context, args uiFailArgs) (string, error) {
	return "", fmt.Errorf("charging card: %w", errors.New(args.Reason))
}

type uiBundle struct {
	schema string
	srv    *server.Server
	url    string
}

// setupUI serves the server (API and UI) over a migrated schema with a
// worker running the UI tests' workflows and the API tests' ones.
func setupUI(t *testing.T, config *server.Config) *uiBundle {
	t.Helper()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)

	w, err := worker.New(pool, &worker.Config{Schema: schema})
	require.NoError(t, err)
	worker.AddWorkflow(w, &echoWorkflow{})
	worker.AddWorkflow(w, &waitWorkflow{})
	worker.AddWorkflow(w, &uiOrderWorkflow{})
	worker.AddWorkflow(w, &uiFailWorkflow{})
	worker.AddActivity(w, &uiReserveActivity{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})

	if config == nil {
		config = &server.Config{Tokens: []*server.Token{
			{Name: "admin", Namespaces: []string{server.NamespaceAll}, Role: server.RoleAdmin, Secret: adminSecret},
			{Name: "other", Namespaces: []string{"other"}, Role: server.RoleWrite, Secret: otherSecret},
			{Name: "reader", Namespaces: []string{"default"}, Role: server.RoleRead, Secret: readerSecret},
			{Name: "writer", Namespaces: []string{"default", "billing"}, Role: server.RoleWrite, Secret: writerSecret},
		}}
	}
	config.Schema = schema
	srv, err := server.New(pool, config)
	require.NoError(t, err)
	httpServer := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		httpServer.Close()
		require.NoError(t, srv.Close())
	})
	return &uiBundle{schema: schema, srv: srv, url: httpServer.URL}
}

// apiCall sends an API request with a bearer token and decodes a JSON
// answer into out (if not nil).
func (b *uiBundle) apiCall(t *testing.T, method, path, token string, body any, out any) int {
	t.Helper()
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(t, err)
		reader = strings.NewReader(string(data))
	}
	req, err := http.NewRequestWithContext(t.Context(), method, b.url+path, reader)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil {
		require.NoError(t, json.Unmarshal(data, out), string(data))
	}
	return resp.StatusCode
}

// start starts a workflow through the API and returns its run.
func (b *uiBundle) start(t *testing.T, kind, workflowID string, args any) *server.RunResponse {
	t.Helper()
	data, err := json.Marshal(args)
	require.NoError(t, err)
	var run server.RunResponse
	status := b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/workflows", writerSecret,
		&server.StartRequest{Args: data, Kind: kind, WorkflowID: workflowID}, &run)
	require.Equal(t, http.StatusCreated, status)
	return &run
}

// await long-polls the API until the run closes and returns its result.
func (b *uiBundle) await(t *testing.T, workflowID string) *server.ResultResponse {
	t.Helper()
	for {
		var res server.ResultResponse
		status := b.apiCall(t, http.MethodGet, "/api/v1/namespaces/default/workflows/"+url.PathEscape(workflowID)+"/result?wait=30s",
			adminSecret, nil, &res)
		require.Equal(t, http.StatusOK, status)
		if res.Closed {
			return &res
		}
		require.NoError(t, t.Context().Err())
	}
}

// browser is a cookie-keeping HTTP client that does not follow redirects.
type browser struct {
	b      *uiBundle
	client *http.Client
	t      *testing.T
}

func (b *uiBundle) browser(t *testing.T) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{b: b, t: t, client: &http.Client{
		Jar:           jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (br *browser) do(method, path string, form url.Values, header http.Header) (*http.Response, string) {
	br.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(br.t.Context(), method, br.b.url+path, body)
	require.NoError(br.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", br.b.url)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := br.client.Do(req)
	require.NoError(br.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(br.t, err)
	return resp, string(data)
}

func (br *browser) get(path string) (*http.Response, string) {
	return br.do(http.MethodGet, path, nil, nil)
}

func (br *browser) login(secret string) {
	br.t.Helper()
	resp, _ := br.do(http.MethodPost, "/ui/login", url.Values{"token": {secret}, "next": {"/ui/"}}, nil)
	require.Equal(br.t, http.StatusSeeOther, resp.StatusCode)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	require.NotNil(t, m, "no CSRF token in the page")
	return m[1]
}

func TestUI(t *testing.T) {
	t.Parallel()

	b := setupUI(t, nil)
	run := b.start(t, "wait_for_go", "ui-wait-<script>", nil)
	runPath := "/ui/namespaces/default/workflows/" + url.PathEscape(run.WorkflowID)
	first := b.start(t, "echo", "ui-echo-1", echoArgs{Msg: "hello"})
	b.await(t, "ui-echo-1")
	second := b.start(t, "echo", "ui-echo-1", echoArgs{Msg: "hello again"}) // generation 2
	b.await(t, "ui-echo-1")

	t.Run("ActionsNeedWriteRoleAndCSRF", func(t *testing.T) {
		t.Parallel()
		reader := b.browser(t)
		reader.login(readerSecret)
		resp, page := reader.get(runPath)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NotContains(t, page, `id="signal-form"`)
		require.Contains(t, page, "need <b>write</b>")

		// A reader's POST is refused server-side even with a valid CSRF token.
		form := url.Values{"csrf": {csrfOf(t, page)}, "run_id": {run.RunID.String()}, "kind": {"go"}}
		resp, _ = reader.do(http.MethodPost, runPath+"/signal", form, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)

		writer := b.browser(t)
		writer.login(writerSecret)
		_, page = writer.get(runPath)
		require.Contains(t, page, `id="signal-form"`)
		csrf := csrfOf(t, page)

		// Without the CSRF token, or from another origin, nothing happens.
		resp, _ = writer.do(http.MethodPost, runPath+"/terminate", url.Values{"run_id": {run.RunID.String()}}, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		resp, _ = writer.do(http.MethodPost, runPath+"/terminate", url.Values{"csrf": {csrf}, "run_id": {run.RunID.String()}},
			http.Header{"Origin": {"https://evil.example"}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		// A reader's CSRF token is not the writer's.
		resp, _ = writer.do(http.MethodPost, runPath+"/terminate", url.Values{"csrf": {csrfOf(t, pageOf(t, reader, runPath))}, "run_id": {run.RunID.String()}}, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)

		// Bad args re-render the page with the error.
		resp, page = writer.do(http.MethodPost, runPath+"/signal", url.Values{"csrf": {csrf}, "run_id": {run.RunID.String()}, "kind": {"go"}, "args": {"{nope"}}, nil)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, page, "not valid JSON")

		resp, _ = writer.do(http.MethodPost, runPath+"/signal", url.Values{"csrf": {csrf}, "run_id": {run.RunID.String()}, "kind": {"go"}, "args": {`{"value": "ui"}`}}, nil)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Location"), "flash=signal")
		res := b.await(t, run.WorkflowID)
		require.Equal(t, "completed", res.State)
		require.JSONEq(t, `"got ui"`, string(res.Result))

		_, page = writer.get(runPath + "?run_id=" + run.RunID.String() + "&flash=signal")
		require.Contains(t, page, "Signal sent.")
		require.Contains(t, page, "SignalReceived")
		require.Contains(t, page, "&#34;got ui&#34;")
		require.NotContains(t, page, `id="signal-form"`) // closed: no more actions
	})

	t.Run("EscapesEverything", func(t *testing.T) {
		t.Parallel()
		br := b.browser(t)
		br.login(adminSecret)
		_, page := br.get(runPath)
		require.NotContains(t, page, "<script>\"")
		require.NotContains(t, page, "ui-wait-<script>")
		require.Contains(t, page, "ui-wait-&lt;script&gt;")
		_, page = br.get("/ui/namespaces/default/workflows?prefix=%3Cimg+src%3Dx%3E")
		require.Contains(t, page, `value="&lt;img src=x&gt;"`)
	})

	t.Run("Generations", func(t *testing.T) {
		t.Parallel()
		br := b.browser(t)
		br.login(readerSecret)
		_, page := br.get("/ui/namespaces/default/workflows/ui-echo-1") // the latest run
		require.Contains(t, page, "generation 2")
		require.Contains(t, page, "hello again")
		require.Contains(t, page, `href="/ui/namespaces/default/workflows/ui-echo-1?run_id=`+first.RunID.String()+`"`)
		_, page = br.get("/ui/namespaces/default/workflows/ui-echo-1?run_id=" + first.RunID.String())
		require.Contains(t, page, "generation 1")
		require.Contains(t, page, `href="/ui/namespaces/default/workflows/ui-echo-1?run_id=`+second.RunID.String()+`"`)
		resp, _ := br.get("/ui/namespaces/default/workflows/no-such-workflow")
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
	})

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		br := b.browser(t)
		br.login(readerSecret)
		resp, page := br.get("/ui/namespaces/default/workflows?kind=echo")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, "ui-echo-1")
		require.NotContains(t, page, "ui-wait-")
		_, page = br.get("/ui/namespaces/default/workflows?prefix=ui-wait-")
		require.Contains(t, page, "ui-wait-&lt;script&gt;")
		require.NotContains(t, page, "ui-echo-1")
		_, page = br.get("/ui/namespaces/default/workflows?state=completed&since=1h")
		require.Contains(t, page, "ui-echo-1")
		_, page = br.get("/ui/namespaces/default/workflows?before=2000-01-01T00:00")
		require.Contains(t, page, "No workflows match")
		resp, page = br.get("/ui/namespaces/default/workflows?state=bogus")
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, page, "unknown state")

		// Outside the token's namespaces.
		resp, _ = br.get("/ui/namespaces/billing/workflows")
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
	})

	t.Run("Login", func(t *testing.T) {
		t.Parallel()
		br := b.browser(t)
		resp, _ := br.get("/ui/namespaces/default/workflows")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/ui/login?next=%2Fui%2Fnamespaces%2Fdefault%2Fworkflows", resp.Header.Get("Location"))

		resp, page := br.do(http.MethodPost, "/ui/login", url.Values{"token": {"not-a-token-at-all"}}, nil)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Contains(t, page, "not one this server accepts")

		// An open redirect is refused.
		resp, _ = br.do(http.MethodPost, "/ui/login", url.Values{"token": {readerSecret}, "next": {"//evil.example/ui/"}}, nil)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/ui/", resp.Header.Get("Location"))
		var cookie *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == "weir_session" {
				cookie = c
			}
		}
		require.NotNil(t, cookie)
		require.True(t, cookie.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)

		resp, _ = br.get("/ui/")
		require.Equal(t, http.StatusFound, resp.StatusCode)
		require.Equal(t, "/ui/namespaces/default/workflows", resp.Header.Get("Location"))

		// The status endpoint needs the session too.
		anon := b.browser(t)
		resp, _ = anon.get(runPath + "/status")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		resp, body := br.get(runPath + "/status")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var status server.UIStatus
		require.NoError(t, json.Unmarshal([]byte(body), &status))
		require.NotEmpty(t, status.State)

		// Signing out clears the cookie.
		_, page = br.get("/ui/namespaces/default/workflows")
		resp, _ = br.do(http.MethodPost, "/ui/logout", url.Values{"csrf": {csrfOf(t, page)}}, nil)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		resp, _ = br.get("/ui/namespaces/default/workflows")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	})

	t.Run("RiverUI", func(t *testing.T) {
		t.Parallel()
		anon := b.browser(t)
		resp, _ := anon.get("/riverui/")
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		resp, _ = anon.get("/riverui/api/jobs?state=completed")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

		// A token of some namespaces only may not see every namespace's jobs.
		writer := b.browser(t)
		writer.login(writerSecret)
		resp, _ = writer.get("/riverui/")
		require.Equal(t, http.StatusForbidden, resp.StatusCode)

		admin := b.browser(t)
		admin.login(adminSecret)
		resp, page := admin.get("/riverui/")
		require.Equal(t, http.StatusOK, resp.StatusCode, page)
		require.Contains(t, page, "<html")
		// An activity is a River job (a first workflow task started by a
		// worker's own process may have none).
		b.start(t, "ui_order", "riverui-order", uiOrderArgs{Customer: "ada", Items: 1, OrderID: "R-1"})
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, page = admin.get("/riverui/api/jobs?state=completed")
			require.Equal(t, http.StatusOK, resp.StatusCode, page)
			if strings.Contains(page, `"kind":"reserve_stock"`) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		require.Contains(t, page, `"kind":"reserve_stock"`)

		// A mutation from another origin is refused.
		resp, _ = admin.do(http.MethodPost, "/riverui/api/jobs/retry", url.Values{}, http.Header{"Origin": {"https://evil.example"}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		resp, page := b.browser(t).get("/ui/nowhere/<b>")
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Content-Type"), "text/html")
		require.Contains(t, page, "/ui/nowhere/&lt;b&gt;")
	})

	t.Run("Static", func(t *testing.T) {
		t.Parallel()
		resp, body := b.browser(t).get("/ui/static/weir.css")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, resp.Header.Get("Content-Type"), "text/css")
		require.Contains(t, body, "--accent")
		for _, dir := range []string{"/ui/static/", "/ui/static/nope.css"} {
			resp, body = b.browser(t).get(dir)
			require.Equal(t, http.StatusNotFound, resp.StatusCode, dir)
			require.NotContains(t, body, `href="weir.css"`, "no directory listing at %s", dir)
		}
	})
}

func pageOf(t *testing.T, br *browser, path string) string {
	t.Helper()
	_, page := br.get(path)
	return page
}

// TestUIFailureReadsAsSentences: the run page's failure chain names no Go
// type (a wrapping error records its Go type's name; the raw history keeps
// it), and says each text.
func TestUIFailureReadsAsSentences(t *testing.T) {
	t.Parallel()

	b := setupUI(t, nil)
	b.start(t, "ui_fail", "invoice-sentences", uiFailArgs{Reason: "card declined"})
	res := b.await(t, "invoice-sentences")
	require.Equal(t, "failed", res.State)

	br := b.browser(t)
	br.login(readerSecret)
	resp, page := br.get("/ui/namespaces/default/workflows/invoice-sentences")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, card, found := strings.Cut(page, `class="card outcome is-failure"`)
	require.True(t, found, "no failure card")
	card, _, _ = strings.Cut(card, "</section>")
	require.Contains(t, card, "charging card")
	require.Contains(t, card, "card declined")
	require.NotContains(t, card, "*fmt.wrapError") // the raw history keeps it
	require.NotContains(t, card, "*errors.errorString")
}

func TestUIAttempts(t *testing.T) {
	t.Parallel()

	b := setupUI(t, nil)
	run := b.start(t, "ui_order", "order-attempts", uiOrderArgs{Customer: "ada", Items: 2, OrderID: "A-1"})
	require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/workflows/order-attempts/signal",
		writerSecret, &server.SignalRequest{Kind: "approve", Args: json.RawMessage(`{"by":"bob"}`)}, nil))
	res := b.await(t, "order-attempts")
	require.Equal(t, "completed", res.State, "%+v", res.Failure)

	// A stale attempt as the fencing log records it: superseded by a newer
	// attempt of the same job while it ran.
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	names := dbschema.New(b.schema)
	var jobID int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT id FROM "+names.RiverJob+" WHERE kind = 'reserve_stock' AND metadata @> $1::jsonb",
		`{"weir":{"run_id":"`+run.RunID.String()+`"}}`).Scan(&jobID))
	_, err := pool.Exec(ctx, "INSERT INTO "+dbschema.Qualify(b.schema, "weir_job_attempt")+
		" (job_id, attempt, lease_token, attempted_by, started_at, outcome) VALUES ($1, 1, gen_random_uuid(), 'host-a', now() - interval '1 minute', 'superseded')", jobID)
	require.NoError(t, err)

	br := b.browser(t)
	br.login(readerSecret)
	resp, page := br.get("/ui/namespaces/default/workflows/order-attempts")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "fenced · stale")
	require.Contains(t, page, "host-a")
	require.Contains(t, page, "workflow task")
	require.Contains(t, page, "ActivityCompleted")
	require.Contains(t, page, "rsv-A-1")
	require.Contains(t, page, "&#34;customer&#34;: &#34;ada&#34;")
	require.Contains(t, page, "errored · retried") // the first, failed attempt
	require.Contains(t, page, "warehouse API: 503 Service Unavailable")
	// The attempts that completed their jobs, kept on the jobs' rows.
	_, section, _ := strings.Cut(page, `id="attempts"`)
	section, _, _ = strings.Cut(section, "</ul>")
	require.Contains(t, section, `job-completed">completed</span>`)
	require.Contains(t, section, "attempt 2")      // the retried activity's
	require.NotContains(t, page, "/riverui/jobs/") // a reader of one namespace gets no River UI links
}

func TestUIOpen(t *testing.T) {
	t.Parallel()

	b := setupUI(t, &server.Config{AllowUnauthenticated: true})
	run := b.start(t, "wait_for_go", "open-wait", nil)
	br := b.browser(t)
	resp, page := br.get("/ui/namespaces/default/workflows/open-wait")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "open (dev)")
	require.Contains(t, page, `id="signal-form"`)

	// Open, yet still CSRF-checked: a cross-site form can't terminate runs.
	resp, _ = br.do(http.MethodPost, "/ui/namespaces/default/workflows/open-wait/terminate",
		url.Values{"run_id": {run.RunID.String()}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = br.do(http.MethodPost, "/ui/namespaces/default/workflows/open-wait/terminate",
		url.Values{"csrf": {csrfOf(t, page)}, "run_id": {run.RunID.String()}, "reason": {"test"}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "terminated", b.await(t, "open-wait").State)

	resp, _ = br.get("/")
	require.Equal(t, http.StatusFound, resp.StatusCode)
	resp, _ = br.get("/riverui/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestUIRunPageLiveRefreshAfterARace: a run page reads the run (its state,
// pending activities and inbox) and then its history; when the run moves
// in between, the page shows the newer history with the older pending
// lists. Its live refresh must then reload (its length is Describe's, which
// the run has left), or a page could show an activity pending for good
// (TestUIBrowser once waited 30 s for such a page).
func TestUIRunPageLiveRefreshAfterARace(t *testing.T) {
	t.Parallel()

	b := setupUI(t, nil)
	run := b.start(t, "wait_for_go", "ui-race", nil)
	runPath := "/ui/namespaces/default/workflows/" + url.PathEscape(run.WorkflowID)
	br := b.browser(t)
	br.login(writerSecret)
	status := func() server.UIStatus {
		t.Helper()
		resp, body := br.get(runPath + "/status?run_id=" + run.RunID.String())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var s server.UIStatus
		require.NoError(t, json.Unmarshal([]byte(body), &s))
		return s
	}
	require.Eventually(t, func() bool { return status().HistoryLength >= 2 }, 30*time.Second, 10*time.Millisecond, "the first task ran")
	before := status().HistoryLength

	// Between the page's two reads, an update moves the run (its events
	// commit before the update's answer).
	var once sync.Once
	server.SetAfterDescribe(b.srv, func() {
		once.Do(func() {
			var value server.ValueResponse
			require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/workflows/ui-race/update", writerSecret,
				&server.UpdateRequest{Kind: "add_note", Args: json.RawMessage(`{"note":"n"}`), UpdateID: "u1"}, &value))
		})
	})
	page := pageOf(t, br, runPath)
	after := status().HistoryLength
	require.Greater(t, after, before, "the update moved the run while the page rendered")
	require.Contains(t, page, fmt.Sprintf(`<h2>History <span class="muted">%d events</span></h2>`, after), "the page shows the newer history")
	require.Contains(t, page, fmt.Sprintf(`data-history="%d"`, before),
		"the live refresh compares the run's length with the one its pending lists were read at, so it reloads")
}

// TestUIRunPageBoundsDeepPayloads: args of 9,000 nested arrays (18 KB),
// which indented would make a page of hundreds of megabytes, are shown raw
// and cut, with a download of the whole.
func TestUIRunPageBoundsDeepPayloads(t *testing.T) {
	t.Parallel()
	b := setupUI(t, nil)
	const depth = 9000
	args := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	var run server.RunResponse
	require.Equal(t, http.StatusCreated, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/workflows", writerSecret,
		&server.StartRequest{Args: json.RawMessage(args), Kind: "nobody_runs_this", WorkflowID: "deep-args"}, &run))

	br := b.browser(t)
	br.login(readerSecret)
	resp, page := br.get("/ui/namespaces/default/workflows/deep-args")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Less(t, len(page), 256<<10, "the page stays small")
	require.Contains(t, page, "Download the args")
	m := regexp.MustCompile(`href="([^"]*/payload/args\?run_id=[^"]*)"`).FindStringSubmatch(page)
	require.NotNil(t, m)
	resp, body := br.get(strings.ReplaceAll(m[1], "&amp;", "&"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, args, body)
	require.Contains(t, resp.Header.Get("Content-Disposition"), "attachment")
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))

	// The download is the run's, in the reader's namespace only.
	other := b.browser(t)
	other.login(otherSecret)
	resp, _ = other.get(strings.ReplaceAll(m[1], "&amp;", "&"))
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = br.get("/ui/namespaces/default/workflows/another-id/payload/args?run_id=" + run.RunID.String())
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, _ = br.get("/ui/namespaces/default/workflows/deep-args/payload/secrets?run_id=" + run.RunID.String())
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// TestUISessions: the UI's cookie holds a session ID, not the token's
// secret; signing out revokes it (a copy of the cookie no longer works),
// sessions expire, and failed sign-ins from one address are limited.
func TestUISessions(t *testing.T) {
	t.Parallel()
	b := setupUI(t, nil)
	var mu sync.Mutex
	now := time.Now()
	server.SetUINow(b.srv, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	const page = "/ui/namespaces/default/workflows"

	sessionCookie := func(br *browser) *http.Cookie {
		u, err := url.Parse(b.url)
		require.NoError(t, err)
		for _, c := range br.client.Jar.Cookies(u) {
			if c.Name == "weir_session" {
				return c
			}
		}
		require.FailNow(t, "no session cookie")
		return nil
	}
	withCookie := func(c *http.Cookie) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, b.url+page, nil)
		require.NoError(t, err)
		req.AddCookie(c)
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}

	br := b.browser(t)
	br.login(readerSecret)
	stolen := sessionCookie(br)
	require.NotContains(t, stolen.Value, readerSecret)
	require.NotContains(t, stolen.Value, "reader-secret")
	require.Equal(t, http.StatusOK, withCookie(stolen))
	// A cookie holding the secret itself is no session.
	require.Equal(t, http.StatusSeeOther, withCookie(&http.Cookie{Name: "weir_session", Value: readerSecret}))

	_, html := br.get(page)
	resp, _ := br.do(http.MethodPost, "/ui/logout", url.Values{"csrf": {csrfOf(t, html)}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, http.StatusSeeOther, withCookie(stolen), "signing out revokes the session")

	br.login(readerSecret)
	require.Equal(t, http.StatusOK, withCookie(sessionCookie(br)))
	advance(13 * time.Hour)
	require.Equal(t, http.StatusSeeOther, withCookie(sessionCookie(br)), "sessions expire")

	// Ten failed sign-ins lock the address out, the right token too, until
	// the window passes.
	guesser := b.browser(t)
	for range 10 {
		resp, _ := guesser.do(http.MethodPost, "/ui/login", url.Values{"token": {"guess-0123456789abcdef"}}, nil)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	resp, _ = guesser.do(http.MethodPost, "/ui/login", url.Values{"token": {readerSecret}}, nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	advance(6 * time.Minute)
	guesser.login(readerSecret)
}
