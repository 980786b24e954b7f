package main

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/worker"
)

// stuckShipActivity stands in for a shipping call that hangs until the
// activity is cancelled.
type stuckShipActivity struct {
	activity.Defaults[ShipArgs, string]
	started chan struct{}
	once    sync.Once
}

func (a *stuckShipActivity) Execute(ctx context.Context, args ShipArgs) (string, error) {
	a.once.Do(func() { close(a.started) })
	<-ctx.Done()
	return "", ctx.Err()
}

// Cancelling a run mid-saga compensates the steps done so far, and the run
// ends cancelled.
func TestOrderSagaCancelled(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)

	var out bytes.Buffer
	shop := &Shop{out: &out}
	ship := &stuckShipActivity{started: make(chan struct{})}
	w, err := worker.New(pool, &worker.Config{Schema: schema})
	require.NoError(t, err)
	worker.AddWorkflow(w, &OrderWorkflow{})
	worker.AddActivity(w, &ReserveActivity{Shop: shop})
	worker.AddActivity(w, &ReleaseActivity{Shop: shop})
	worker.AddActivity(w, &ChargeActivity{Shop: shop})
	worker.AddActivity(w, &RefundActivity{Shop: shop})
	worker.AddActivity(w, ship)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	c, err := client.New(pool, &client.Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	run, err := c.Start(ctx, OrderArgs{ID: "o-9", SKU: "widget", Qty: 1, Cents: 500}, &client.StartOpts{WorkflowID: "order-o-9"})
	require.NoError(t, err)
	select {
	case <-ship.started:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	require.NoError(t, c.Cancel(ctx, run.WorkflowID, run.RunID, "customer changed their mind"))

	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = client.GetResult[Receipt](waitCtx, run)
	var failed *client.WorkflowFailedError
	require.True(t, errors.As(err, &failed), "%v", err)
	require.Equal(t, "cancelled", failed.State)

	shop.mu.Lock()
	defer shop.mu.Unlock()
	require.Equal(t, `  reserve   1 × widget (res-o-9)
  charge    500 cents (ch-o-9)
  undo      refund 500 cents (ch-o-9)
  undo      release res-o-9
`, out.String())
}
