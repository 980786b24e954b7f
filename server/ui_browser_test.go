package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/server"
)

// chromiumPath finds a headless-capable Chromium: $WEIR_CHROMIUM, else
// Debian's chromium on PATH. Without one the test skips, except under
// CI=true, where .ci/run installs it and the test must run.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if path := os.Getenv("WEIR_CHROMIUM"); path != "" {
		return path
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium binary on PATH under CI=true: .ci/run installs Debian's chromium; install it (apt-get install chromium) or set WEIR_CHROMIUM")
	}
	t.Skip("skipping the browser test: no chromium binary on PATH (apt-get install chromium, or set WEIR_CHROMIUM); under CI=true it runs")
	return ""
}

// artifactsDir is where screenshots go: $WEIR_UI_ARTIFACTS if set (kept),
// else the test's temp dir.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("WEIR_UI_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return dir
}

// TestUIBrowser drives headless Chromium through the UI: sign in, list,
// open a run started through the API, watch it progress, signal it from
// its page, see it complete, open River UI, and look at a run as a reader;
// it saves a screenshot of each step.
func TestUIBrowser(t *testing.T) {
	t.Parallel()

	begin := time.Now()
	chromium := chromiumPath(t)
	dir := artifactsDir(t)
	b := setupUI(t, nil)

	// Some history for the list: completed, failed, terminated, running.
	for i := range 3 {
		b.start(t, "echo", "greeting-"+strconv.Itoa(i+1), echoArgs{Msg: "hello " + strconv.Itoa(i+1)})
	}
	b.start(t, "ui_fail", "invoice-77", uiFailArgs{Reason: "card declined: insufficient funds"})
	b.start(t, "wait_for_go", "nightly-report", nil)
	require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/workflows/nightly-report/terminate",
		writerSecret, &server.ReasonRequest{Reason: "superseded by a manual run"}, nil))
	b.start(t, "wait_for_go", "export-batch-9", nil)
	b.await(t, "invoice-77")

	// The run the browser follows.
	order := b.start(t, "ui_order", "order-1042", uiOrderArgs{Customer: "Ada Lovelace", Items: 3, OrderID: "1042"})
	runPage := b.url + "/ui/namespaces/default/workflows/order-1042"

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.WithoutCancel(t.Context()),
		append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromium),
			chromedp.NoSandbox, // CI runs as root
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.WindowSize(1440, 1000),
		)...)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	t.Cleanup(func() { _ = chromedp.Cancel(ctx) })

	// do runs steps with a deadline (the first Run starts the browser, so it
	// gets no deadline of its own).
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		stepCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		require.NoError(t, chromedp.Do(stepCtx, steps...))
	}
	shot := func(name string) {
		t.Helper()
		t.Logf("%s: screenshot %s", time.Since(begin).Round(time.Millisecond), name)
		stepCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		png, err := chromedp.Run(stepCtx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
	}
	// dumpRun logs what the page and the database show of the run the
	// browser follows, for a wait that timed out: whether the run or the
	// page got stuck.
	dumpRun := func() {
		t.Helper()
		pageCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		page, err := chromedp.Run(pageCtx, chromedp.Evaluate[string](`document.querySelectorAll("#history li.ev").length + " events shown; pending: " +
			!!document.querySelector("#pending-activities, #pending-inbox") + "; live: " +
			(document.querySelector("[data-live]") || {getAttribute: () => "none"}).getAttribute("data-history")`))
		t.Logf("page: %s (err %v)", page, err)
		names := dbschema.New(b.schema)
		pool := dbtest.Pool(t.Context(), t)
		for _, q := range []string{
			"SELECT string_agg(event_id || ' ' || type, ', ' ORDER BY event_id) FROM " + names.History + " WHERE run_id = $1",
			"SELECT state || ' next ' || next_event_id || ' task ' || coalesce(task_job_id::text, '-') FROM " + names.Run + " WHERE run_id = $1",
			"SELECT string_agg(scheduled_event_id || ' job ' || job_id, ', ') FROM " + names.Activity + " WHERE run_id = $1",
			"SELECT string_agg(type, ', ') FROM " + names.Inbox + " WHERE run_id = $1",
			"SELECT string_agg(id || ' ' || kind || ' ' || state || ' attempt ' || attempt || ' at ' || scheduled_at || ' now ' || now(), '; ') FROM " +
				names.RiverJob + " WHERE metadata @> jsonb_build_object('weir', jsonb_build_object('run_id', $1::text)) OR args @> jsonb_build_object('run_id', $1::text)",
			"SELECT string_agg(leader_id || ' until ' || expires_at, ', ') FROM " + dbschema.Qualify(b.schema, "river_leader") + " WHERE $1::uuid IS NOT NULL",
		} {
			var out *string
			err := pool.QueryRow(t.Context(), q, order.RunID).Scan(&out)
			if out == nil {
				empty := "(none)"
				out = &empty
			}
			t.Logf("%s\n  -> %s (err %v)", q, *out, err)
		}
	}
	// waitFor waits until a JavaScript expression is true, across the
	// reloads of the page's live refresh.
	waitFor := func(expr string) {
		t.Helper()
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for {
			ok, err := chromedp.Run(waitCtx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(10*time.Second)))
			if err == nil && ok {
				return
			}
			if waitCtx.Err() != nil {
				dumpRun()
			}
			require.NoError(t, waitCtx.Err(), "waiting for %s (last error: %v)", expr, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		stepCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		s, err := chromedp.Run(stepCtx, chromedp.TextContent(chromedp.CSS(sel)))
		require.NoError(t, err)
		return s
	}

	t.Logf("screenshots in %s", dir)

	// Sign in: any UI page sends an anonymous visitor to the login form.
	do(chromedp.Navigate(b.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	shot("01-login.png")
	do(chromedp.SendKeys(chromedp.CSS("#token"), writerSecret), chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("table.runs")))
	require.Contains(t, text("table.runs"), "order-1042")
	require.Contains(t, text("table.runs"), "invoice-77")
	shot("02-list.png")

	// Open the run; its page refreshes itself as the activity fails once,
	// is retried and completes, and the run waits for its approval.
	do(chromedp.Navigate(runPage), chromedp.WaitVisible(chromedp.CSS("#run-state")))
	waitFor(`document.querySelectorAll("#history li.ev").length >= 5 && !document.querySelector("#pending-activities, #pending-inbox")`)
	require.Contains(t, text("#history"), "ActivityCompleted")
	require.Contains(t, text("#run-state"), "running")
	require.Contains(t, text("#attempts"), "errored · retried")
	require.Contains(t, text("#args"), "Ada Lovelace")
	shot("03-run-waiting-for-signal.png")

	// Signal it from the page, and watch it complete.
	do(chromedp.SendKeys(chromedp.CSS("#signal-kind"), "approve"),
		chromedp.SendKeys(chromedp.CSS("#signal-args"), `{"by": "chromium"}`),
		chromedp.Click(chromedp.CSS("#signal-send")),
		chromedp.WaitVisible(chromedp.CSS("#flash")))
	waitFor(`!!document.querySelector("#run-state.state-completed")`)
	require.Contains(t, text("#result"), `"approved_by": "chromium"`)
	require.Contains(t, text("#history"), "SignalReceived")
	shot("04-run-completed.png")

	res := b.await(t, "order-1042")
	require.Equal(t, "completed", res.State)
	require.Equal(t, order.RunID, res.RunID)
	require.JSONEq(t, `{"approved_by": "chromium", "reservation": "rsv-1042"}`, string(res.Result))

	// A fenced attempt, as the fencing trigger logs one when a newer attempt
	// takes a job over while the old one still runs (made by hand here: a
	// real takeover needs a stalled worker), is flagged on the run's page.
	ctx2 := t.Context()
	pool := dbtest.Pool(ctx2, t)
	_, err := pool.Exec(ctx2, "INSERT INTO "+dbschema.Qualify(b.schema, "weir_job_attempt")+
		" (job_id, attempt, lease_token, attempted_by, started_at, outcome)"+
		" SELECT id, 1, gen_random_uuid(), 'worker-b (partitioned)', now() - interval '2 seconds', 'superseded'"+
		" FROM "+dbschema.New(b.schema).RiverJob+" WHERE kind = 'reserve_stock' AND metadata @> $1::jsonb",
		`{"weir":{"run_id":"`+order.RunID.String()+`"}}`)
	require.NoError(t, err)
	do(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#attempts")))
	require.Contains(t, text("#attempts"), "fenced · stale")
	shot("05-run-fenced-attempt.png")

	// A failed run shows its failure.
	do(chromedp.Navigate(b.url+"/ui/namespaces/default/workflows/invoice-77"), chromedp.WaitVisible(chromedp.CSS(".outcome.is-failure")))
	require.Contains(t, text(".outcome"), "card declined")
	shot("06-run-failed.png")

	// Filters: failed runs only.
	do(chromedp.Navigate(b.url+"/ui/namespaces/default/workflows?"+url.Values{"state": {"failed"}}.Encode()),
		chromedp.WaitVisible(chromedp.CSS("table.runs")))
	require.Contains(t, text("table.runs"), "invoice-77")
	require.NotContains(t, text("table.runs"), "order-1042")

	// A submitted form is not undone by the page's live refresh: while the
	// signal's POST is held in the browser, the run's history grows (a
	// signal through the API) and the page's poll sees it; it must not
	// reload the page, which would cancel the submission's navigation and
	// lose its answer (the flash message), as it did at random before.
	held := b.start(t, "wait_for_go", "held-signal", nil)
	heldPage := b.url + "/ui/namespaces/default/workflows/held-signal"
	do(chromedp.Navigate(heldPage), chromedp.WaitVisible(chromedp.CSS("#signal-form")))
	paused := make(chan fetch.RequestID, 1)
	listenCtx, stopListening := context.WithCancel(ctx)
	defer stopListening()
	require.NoError(t, chromedp.Listen(listenCtx, func(ev any) {
		if e, ok := ev.(*fetch.EventRequestPaused); ok && e.Request.Method == http.MethodPost {
			select {
			case paused <- e.RequestID:
			default:
			}
		}
	}))
	do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*/held-signal/signal*"}}})
		return err
	}))
	do(chromedp.SendKeys(chromedp.CSS("#signal-kind"), "held"), chromedp.Click(chromedp.CSS("#signal-send")))
	var heldRequest fetch.RequestID
	select {
	case heldRequest = <-paused:
	case <-time.After(30 * time.Second):
		t.Fatal("the signal form's POST never reached the interception")
	}
	var described server.DescribeResponse
	heldPath := "/api/v1/namespaces/default/workflows/held-signal"
	require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodGet, heldPath, writerSecret, nil, &described))
	before := described.HistoryLength
	require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodPost, heldPath+"/signal", writerSecret, &server.SignalRequest{Kind: "through-the-api"}, nil))
	require.Eventually(t, func() bool {
		return b.apiCall(t, http.MethodGet, heldPath, writerSecret, nil, &described) == http.StatusOK && described.HistoryLength > before
	}, 30*time.Second, 50*time.Millisecond, "the API's signal never entered the history")
	time.Sleep(3500 * time.Millisecond) // two of the page's polls (every 1.5 s) see the longer history
	do(chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		if _, err := cdp.Call(ctx, t, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: heldRequest}); err != nil {
			return fmt.Errorf("the held submission was cancelled (did the page reload?): %w", err)
		}
		_, err := cdp.Call(ctx, t, fetch.Disable, cdp.Empty{})
		return err
	}))
	do(chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, text("#flash"), "Signal")
	require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodGet, heldPath, writerSecret, nil, &described))
	require.Equal(t, held.RunID, described.RunID)

	// River UI needs a token of every namespace: sign out, sign in as admin.
	do(chromedp.Navigate(b.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS("button.link")),
		chromedp.Click(chromedp.CSS("button.link")), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.Navigate(b.url+"/riverui/"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), adminSecret), chromedp.Click(chromedp.CSS("#sign-in")))
	waitFor(`location.pathname.startsWith("/riverui/")`)
	do(chromedp.Navigate(b.url + "/riverui/jobs?state=completed"))
	waitFor(`document.body.innerText.includes("reserve_stock")`)
	shot("07-riverui.png")

	// A reader sees a running run without its action forms.
	do(chromedp.Navigate(b.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS("button.link")),
		chromedp.Click(chromedp.CSS("button.link")), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), readerSecret), chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("table.runs")),
		chromedp.Navigate(b.url+"/ui/namespaces/default/workflows/export-batch-9"),
		chromedp.WaitVisible(chromedp.CSS("#run-state")))
	require.Contains(t, text(".run-side"), "signalling, cancelling and terminating need write")
	waitFor(`!document.querySelector("#signal-form")`)
	shot("08-run-as-reader.png")
}
