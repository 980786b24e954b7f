package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// firstTask is a run's first task job as TestEagerStart reads it.
type firstTask struct {
	attempt int
	fetched bool // River fetched it (it was not inserted running)
	errors  int
	state   string
}

// firstTaskOf reads the first task job of a run; ok is false when it had
// none (the task ran in the start).
func firstTaskOf(ctx context.Context, t *testing.T, b *testBundle, runID string) (f firstTask, ok bool) {
	t.Helper()
	err := b.pool.QueryRow(ctx, "SELECT j.attempt, coalesce(j.attempted_at > j.created_at, false),"+
		" coalesce(array_length(j.errors, 1), 0), j.state::text FROM "+
		b.names.RiverJob+" j WHERE j.args->>'run_id' = $1 ORDER BY j.id LIMIT 1", runID).Scan(&f.attempt, &f.fetched, &f.errors, &f.state)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, false
	}
	require.NoError(t, err)
	return f, true
}

// SlowStartArgs are the args of SlowStartWorkflow.
type SlowStartArgs struct {
	Key   string        `json:"key"`
	Step  time.Duration `json:"step"`
	Steps int           `json:"steps"`
}

func (SlowStartArgs) Kind() string { return "slow_start" }

// slowStartEntered and slowStartFinished hold, by SlowStartArgs.Key,
// channels closed once the workflow's code first runs, and once it returns.
var slowStartEntered, slowStartFinished sync.Map

// SlowStartWorkflow's first task runs Steps coroutines in turn, each
// blocking for Step (real time: a stand-in for slow workflow code), and
// returns how many ran.
type SlowStartWorkflow struct {
	workflow.Defaults[SlowStartArgs, int]
}

