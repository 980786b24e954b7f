package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// firstTask is a run's first task job as TestEagerStart reads it.
type firstTask struct {
	attempt int
	claimed bool // attempted at its insert: handed to the worker by the start
	errors  int
	state   string
}

func firstTaskOf(ctx context.Context, t *testing.T, b *testBundle, runID string) firstTask {
	t.Helper()
	var f firstTask
	// The attempt log tells whether attempt 1 started when the job was
	// inserted: a later attempt sets attempted_at again.
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT j.attempt,"+
		" coalesce((SELECT a.started_at = j.created_at FROM "+dbschema.Qualify(b.schema, "weir_job_attempt")+" a WHERE a.job_id = j.id AND a.attempt = 1),"+
		"  j.attempt = 1 AND j.attempted_at = j.created_at),"+
		" coalesce(array_length(j.errors, 1), 0), j.state::text FROM "+
		b.names.RiverJob+" j WHERE j.args->>'run_id' = $1 ORDER BY j.id LIMIT 1", runID).Scan(&f.attempt, &f.claimed, &f.errors, &f.state))
	return f
}

// FlakyStartArgs are the args of FlakyStartWorkflow.
type FlakyStartArgs struct{}

func (FlakyStartArgs) Kind() string { return "flaky_start" }

// FlakyStartWorkflow panics in its first task's first attempt and returns
// the attempt that got through.
type FlakyStartWorkflow struct {
	workflow.Defaults[FlakyStartArgs, int]
}

func (FlakyStartWorkflow) Run(ctx workflow.Context, _ FlakyStartArgs) (int, error) {
	attempt := workflow.GetInfo(ctx).TaskAttempt
	if attempt == 1 {
		panic("the first attempt of the first task fails")
	}
	return attempt, nil
}

// TestEagerStart: a run that Start creates on the pool of a worker of this
// process that serves its workflow has its first task handed to that
// worker, already claimed, and run once the start commits; StartTx, another
// pool, a worker that does not serve the queue, or eager dispatch off go
// through River's fetch. A failed claimed task is retried by River.
func TestEagerStart(t *testing.T) {
	t.Parallel()

	order := OrderArgs{ID: "o", Cents: []int64{1, 2}}
	finish := func(ctx context.Context, t *testing.T, run *client.Run) {
		t.Helper()
		receipt, err := getWithin[Receipt](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, int64(3), receipt.Total)
	}

	t.Run("StartHandsTheFirstTask", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		run, err := b.client.Start(ctx, order, nil)
		require.NoError(t, err)
		finish(ctx, t, run)
		require.Equal(t, firstTask{attempt: 1, claimed: true, state: "completed"}, firstTaskOf(ctx, t, b, run.RunID.String()))
		require.Equal(t, 1, taskJobs(ctx, t, b, run.RunID.String()))
	})

	t.Run("StartTxGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		var run *client.Run
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
			run, err = b.client.StartTx(ctx, tx, order, nil)
			return err
		}))
		finish(ctx, t, run)
		require.Equal(t, firstTask{attempt: 1, claimed: false, state: "completed"}, firstTaskOf(ctx, t, b, run.RunID.String()),
			"the caller's transaction may commit after the call returns: nothing is handed over")
	})

	t.Run("OtherPoolGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		pool, err := pgxpool.New(ctx, dbtest.URL(ctx, t))
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		other, err := client.New(pool, &client.Config{Schema: b.schema, PollInterval: 200 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, other.Close()) })

		run, err := other.Start(ctx, order, nil)
		require.NoError(t, err)
		finish(ctx, t, run)
		require.False(t, firstTaskOf(ctx, t, b, run.RunID.String()).claimed)
	})

	t.Run("OtherQueueGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		run, err := b.client.Start(ctx, order, &client.StartOpts{Queue: "elsewhere"})
		require.NoError(t, err)
		time.Sleep(200 * time.Millisecond)
		require.Equal(t, firstTask{attempt: 0, claimed: false, state: "available"}, firstTaskOf(ctx, t, b, run.RunID.String()),
			"no worker serves the queue: the task waits for one")
	})

	t.Run("OffGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, &worker.Config{MaxEagerActivities: -1})

		run, err := b.client.Start(ctx, order, nil)
		require.NoError(t, err)
		finish(ctx, t, run)
		require.False(t, firstTaskOf(ctx, t, b, run.RunID.String()).claimed)
	})

	t.Run("FailedTaskRetriesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		w, err := worker.New(b.pool, &worker.Config{Schema: b.schema, SweepInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		worker.AddWorkflow(w, &FlakyStartWorkflow{})
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(stopCtx))
		})

		run, err := b.client.Start(ctx, FlakyStartArgs{}, nil)
		require.NoError(t, err)
		got, err := getWithin[int](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, 2, got, "River ran attempt 2")
		require.Equal(t, firstTask{attempt: 2, claimed: true, errors: 1, state: "completed"}, firstTaskOf(ctx, t, b, run.RunID.String()),
			"attempt 1 was claimed at the start and failed; River retried the same job")
	})

	t.Run("FailedStartFreesTheSlot", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, &worker.Config{MaxEagerActivities: 1})
		failing, err := client.New(b.pool, &client.Config{Schema: b.schema, Interceptors: []client.Interceptor{failAfterStart{}}})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, failing.Close()) })

		// The one eager slot is taken by a start whose transaction fails
		// after the task was claimed: it must be freed, or no later start
		// or activity would run eagerly.
		_, err = failing.Start(ctx, order, nil)
		require.ErrorIs(t, err, errAfterStart)

		run, err := b.client.Start(ctx, order, nil)
		require.NoError(t, err)
		finish(ctx, t, run)
		require.True(t, firstTaskOf(ctx, t, b, run.RunID.String()).claimed)
		var runs int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.Run).Scan(&runs))
		require.Equal(t, 1, runs, "the failed start left nothing")
	})
}

var errAfterStart = errors.New("failing the start after it inserted the run")

// failAfterStart fails every start after its writes ran.
type failAfterStart struct{ client.InterceptorDefaults }

func (failAfterStart) InterceptStart(ctx context.Context, _ *client.StartInfo, next func(ctx context.Context) (*client.Run, error)) (*client.Run, error) {
	if _, err := next(ctx); err != nil {
		return nil, err
	}
	return nil, errAfterStart
}
