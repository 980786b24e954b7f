package main

import (
	"cmp"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/weirtest"
	"github.com/weirhq/weir/workflow"
)

// The saga's logic, unit-tested in memory with mock activities: which steps
// run, and which compensations, in which order.
func TestOrderWorkflowCompensations(t *testing.T) {
	t.Parallel()

	tests := []struct {
		failAt string
		want   []string
	}{
		{"", []string{"reserve", "charge", "ship"}},
		{"reserve", []string{"reserve"}},
		{"charge", []string{"reserve", "charge", "release"}},
		{"ship", []string{"reserve", "charge", "ship", "refund", "release"}},
	}
	for _, tt := range tests {
		t.Run("fail="+tt.failAt, func(t *testing.T) {
			t.Parallel()
			env := weirtest.NewEnv(t, nil)
			var calls []string
			step := func(name, result string) (string, error) {
				calls = append(calls, name)
				if name == tt.failAt {
					return "", &workflow.ApplicationError{Message: name + " broke", NonRetryable: true}
				}
				return result, nil
			}
			weirtest.OnActivity(env, ReserveArgs{}).ReturnFunc(func(context.Context, ReserveArgs) (any, error) { return step("reserve", "res-1") })
			weirtest.OnActivity(env, ChargeArgs{}).ReturnFunc(func(context.Context, ChargeArgs) (any, error) { return step("charge", "ch-1") })
			weirtest.OnActivity(env, ShipArgs{}).ReturnFunc(func(context.Context, ShipArgs) (any, error) { return step("ship", "1Z-1") })
			weirtest.OnActivity(env, ReleaseArgs{}).ReturnFunc(func(_ context.Context, a ReleaseArgs) (any, error) {
				require.Equal(t, "res-1", a.ReservationID)
				_, err := step("release", "")
				return struct{}{}, err
			})
			weirtest.OnActivity(env, RefundArgs{}).ReturnFunc(func(_ context.Context, a RefundArgs) (any, error) {
				require.Equal(t, "ch-1", a.ChargeID)
				_, err := step("refund", "")
				return struct{}{}, err
			})

			receipt, err := weirtest.ExecuteWorkflow(env, &OrderWorkflow{}, OrderArgs{ID: "o-1", SKU: "widget", Qty: 1, Cents: 100})
			require.Equal(t, tt.want, calls)
			weirtest.CheckGoldenHistory(t, env, &OrderWorkflow{}, "testdata/fail-"+cmp.Or(tt.failAt, "none")+".json")
			if tt.failAt == "" {
				require.NoError(t, err)
				require.Equal(t, Receipt{ReservationID: "res-1", ChargeID: "ch-1", TrackingID: "1Z-1"}, receipt)
				return
			}
			require.ErrorContains(t, err, tt.failAt+" failed, order compensated")
			require.ErrorContains(t, err, tt.failAt+" broke")
		})
	}
}