func (SlowStartWorkflow) Run(ctx workflow.Context, args SlowStartArgs) (int, error) {
	if entered, ok := slowStartEntered.LoadAndDelete(args.Key); ok {
		close(entered.(chan struct{}))
	}
	ran := 0
	for range args.Steps {
		done := workflow.NewChannel[struct{}](ctx)
		workflow.Go(ctx, func(ctx workflow.Context) {
			time.Sleep(args.Step)
			ran++
			done.Send(struct{}{})
		})
		done.Receive(ctx)
	}
	if finished, ok := slowStartFinished.LoadAndDelete(args.Key); ok {
		close(finished.(chan struct{}))
	}
	return ran, nil
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

// TestEagerStart: a run that Start creates through a client linked to a
// worker that serves its workflow has its first task run by that worker
// inside the start's transaction, with no task job; the activities it
// schedules are claimed and run once the start commits. StartTx, a client
// not linked, a queue the worker does not serve, or eager dispatch off go through
// River's fetch. A first task that fails in the start is rolled back and
// queued through River, which retries it.
func TestEagerStart(t *testing.T) {
	t.Parallel()

	order := OrderArgs{ID: "o", Cents: []int64{1, 2}}
	eager := &client.StartOpts{EagerStart: true}
	finish := func(ctx context.Context, t *testing.T, run *client.Run) {
		t.Helper()
		receipt, err := getWithin[Receipt](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, int64(3), receipt.Total)
	}
	throughRiver := func(ctx context.Context, t *testing.T, b *testBundle, run *client.Run) {
		t.Helper()
		f, ok := firstTaskOf(ctx, t, b, run.RunID.String())
		require.True(t, ok, "the first task had a job")
		require.Equal(t, firstTask{attempt: 1, fetched: true, state: "completed"}, f)
	}

	t.Run("StartRunsTheFirstTask", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		run, err := b.client.Start(ctx, order, eager)
		require.NoError(t, err)
		var scheduled int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.History+" e JOIN "+b.names.Run+" r USING (run_id)"+
			" WHERE r.run_id = $1 AND e.type = 'ActivityScheduled' AND e.created_at = r.created_at", run.RunID).Scan(&scheduled))
		require.Equal(t, 1, scheduled, "the first activity was scheduled in the start's transaction")
		finish(ctx, t, run)
		_, ok := firstTaskOf(ctx, t, b, run.RunID.String())
		require.False(t, ok, "no task job at all")
		for _, j := range activityJobs(ctx, t, b, run.RunID.String(), "charge") {
			require.Equal(t, jobOf{attempt: 1, claimed: true, state: "completed"}, j)
		}
	})

	// The lookup and the insert are one statement in an eager start: the
	// insert's conditions in SQL must refuse exactly what the client does,
	// and a refused start must not take a generation.
	t.Run("RefusedStartsInsertNothing", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWith(ctx, t, b, func(w *worker.Worker) { worker.AddWorkflow(w, &SumWorkflow{}) })
		opts := func(requestID string, policy client.IDReusePolicy) *client.StartOpts {
			return &client.StartOpts{EagerStart: true, IDReusePolicy: policy, RequestID: requestID, WorkflowID: "refused"}
		}

		first, err := b.client.Start(ctx, SumArgs{TimeoutSeconds: 3600}, opts("a", client.IDReuseAllowDuplicate))
		require.NoError(t, err)
		require.True(t, first.Created)
		require.Equal(t, int64(1), first.Generation)
		var taskJobs int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.RiverJob+
			" WHERE kind LIKE 'weir.workflow:%' AND args->>'run_id' = $1", first.RunID.String()).Scan(&taskJobs))
		require.Zero(t, taskJobs, "the first task ran in the start")

		again, err := b.client.Start(ctx, SumArgs{TimeoutSeconds: 3600}, opts("a", client.IDReuseAllowDuplicate))
		require.NoError(t, err)
		require.False(t, again.Created)
		require.Equal(t, first.RunID, again.RunID)

		_, err = b.client.Start(ctx, SumArgs{TimeoutSeconds: 1}, opts("a", client.IDReuseAllowDuplicate))
		var conflict *client.RequestConflictError
		require.ErrorAs(t, err, &conflict)
		require.Equal(t, first.RunID, conflict.RunID)

		_, err = b.client.Start(ctx, SumArgs{TimeoutSeconds: 3600}, opts("b", client.IDReuseAllowDuplicate))
		var started *client.WorkflowAlreadyStartedError
		require.ErrorAs(t, err, &started)
		require.Equal(t, first.RunID, started.RunID)

		require.NoError(t, b.client.Signal(ctx, "refused", first.RunID, DoneSignal{}, nil))
		_, err = getWithin[int](ctx, t, first)
		require.NoError(t, err)
		for _, policy := range []client.IDReusePolicy{client.IDReuseRejectDuplicate, client.IDReuseAllowDuplicateFailedOnly} {
			_, err = b.client.Start(ctx, SumArgs{TimeoutSeconds: 3600}, opts("c", policy))
			var reuse *client.WorkflowIDReuseError
			require.ErrorAs(t, err, &reuse, policy)
			require.Equal(t, "completed", reuse.LastState)
		}

		second, err := b.client.Start(ctx, SumArgs{TimeoutSeconds: 3600}, opts("d", client.IDReuseAllowDuplicate))
		require.NoError(t, err)
		require.Equal(t, int64(2), second.Generation, "no refused start took a generation")
		require.NoError(t, b.client.Terminate(ctx, "refused", second.RunID, "done"))
		third, err := b.client.Start(ctx, SumArgs{TimeoutSeconds: 3600}, opts("e", client.IDReuseAllowDuplicateFailedOnly))
		require.NoError(t, err)
		require.Equal(t, int64(3), third.Generation)
		var runs int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.Run+" WHERE workflow_id = 'refused'").Scan(&runs))
		require.Equal(t, 3, runs)
		require.NoError(t, b.client.Terminate(ctx, "refused", third.RunID, "done"))
	})

	t.Run("WithoutEagerStartGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		run, err := b.client.Start(ctx, order, nil)
		require.NoError(t, err)
		finish(ctx, t, run)
		throughRiver(ctx, t, b, run)
	})

	t.Run("CloseDeadlineGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		// Less than twice the first task's budget (the deadlock check, 1 s)
		// left: the worker declines, and no failed attempt is recorded.
		startCtx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		run, err := b.client.Start(startCtx, order, eager)
		require.NoError(t, err)
		finish(ctx, t, run)
		throughRiver(ctx, t, b, run)
	})

	t.Run("LongFirstTaskGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWith(ctx, t, b, func(w *worker.Worker) { worker.AddWorkflow(w, &SlowStartWorkflow{}) })

		// Each step yields well within the deadlock check (1 s: a step of
		// 600 ms once overran it on a loaded machine, and its River
		// attempt failed too), but the task as a whole takes twice as
		// long: Start does not wait for all of it.
		begin := time.Now()
		run, err := b.client.Start(ctx, SlowStartArgs{Steps: 8, Step: 250 * time.Millisecond}, eager)
		require.NoError(t, err)
		require.Less(t, time.Since(begin), 2*time.Second, "the first task's budget bounds Start")
		got, err := getWithin[int](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, 8, got)
		f, ok := firstTaskOf(ctx, t, b, run.RunID.String())
		require.True(t, ok, "the task was queued through River")
		require.Equal(t, 1, f.errors, "with the attempt that ran out of time in the start")
	})

	t.Run("StopWaitsForAFirstTask", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		w, err := worker.New(b.pool, &worker.Config{Schema: b.schema, SweepInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		worker.AddWorkflow(w, &SlowStartWorkflow{})
		require.NoError(t, w.Start(ctx))

		entered, finished := make(chan struct{}), make(chan struct{})
		slowStartEntered.Store(b.schema, entered)
		slowStartFinished.Store(b.schema, finished)
		started := make(chan error, 1)
		go func() {
			_, err := b.client.Start(ctx, SlowStartArgs{Key: b.schema, Steps: 1, Step: 300 * time.Millisecond}, eager)
			started <- err
		}()
		<-entered
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
		select {
		case <-finished:
		default:
			t.Fatal("Stop returned while a first task it took still ran in a start")
		}
		// The start itself may still be committing.
		require.NoError(t, <-started)
	})

	t.Run("StartTxGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		var run *client.Run
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
			run, err = b.client.StartTx(ctx, tx, order, eager)
			return err
		}))
		finish(ctx, t, run)
		throughRiver(ctx, t, b, run)
	})

	t.Run("UnlinkedClientGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		// A client of this process on the worker's own pool, but not
		// linked to it (no Config.EagerStarter).
		other, err := client.New(b.pool, &client.Config{Schema: b.schema, PollInterval: 200 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, other.Close()) })

		run, err := other.Start(ctx, order, eager)
		require.NoError(t, err)
		finish(ctx, t, run)
		throughRiver(ctx, t, b, run)
	})

	t.Run("OtherQueueGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		run, err := b.client.Start(ctx, order, &client.StartOpts{EagerStart: true, Queue: "elsewhere"})
		require.NoError(t, err)
		f, ok := firstTaskOf(ctx, t, b, run.RunID.String())
		require.True(t, ok)
		require.Equal(t, firstTask{attempt: 0, fetched: false, state: "available"}, f, "no worker serves the queue: the task waits for one")
	})

	t.Run("OffGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, &worker.Config{MaxEagerActivities: -1})

		run, err := b.client.Start(ctx, order, eager)
		require.NoError(t, err)
		finish(ctx, t, run)
		throughRiver(ctx, t, b, run)
	})

	t.Run("FailedTaskGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWith(ctx, t, b, func(w *worker.Worker) { worker.AddWorkflow(w, &FlakyStartWorkflow{}) })

		run, err := b.client.Start(ctx, FlakyStartArgs{}, eager)
		require.NoError(t, err, "a first task failing in the start does not fail the start")
		got, err := getWithin[int](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, 2, got, "River ran the task again, as attempt 2")
		f, ok := firstTaskOf(ctx, t, b, run.RunID.String())
		require.True(t, ok, "the failed task was queued through River")
		require.Equal(t, firstTask{attempt: 2, fetched: true, errors: 1, state: "completed"}, f,
			"its job shows the failed attempt in the start as attempt 1")
		var firstErr string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT errors[1]->>'error' FROM "+b.names.RiverJob+" WHERE args->>'run_id' = $1",
			run.RunID.String()).Scan(&firstErr))
		require.Contains(t, firstErr, "the first attempt of the first task fails")
		require.Contains(t, firstErr, "FlakyStartWorkflow", "with the panic's stack")
		var started int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.History+
			" WHERE run_id = $1 AND type = 'WorkflowStarted'", run.RunID).Scan(&started))
		require.Equal(t, 1, started, "what the failed task wrote in the start was rolled back")
	})

	t.Run("FailedStartFreesTheSlot", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		w := startWorker(ctx, t, b, &worker.Config{MaxEagerActivities: 1})
		failing, err := client.New(b.pool, &client.Config{Schema: b.schema, Interceptors: []client.Interceptor{failAfterStart{}}, EagerStarter: w})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, failing.Close()) })

		// The one eager slot is taken by the activity that the first task
		// of a start claims; the start's transaction then fails. The slot
		// must be freed, or no later activity would run eagerly.
		_, err = failing.Start(ctx, order, eager)
		require.ErrorIs(t, err, errAfterStart)

		// One activity: with one slot, an activity scheduled while another
		// runs goes through River.
		run, err := b.client.Start(ctx, OrderArgs{ID: "one", Cents: []int64{5}}, eager)
		require.NoError(t, err)
		receipt, err := getWithin[Receipt](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, int64(5), receipt.Total)
		jobs := activityJobs(ctx, t, b, run.RunID.String(), "charge")
		require.Len(t, jobs, 1)
		require.True(t, jobs[0].claimed, "the slot was free again")
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
