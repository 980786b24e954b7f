package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/workflow"
	"github.com/weirhq/weir/workflow/workflowtest"
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
			env := workflowtest.New(t, nil)
			var calls []string
			step := func(name, result string) (string, error) {
				calls = append(calls, name)
				if name == tt.failAt {
					return "", &workflow.ApplicationError{Message: name + " broke", NonRetryable: true}
				}
				return result, nil
			}
			workflowtest.OnActivity(env, func(context.Context, ReserveArgs) (string, error) { return step("reserve", "res-1") })
			workflowtest.OnActivity(env, func(context.Context, ChargeArgs) (string, error) { return step("charge", "ch-1") })
			workflowtest.OnActivity(env, func(context.Context, ShipArgs) (string, error) { return step("ship", "1Z-1") })
			workflowtest.OnActivity(env, func(_ context.Context, a ReleaseArgs) (struct{}, error) {
				require.Equal(t, "res-1", a.ReservationID)
				_, err := step("release", "")
				return struct{}{}, err
			})
			workflowtest.OnActivity(env, func(_ context.Context, a RefundArgs) (struct{}, error) {
				require.Equal(t, "ch-1", a.ChargeID)
				_, err := step("refund", "")
				return struct{}{}, err
			})

			receipt, err := workflowtest.Execute(env, &OrderWorkflow{}, OrderArgs{ID: "o-1", SKU: "widget", Qty: 1, Cents: 100})
			require.Equal(t, tt.want, calls)
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
