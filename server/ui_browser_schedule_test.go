package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/server"
)

// TestUIBrowserSchedulesAndQueries drives headless Chromium, 800 px wide,
// through a schedule's page (pause, resume, trigger, backfill, the link to
// a run and back) and a running run's page (no card wider than the page,
// a query and its answer, the signal kinds received).
func TestUIBrowserSchedulesAndQueries(t *testing.T) {
	t.Parallel()
	b := setupUI(t, nil)
	require.Equal(t, http.StatusCreated, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/schedules", adminSecret,
		&server.ScheduleRequest{ScheduleID: "reports-nightly", Kind: "echo", Every: "24h"}, nil))
	b.start(t, "wait_for_go", "ledger-reconcile-2026-q4-with-a-rather-long-workflow-id", nil)
	runPath := "/ui/namespaces/default/workflows/ledger-reconcile-2026-q4-with-a-rather-long-workflow-id"
	require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/workflows/ledger-reconcile-2026-q4-with-a-rather-long-workflow-id/update",
		writerSecret, &server.UpdateRequest{Kind: "add_note", Args: json.RawMessage(`{"note":"first note"}`)}, nil))
	require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/workflows/ledger-reconcile-2026-q4-with-a-rather-long-workflow-id/signal",
		writerSecret, &server.SignalRequest{Kind: "poke"}, nil))

	b.start(t, "ui_fail", "invoice-2026-000123-with-a-long-id", uiFailArgs{Reason: "card declined: " + strings.Repeat("insufficient_funds_", 12)})
	b.await(t, "invoice-2026-000123-with-a-long-id")
	b.startOn(t, "echo", "stuck-export", "nobody-polls-this-queue-with-a-rather-long-name")

	br := newChrome(t, 800, 1000)
	ctx, do, text, shot := br.ctx, br.do, br.text, br.shot
	eval := func(expr string) bool {
		t.Helper()
		stepCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		ok, err := chromedp.Run(stepCtx, chromedp.Evaluate[bool](expr))
		require.NoError(t, err)
		return ok
	}
	waitFor := func(expr string) {
		t.Helper()
		waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for { // a poll fails when the page navigates: poll the new page
			ok, err := chromedp.Run(waitCtx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(10*time.Second)))
			if err == nil && ok {
				return
			}
			require.NoError(t, waitCtx.Err(), "waiting for %s (last error: %v)", expr, err)
		}
	}
	// confirmAll answers the page's confirmation dialogs with yes (a page
	// load resets it).
	confirmAll := func() { eval(`window.confirm = () => true, true`) }
	// clipped opens every <details> and names each element of the page
	// that reaches past the window's right edge or past its card, unless a
	// scrolling box holds it ("" when none).
	const clipped = `(() => {
		document.querySelectorAll("details").forEach(d => d.open = true);
		const width = document.documentElement.clientWidth, out = [];
		if (document.documentElement.scrollWidth > width) out.push("the page scrolls sideways");
		for (const el of document.querySelectorAll("main *")) {
			let scroller = false;
			for (let p = el.parentElement; p && p.tagName !== "MAIN"; p = p.parentElement) {
				const o = getComputedStyle(p).overflowX;
				if (o === "auto" || o === "scroll") { scroller = true; break; }
			}
			if (scroller) continue;
			const r = el.getBoundingClientRect(), card = el.closest(".card");
			const edge = card ? card.getBoundingClientRect().right : width;
			if (r.width > 0 && r.right > Math.min(edge, width) + 1) out.push(el.tagName + (el.id ? "#" + el.id : "") + "." + el.className + " right " + r.right + " > " + Math.min(edge, width));
		}
		return out.slice(0, 10).join("; ");
	})()`
	noClip := func(page string) {
		t.Helper()
		stepCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := chromedp.Run(stepCtx, chromedp.Evaluate[string](clipped))
		require.NoError(t, err)
		require.Empty(t, out, "%s clips at 800 px", page)
	}

	do(chromedp.Navigate(b.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	do(chromedp.SendKeys(chromedp.CSS("#token"), adminSecret), chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("table.runs")))

	// The schedules list leads to the schedule's page.
	do(chromedp.Click(chromedp.CSS(`.main-nav a[href$="/schedules"]`)), chromedp.WaitVisible(chromedp.CSS("#schedules")))
	do(chromedp.Click(chromedp.CSS(`#schedules a[href$="/schedules/reports-nightly"]`)), chromedp.WaitVisible(chromedp.CSS("#schedule-pause")))
	require.Equal(t, "active", text("#schedule-state"))

	do(chromedp.Click(chromedp.CSS("#schedule-pause")), chromedp.WaitVisible(chromedp.CSS("#schedule-resume")))
	require.Equal(t, "paused", text("#schedule-state"))
	require.Contains(t, text("#flash"), "Schedule paused")
	do(chromedp.Click(chromedp.CSS("#schedule-resume")), chromedp.WaitVisible(chromedp.CSS("#schedule-pause")))
	require.Equal(t, "active", text("#schedule-state"))

	confirmAll()
	do(chromedp.Click(chromedp.CSS("#schedule-trigger")))
	waitFor(`document.querySelector("#schedule-runs") && document.querySelector("#schedule-runs").innerText.includes("reports-nightly/manual-")`)

	// A backfill of the next three days starts three runs.
	confirmAll()
	start := time.Now().UTC().Add(time.Minute)
	do(chromedp.SetValue(chromedp.CSS("#backfill-start"), start.Format("2006-01-02T15:04")),
		chromedp.SetValue(chromedp.CSS("#backfill-end"), start.Add(72*time.Hour+time.Minute).Format("2006-01-02T15:04")),
		chromedp.Click(chromedp.CSS("#backfill-send")))
	waitFor(`document.querySelectorAll("#schedule-runs tbody tr").length === 4`)
	noClip("the schedule's page")
	shot("sched-01-schedule.png")

	// A run of the schedule links back to it.
	do(chromedp.Click(chromedp.CSS(`#schedule-runs a[href*="manual-"]`)), chromedp.WaitVisible(chromedp.CSS("#schedule a")))
	do(chromedp.Click(chromedp.CSS("#schedule a")), chromedp.WaitVisible(chromedp.CSS("#schedule-id")))

	// A running run's page fits 800 px; a query shows its answer.
	do(chromedp.Navigate(b.url+runPath), chromedp.WaitVisible(chromedp.CSS("#query-form")))
	noClip("a running run's page")
	shot("sched-02-run-800.png")
	do(chromedp.SendKeys(chromedp.CSS("#query-kind"), "notes"), chromedp.Click(chromedp.CSS("#query-send")),
		chromedp.WaitVisible(chromedp.CSS("#query-answer")))
	require.Contains(t, text("#query-answer"), "first note")
	noClip("a run's page with a query's answer")
	waitFor(`document.querySelector("#received-signals") && document.querySelector("#received-signals").innerText.includes("poke")`)
	shot("sched-03-query.png")

	// The built-in queries: where the code waits, and what it accepts.
	do(chromedp.Navigate(b.url+runPath), chromedp.WaitVisible(chromedp.CSS("#stack-trace")))
	do(chromedp.Click(chromedp.CSS("#stack-trace")), chromedp.WaitVisible(chromedp.CSS("#query-stack")))
	require.Contains(t, text("#query-stack"), "(*waitWorkflow).Run")
	noClip("a run's page with its stack trace")
	do(chromedp.Navigate(b.url+runPath), chromedp.WaitVisible(chromedp.CSS("#handlers")))
	do(chromedp.Click(chromedp.CSS("#handlers")), chromedp.WaitVisible(chromedp.CSS("#query-answer")))
	require.Contains(t, text("#query-answer"), "add_note")

	// A failed run's page, and a run no worker serves, fit 800 px too.
	do(chromedp.Navigate(b.url+"/ui/namespaces/default/workflows/invoice-2026-000123-with-a-long-id"), chromedp.WaitVisible(chromedp.CSS(".outcome.is-failure")))
	noClip("a failed run's page")
	shot("sched-04-failed-800.png")
	do(chromedp.Navigate(b.url+"/ui/namespaces/default/workflows/stuck-export"), chromedp.WaitVisible(chromedp.CSS("#no-workers")))
	noClip("the page of a run no worker serves")
	shot("sched-05-no-workers-800.png")
}
