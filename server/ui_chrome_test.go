package server_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// chromeStepTimeout bounds each step of a browser test.
const chromeStepTimeout = 30 * time.Second

// chrome is a headless Chromium window for one browser test, closed when
// the test ends; its steps fail the test.
type chrome struct {
	t   *testing.T
	ctx context.Context
	dir string // where shot writes screenshots
}

// newChrome starts Chromium (skipping the test where there is none, failing
// it under CI) with a window of width × height.
func newChrome(t *testing.T, width, height int) *chrome {
	t.Helper()
	chromium := chromiumPath(t)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.WithoutCancel(t.Context()),
		append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromium),
			chromedp.NoSandbox, // CI runs as root
			chromedp.Flag("disable-dev-shm-usage", true),
			chromedp.WindowSize(width, height),
		)...)
	ctx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		_ = chromedp.Cancel(ctx)
		cancelBrowser()
		cancelAlloc()
	})
	// The first step starts the browser, so it gets no deadline of its own.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	return &chrome{t: t, ctx: ctx, dir: artifactsDir(t)}
}

// do runs steps.
func (c *chrome) do(steps ...chromedp.Action[chromedp.Void]) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, chromeStepTimeout)
	defer cancel()
	require.NoError(c.t, chromedp.Do(ctx, steps...))
}

// text returns the text of the element sel selects.
func (c *chrome) text(sel string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, chromeStepTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	require.NoError(c.t, err)
	return s
}

// shot writes a screenshot of the whole page as name.
func (c *chrome) shot(name string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, chromeStepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(c.t, err)
	require.NoError(c.t, os.WriteFile(filepath.Join(c.dir, name), png, 0o644))
}
