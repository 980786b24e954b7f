package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestOrderSaga(t *testing.T) {
	t.Parallel()

	tests := []struct {
		failAt string
		want   string
	}{
		{"", `order o-1:
  reserve   2 × widget (res-o-1)
  charge    4200 cents (ch-o-1)
  ship      2 × widget (1Z-o-1)
order o-1 completed: reservation res-o-1, charge ch-o-1, tracking 1Z-o-1
`},
		{"reserve", `order o-1:
  reserve   FAILED: out of stock
order o-1 failed: reserve failed, order compensated: activity saga.reserve (event 3, attempt 1) failed: StepFailed: out of stock
`},
		{"charge", `order o-1:
  reserve   2 × widget (res-o-1)
  charge    FAILED: card declined
  undo      release res-o-1
order o-1 failed: charge failed, order compensated: activity saga.charge (event 6, attempt 1) failed: StepFailed: card declined
`},
		{"ship", `order o-1:
  reserve   2 × widget (res-o-1)
  charge    4200 cents (ch-o-1)
  ship      FAILED: no carrier available
  undo      refund 4200 cents (ch-o-1)
  undo      release res-o-1
order o-1 failed: ship failed, order compensated: activity saga.ship (event 9, attempt 1) failed: StepFailed: no carrier available
`},
	}
	for _, tt := range tests {
		t.Run("fail="+tt.failAt, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := dbtest.Pool(ctx, t)
			schema := dbtest.TestSchema(ctx, t)

			var out bytes.Buffer
			err := run(ctx, pool, schema, &out, "o-1", tt.failAt)
			if tt.failAt == "" {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, client.ErrWorkflowFailed)
			}
			require.Equal(t, tt.want, out.String())
		})
	}
}

// Each run of the example places an order of its own: a run right after
// another (in the same second) must not return the earlier order's run.
func TestNewOrderIDsDiffer(t *testing.T) {
	t.Parallel()
	require.NotEqual(t, newOrderID(), newOrderID())
}
