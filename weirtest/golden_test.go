package weirtest_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/weirtest"
	"github.com/weirhq/weir/workflow"
)

// fatalTB records a Fatalf and ends the goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	fatal string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// checkGolden runs CheckGoldenHistory on its own goroutine and returns what
// it failed with ("" if it passed).
func checkGolden[A workflow.Args, R any](t *testing.T, env *weirtest.Env, wf workflow.Workflow[A, R], path string) string {
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		weirtest.CheckGoldenHistory(tb, env, wf, path)
	}()
	<-done
	return tb.fatal
}

// Not parallel: it sets WEIR_UPDATE_GOLDEN.
func TestCheckGoldenHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "golden", "approval.json")
	approved := func() *weirtest.Env {
		env := weirtest.NewEnv(t, nil)
		weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "ch-1"}, nil)
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(Approve{By: "ann"}) }, time.Hour)
		_, err := weirtest.ExecuteWorkflow(env, &ApprovalWorkflow{}, OrderArgs{ID: "o-1"})
		require.NoError(t, err)
		return env
	}

	require.Contains(t, checkGolden(t, approved(), &ApprovalWorkflow{}, path), "WEIR_UPDATE_GOLDEN=1", "a missing golden history says how to record it")

	t.Setenv(weirtest.UpdateGoldenEnv, "1")
	require.Empty(t, checkGolden(t, approved(), &ApprovalWorkflow{}, path), "recorded, then replayed")
	t.Setenv(weirtest.UpdateGoldenEnv, "")

	require.Empty(t, checkGolden(t, approved(), &ApprovalWorkflow{}, path), "today's code replays it")
	failure := checkGolden(t, approved(), &approvalV2{}, path)
	require.Contains(t, failure, "no longer replays", "a non-deterministic change fails")
	require.Contains(t, failure, "non-deterministic code at event 3", "the first divergent event is named")
	require.Empty(t, checkGolden(t, approved(), &approvalV2Versioned{}, path), "the same change behind GetVersion replays")
}
