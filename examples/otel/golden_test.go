package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/weirtest"
)

// TestGoldenHistory: today's OrderWorkflow still replays the history an
// earlier version recorded (testdata/charge_retried.json: the charge fails
// once and is retried). Record again with WEIR_UPDATE_GOLDEN=1 go test
// after a deliberate change.
func TestGoldenHistory(t *testing.T) {
	t.Parallel()
	env := weirtest.NewEnv(t, &weirtest.EnvConfig{WorkflowID: "order-1"})
	weirtest.OnActivity(env, ChargeArgs{}).Return(nil, errors.New("card network timeout")).Times(1)
	weirtest.OnActivity(env, ChargeArgs{}).Return("ch_1", nil)
	got, err := weirtest.ExecuteWorkflow(env, &OrderWorkflow{}, OrderArgs{Cents: 4200})
	require.NoError(t, err)
	require.Equal(t, "ch_1", got)
	weirtest.CheckGoldenHistory(t, env, &OrderWorkflow{}, "testdata/charge_retried.json")
}
