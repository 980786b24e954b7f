package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/weirtest"
)

// TestGoldenHistory: today's BillingWorkflow still replays the history an
// earlier version recorded (testdata/billing.json). Record again with
// WEIR_UPDATE_GOLDEN=1 go test after a deliberate change.
func TestGoldenHistory(t *testing.T) {
	t.Parallel()
	env := weirtest.NewEnv(t, &weirtest.EnvConfig{WorkflowID: "billing-1"})
	weirtest.OnActivity(env, GenerateInvoiceArgs{}).Return(nil, nil) // a plain River worker: a null result
	weirtest.OnActivity(env, SendEmailArgs{}).Return(nil, nil)
	got, err := weirtest.ExecuteWorkflow(env, &BillingWorkflow{}, BillingArgs{OrderID: "1", Customer: "ann@example.com", Cents: 1999})
	require.NoError(t, err)
	require.Equal(t, "invoiced and emailed", got)
	weirtest.CheckGoldenHistory(t, env, &BillingWorkflow{}, "testdata/billing.json")
}
