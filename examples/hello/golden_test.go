package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/weirtest"
)

// TestGoldenHistory: today's HelloWorkflow still replays the history an
// earlier version recorded (testdata/hello.json), so a change that would
// break runs in flight fails here. Record again, after a deliberate change
// behind workflow.GetVersion, with WEIR_UPDATE_GOLDEN=1 go test.
func TestGoldenHistory(t *testing.T) {
	t.Parallel()
	env := weirtest.NewEnv(t, &weirtest.EnvConfig{WorkflowID: "hello-Ada"})
	weirtest.RegisterActivity(env, &GreetActivity{})
	greeting, err := weirtest.ExecuteWorkflow(env, &HelloWorkflow{}, HelloArgs{Name: "Ada"})
	require.NoError(t, err)
	require.Equal(t, "Hello, Ada!", greeting)
	weirtest.CheckGoldenHistory(t, env, &HelloWorkflow{}, "testdata/hello.json")
}
