package server_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestUIBrowserOperators drives headless Chromium to the pages that say what
// is wrong: the workers page, and a run that no worker serves.
func TestUIBrowserOperators(t *testing.T) {
	t.Parallel()
	b := setupUI(t, nil)
	b.startOn(t, "echo", "stuck-export", "nobody-polls")
	b.startOpsWorker(t)
	b.startOn(t, "ops_parent", "ops-parent", "ops-panics")

	br := newChrome(t, 1280, 900)
	do, text, shot := br.do, br.text, br.shot

	do(chromedp.Navigate(b.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	do(chromedp.SendKeys(chromedp.CSS("#token"), readerSecret), chromedp.Click(chromedp.CSS("#sign-in")),
		chromedp.WaitVisible(chromedp.CSS("table.runs")))

	// The header leads to the workers page, which lists the test's worker.
	do(chromedp.Click(chromedp.CSS(`.main-nav a[href$="/workers"]`)), chromedp.WaitVisible(chromedp.CSS("#workers")))
	require.Contains(t, text("#workers"), "ui_order")
	require.Contains(t, text("#workers"), "reserve_stock")
	shot("ops-01-workers.png")

	// A run on a queue nobody polls says so, and links to the workers.
	do(chromedp.Navigate(b.url+"/ui/namespaces/default/workflows/stuck-export"), chromedp.WaitVisible(chromedp.CSS("#no-workers")))
	require.Contains(t, text("#no-workers"), `No live worker serves queue "nobody-polls"`)
	shot("ops-02-no-workers.png")
	do(chromedp.Click(chromedp.CSS(`#no-workers a`)), chromedp.WaitVisible(chromedp.CSS("#workers")))

	// A parent links to its child; the child, asleep, shows its timer's
	// fire time and links back.
	do(chromedp.Navigate(b.url+"/ui/namespaces/default/workflows/ops-parent"), chromedp.WaitVisible(chromedp.CSS("#children a")))
	do(chromedp.Click(chromedp.CSS("#children a")), chromedp.WaitVisible(chromedp.CSS("#parent a")))
	do(chromedp.WaitVisible(chromedp.CSS("#pending-timers")))
	require.Regexp(t, `in (23h|1d)`, text("#pending-timers"))
	shot("ops-03-child-timer.png")
	do(chromedp.Click(chromedp.CSS("#parent a")), chromedp.WaitVisible(chromedp.CSS("#children")))
}
