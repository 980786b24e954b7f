package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/weirtest"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// sleepFirstWorkflow is SequentialWorkflow changed without GetVersion: it
// waits before charging. Replaying a history of the old code must fail.
type sleepFirstWorkflow struct {
	workflow.Defaults[OrderArgs, Receipt]
}

func (w *sleepFirstWorkflow) Run(ctx workflow.Context, args OrderArgs) (Receipt, error) {
	if err := workflow.Sleep(ctx, time.Minute); err != nil {
		return Receipt{}, err
	}
	return (&SequentialWorkflow{}).Run(ctx, args)
}

// versionedWorkflow is SequentialWorkflow changed the safe way: runs that
// passed the change point before it existed keep the old code.
type versionedWorkflow struct {
	workflow.Defaults[OrderArgs, Receipt]
}

func (w *versionedWorkflow) Run(ctx workflow.Context, args OrderArgs) (Receipt, error) {
	if workflow.GetVersion(ctx, "sleep-first", workflow.DefaultVersion, 1) == 1 {
		if err := workflow.Sleep(ctx, time.Minute); err != nil {
			return Receipt{}, err
		}
	}
	return (&SequentialWorkflow{}).Run(ctx, args)
}

func TestReplayer(t *testing.T) {
	t.Parallel()

	type replayerBundle struct {
		*testBundle
		export []byte // the finished run's history, as client.WriteHistoryJSON wrote it
		run    *client.Run
		worker *worker.Worker
	}

	// setupRun runs a SequentialWorkflow to completion on a real worker.
	setupRun := func(ctx context.Context, t *testing.T) *replayerBundle {
		t.Helper()
		b := setup(ctx, t)
		w := startWorker(ctx, t, b, nil)
		run, err := b.client.Start(ctx, OrderArgs{ID: "replay", Cents: []int64{1, 2, 3}}, nil)
		require.NoError(t, err)
		receipt, err := getWithin[Receipt](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, int64(6), receipt.Total)
		var buf bytes.Buffer
		require.NoError(t, b.client.WriteHistoryJSON(ctx, &buf, run.WorkflowID, run.RunID))
		return &replayerBundle{testBundle: b, export: buf.Bytes(), run: run, worker: w}
	}

	newReplayer := func(t *testing.T, b *replayerBundle) *worker.Replayer {
		t.Helper()
		config := &worker.ReplayerConfig{}
		if b != nil {
			config = &worker.ReplayerConfig{Pool: b.pool, Schema: b.schema}
		}
		r, err := worker.NewReplayer(config)
		require.NoError(t, err)
		return r
	}

	t.Run("ChangedCodeNamesDivergentEvent", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setupRun(ctx, t)
		r := newReplayer(t, b)
		worker.AddReplayerWorkflow(r, &sleepFirstWorkflow{})

		check := func(result *worker.ReplayResult, err error) {
			t.Helper()
			require.Nil(t, result)
			require.ErrorIs(t, err, workflow.ErrNonDeterminism)
			var nde *workflow.NonDeterminismError
			require.ErrorAs(t, err, &nde)
			// 1 WorkflowStarted, 2 WorkflowTaskStarted, 3 ActivityScheduled:
			// the old code charged where the new one sleeps.
			require.Equal(t, int64(3), nde.EventID)
			require.Contains(t, nde.Expected, "ActivityScheduled")
			require.Contains(t, nde.Got, "TimerStarted")
			require.Contains(t, err.Error(), b.run.WorkflowID)
		}
		check(r.ReplayRun(ctx, b.run.WorkflowID, b.run.RunID))
		check(r.ReplayHistory(ctx, bytes.NewReader(b.export)))
	})

	t.Run("RunMain", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setupRun(ctx, t)
		path := filepath.Join(t.TempDir(), "history.json")
		require.NoError(t, os.WriteFile(path, b.export, 0o600))

		runMain := func(r *worker.Replayer, args []string, stdin string) (int, string, string) {
			var stdout, stderr bytes.Buffer
			code := r.RunMain(ctx, args, strings.NewReader(stdin), &stdout, &stderr)
			return code, stdout.String(), stderr.String()
		}

		same := newReplayer(t, nil)
		worker.AddReplayerWorkflow(same, &SequentialWorkflow{})
		code, stdout, stderr := runMain(same, []string{path}, "")
		require.Equal(t, worker.ReplayExitOK, code, stderr)
		require.Contains(t, stdout, "ok: workflow "+b.run.WorkflowID)
		require.Contains(t, stdout, "closed")
		code, stdout, _ = runMain(same, nil, string(b.export)) // stdin
		require.Equal(t, worker.ReplayExitOK, code)
		require.Contains(t, stdout, "stdin: ok")

		changed := newReplayer(t, nil)
		worker.AddReplayerWorkflow(changed, &sleepFirstWorkflow{})
		code, _, stderr = runMain(changed, []string{path}, "")
		require.Equal(t, worker.ReplayExitDiverged, code)
		require.Contains(t, stderr, "does not replay")
		require.Contains(t, stderr, "ActivityScheduled")

		code, _, stderr = runMain(same, []string{path, filepath.Join(t.TempDir(), "missing.json")}, "")
		require.Equal(t, worker.ReplayExitBadInput, code)
		require.Contains(t, stderr, "missing.json")
		code, _, _ = runMain(same, nil, "not json")
		require.Equal(t, worker.ReplayExitBadInput, code)
		code, _, _ = runMain(newReplayer(t, nil), []string{path}, "")
		require.Equal(t, worker.ReplayExitBadInput, code, "no workflow of its kind")
	})

	t.Run("EnvWritesWorkerHistory", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setupRun(ctx, t)

		// The same workflow in weirtest's Env, with the same real activity.
		env := weirtest.NewEnv(t, nil)
		weirtest.RegisterActivity(env, &ChargeActivity{})
		receipt, err := weirtest.ExecuteWorkflow(env, &SequentialWorkflow{}, OrderArgs{ID: "replay", Cents: []int64{1, 2, 3}})
		require.NoError(t, err)
		require.Equal(t, int64(6), receipt.Total)
		var buf bytes.Buffer
		require.NoError(t, env.WriteHistoryJSON(&buf))

		types := func(doc []byte) []client.EventType {
			var export client.HistoryExport
			require.NoError(t, json.Unmarshal(doc, &export))
			var out []client.EventType
			for _, e := range export.Events {
				out = append(out, e.Type)
			}
			return out
		}
		require.Equal(t, types(b.export), types(buf.Bytes()), "the Env records what a worker records")

		r := newReplayer(t, nil)
		worker.AddReplayerWorkflow(r, &SequentialWorkflow{})
		_, err = r.ReplayHistory(ctx, &buf)
		require.NoError(t, err)
	})

	t.Run("ExportedHistoryReplays", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setupRun(ctx, t)
		r := newReplayer(t, nil) // no database needed
		worker.AddReplayerWorkflow(r, &SequentialWorkflow{})

		path := filepath.Join(t.TempDir(), "history.json")
		require.NoError(t, os.WriteFile(path, b.export, 0o600))
		result, err := r.ReplayHistoryFile(ctx, path)
		require.NoError(t, err)
		require.True(t, result.Closed)
		require.Equal(t, "order", result.Kind)
		require.Equal(t, b.run.RunID.String(), result.RunID)
		require.Equal(t, b.run.WorkflowID, result.WorkflowID)
		require.Greater(t, result.Events, 8)
	})

	t.Run("RunFromPostgresReplays", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setupRun(ctx, t)
		r := newReplayer(t, b)
		require.NoError(t, r.AddWorkflowsOf(b.worker))
		require.Equal(t, b.worker.WorkflowKinds(), r.WorkflowKinds())

		for _, runID := range []uuid.UUID{b.run.RunID, uuid.Nil} { // uuid.Nil: the latest run
			result, err := r.ReplayRun(ctx, b.run.WorkflowID, runID)
			require.NoError(t, err)
			require.True(t, result.Closed)
			require.Equal(t, b.run.RunID.String(), result.RunID)
		}

		_, err := r.ReplayRun(ctx, "no-such-workflow", uuid.Nil)
		require.ErrorIs(t, err, client.ErrRunNotFound)
	})

	t.Run("VersionedChangeReplays", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setupRun(ctx, t)
		r := newReplayer(t, b)
		worker.AddReplayerWorkflow(r, &versionedWorkflow{})

		_, err := r.ReplayRun(ctx, b.run.WorkflowID, b.run.RunID)
		require.NoError(t, err)
	})
}

