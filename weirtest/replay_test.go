package weirtest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/weirtest"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

var update = flag.Bool("update", false, "rewrite the golden histories in testdata/replay")

// goldenScenarios run the test workflows in an Env; their histories are
// committed in testdata/replay and must keep replaying.
func goldenScenarios() map[string]func(t *testing.T) *weirtest.Env {
	return map[string]func(t *testing.T) *weirtest.Env{
		"approval": func(t *testing.T) *weirtest.Env {
			env := weirtest.NewEnv(t, nil)
			weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "ch-1"}, nil)
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(Approve{By: "ann"}) }, 3*time.Hour)
			_, err := weirtest.ExecuteWorkflow(env, &ApprovalWorkflow{}, OrderArgs{ID: "o-1"})
			require.NoError(t, err)
			return env
		},
		"charge_retried": func(t *testing.T) *weirtest.Env {
			env := weirtest.NewEnv(t, nil)
			weirtest.OnActivity(env, ChargeArgs{}).Return(nil, errors.New("bank down")).Times(2)
			weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "ch-1"}, nil)
			_, err := weirtest.ExecuteWorkflow(env, &ChargeWorkflow{Activity: retry3x(5)}, OrderArgs{ID: "o-2"})
			require.NoError(t, err)
			return env
		},
		"race_timer_wins": func(t *testing.T) *weirtest.Env {
			env := weirtest.NewEnv(t, nil)
			weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "ch"}, nil).After(2 * time.Hour)
			_, err := weirtest.ExecuteWorkflow(env, &raceWorkflow{}, OrderArgs{ID: "o-3"})
			require.NoError(t, err)
			return env
		},
		"sleep_30_days": func(t *testing.T) *weirtest.Env {
			env := weirtest.NewEnv(t, nil)
			_, err := weirtest.ExecuteWorkflow(env, &SleepWorkflow{}, OrderArgs{ID: "720h"})
			require.NoError(t, err)
			return env
		},
	}
}

func goldenWorkflows() map[string]func(t *testing.T, path string) error {
	return map[string]func(t *testing.T, path string) error{
		"approval": func(t *testing.T, path string) error {
			return weirtest.ReplayHistoryFile(t.Context(), &ApprovalWorkflow{}, path)
		},
		"charge_retried": func(t *testing.T, path string) error {
			return weirtest.ReplayHistoryFile(t.Context(), &ChargeWorkflow{}, path)
		},
		"race_timer_wins": func(t *testing.T, path string) error {
			return weirtest.ReplayHistoryFile(t.Context(), &raceWorkflow{}, path)
		},
		"sleep_30_days": func(t *testing.T, path string) error {
			return weirtest.ReplayHistoryFile(t.Context(), &SleepWorkflow{}, path)
		},
	}
}

// TestGoldenHistories replays the committed histories with today's code
// (so a change that would break runs in flight fails the build) and checks
// that the scenarios still write exactly those histories. Run with -update
// to rewrite them after a deliberate change.
func TestGoldenHistories(t *testing.T) {
	t.Parallel()

	replayers := goldenWorkflows()
	for name, scenario := range goldenScenarios() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			require.NoError(t, scenario(t).WriteHistoryJSON(&buf))

			path := filepath.Join("testdata", "replay", name+".json")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
			}
			golden, err := os.ReadFile(path)
			require.NoError(t, err, "run the tests with -update to create it")
			require.NoError(t, replayers[name](t, path))
			require.Equal(t, string(golden), buf.String(), "the scenario's history changed; rerun with -update if that is deliberate")
		})
	}
}

// approvalV2 is ApprovalWorkflow changed without workflow.GetVersion: it
// notifies someone before charging. Runs approved before the change would
// break.
type approvalV2 struct {
	workflow.Defaults[OrderArgs, string]
}

type NotifyArgs struct {
	To string `json:"to"`
}

func (NotifyArgs) Kind() string { return "notify" }

func (*approvalV2) Run(ctx workflow.Context, args OrderArgs) (string, error) {
	approvals := workflow.GetSignalChannel[Approve](ctx)
	approval, _ := approvals.Receive(ctx)
	if _, err := workflow.ExecuteActivity[struct{}](ctx, NotifyArgs{To: approval.By}, nil).Get(ctx); err != nil {
		return "", err
	}
	return (&ApprovalWorkflow{}).Run(ctx, args)
}

// approvalV2Versioned makes the same change the safe way.
type approvalV2Versioned struct {
	workflow.Defaults[OrderArgs, string]
}

func (*approvalV2Versioned) Run(ctx workflow.Context, args OrderArgs) (string, error) {
	if workflow.GetVersion(ctx, "notify-first", workflow.DefaultVersion, 1) == 1 {
		if _, err := workflow.ExecuteActivity[struct{}](ctx, NotifyArgs{To: "ops"}, nil).Get(ctx); err != nil {
			return "", err
		}
	}
	return (&ApprovalWorkflow{}).Run(ctx, args)
}

func TestReplayHistory(t *testing.T) {
	t.Parallel()

	approvalPath := filepath.Join("testdata", "replay", "approval.json")

	t.Run("NonDeterministicChangeIsCaught", func(t *testing.T) {
		t.Parallel()
		raw, err := os.ReadFile(approvalPath)
		require.NoError(t, err)
		var export client.HistoryExport
		require.NoError(t, json.Unmarshal(raw, &export))
		var timerStarted int64 // the first command the old code recorded
		for _, e := range export.Events {
			if e.Type == "TimerStarted" {
				timerStarted = e.ID
				break
			}
		}
		require.NotZero(t, timerStarted)

		err = weirtest.ReplayHistory(t.Context(), &approvalV2{}, bytes.NewReader(raw))
		require.ErrorIs(t, err, workflow.ErrNonDeterminism)
		var nde *workflow.NonDeterminismError
		require.ErrorAs(t, err, &nde)
		require.Equal(t, timerStarted, nde.EventID)
		require.Equal(t, "TimerStarted", nde.Expected)
		require.Contains(t, err.Error(), "non-deterministic code at event")
	})

	t.Run("UnchangedCodeReplays", func(t *testing.T) {
		t.Parallel()
		raw, err := os.ReadFile(approvalPath)
		require.NoError(t, err)
		require.NoError(t, weirtest.ReplayHistory(t.Context(), &ApprovalWorkflow{}, bytes.NewReader(raw)))
	})

	t.Run("VersionedChangeReplays", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, weirtest.ReplayHistoryFile(t.Context(), &approvalV2Versioned{}, approvalPath))
	})

	t.Run("WrongWorkflow", func(t *testing.T) {
		t.Parallel()
		err := weirtest.ReplayHistoryFile(t.Context(), &pingWorkflow{}, approvalPath)
		require.ErrorIs(t, err, worker.ErrReplayUnknownWorkflow)
		require.ErrorContains(t, err, `"order"`)
	})
}

type PingArgs struct{}

func (PingArgs) Kind() string { return "ping" }

type pingWorkflow struct {
	workflow.Defaults[PingArgs, string]
}

func (*pingWorkflow) Run(workflow.Context, PingArgs) (string, error) { return "pong", nil }
