package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/weirtest"
)

// TestGoldenHistory: today's FulfillWorkflow still replays the history an
// earlier version recorded (testdata/fulfill.json). Record again with
// WEIR_UPDATE_GOLDEN=1 go test after a deliberate change.
func TestGoldenHistory(t *testing.T) {
	t.Parallel()
	env := weirtest.NewEnv(t, &weirtest.EnvConfig{WorkflowID: "order-1"})
	weirtest.OnActivity(env, MarkFulfilledArgs{}).Return("fulfilled", nil)
	got, err := weirtest.ExecuteWorkflow(env, &FulfillWorkflow{}, FulfillArgs{OrderID: "1"})
	require.NoError(t, err)
	require.Equal(t, "fulfilled", got)
	weirtest.CheckGoldenHistory(t, env, &FulfillWorkflow{}, "testdata/fulfill.json")
}