func TestReplayerWithoutDatabase(t *testing.T) {
	t.Parallel()

	started := `{"id":1,"type":"WorkflowStarted","attributes":{"kind":"order","args":{"id":"x","cents":[]},"workflow_id":"w","run_id":"r","generation":1},"time":"2026-01-01T00:00:00Z"}`

	setup := func(t *testing.T) *worker.Replayer {
		t.Helper()
		r, err := worker.NewReplayer(nil)
		require.NoError(t, err)
		worker.AddReplayerWorkflow(r, &SequentialWorkflow{})
		return r
	}

	t.Run("BareEventArray", func(t *testing.T) {
		t.Parallel()
		r := setup(t)
		result, err := r.ReplayHistory(t.Context(), strings.NewReader("["+started+"]"))
		require.NoError(t, err)
		require.False(t, result.Closed)
		require.Equal(t, 1, result.Events)
	})

	t.Run("DuplicateKind", func(t *testing.T) {
		t.Parallel()
		r := setup(t)
		require.Error(t, worker.AddReplayerWorkflowSafely(r, &SequentialWorkflow{}))
	})

	t.Run("InvalidHistory", func(t *testing.T) {
		t.Parallel()
		r := setup(t)
		for _, doc := range []string{`{"events":[]}`, `{}`, `not json`, `[{"id":1,"type":"TimerFired","attributes":{}}]`} {
			_, err := r.ReplayHistory(t.Context(), strings.NewReader(doc))
			require.ErrorIs(t, err, worker.ErrReplayInvalidHistory, doc)
		}
	})

	t.Run("NoPool", func(t *testing.T) {
		t.Parallel()
		r := setup(t)
		_, err := r.ReplayRun(t.Context(), "w", uuid.Nil)
		require.ErrorIs(t, err, worker.ErrReplayNoPool)
	})

	t.Run("UnknownKind", func(t *testing.T) {
		t.Parallel()
		r, err := worker.NewReplayer(nil)
		require.NoError(t, err)
		_, err = r.ReplayHistory(t.Context(), strings.NewReader(fmt.Sprintf(`{"events":[%s]}`, started)))
		require.ErrorIs(t, err, worker.ErrReplayUnknownWorkflow)
		require.False(t, errors.Is(err, worker.ErrReplayInvalidHistory))
	})
}
