package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// jobOf is an activity job as TestDispatch reads it.
type jobOf struct {
	attempt int
	claimed bool // attempted at its insert: claimed by the worker that scheduled it
	errors  int
	state   string
}

func activityJobs(ctx context.Context, t *testing.T, b *testBundle, runID string, kind string) []jobOf {
	t.Helper()
	rows, err := b.pool.Query(ctx, "SELECT attempt, attempted_at = created_at, coalesce(array_length(errors, 1), 0), state::text FROM "+b.names.RiverJob+
		" WHERE kind = $2 AND metadata->'weir'->>'run_id' = $1 ORDER BY id", runID, kind)
	require.NoError(t, err)
	defer rows.Close()
	var out []jobOf
	for rows.Next() {
		var j jobOf
		require.NoError(t, rows.Scan(&j.attempt, &j.claimed, &j.errors, &j.state))
		out = append(out, j)
	}
	require.NoError(t, rows.Err())
	return out
}

func taskJobs(ctx context.Context, t *testing.T, b *testBundle, runID string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.RiverJob+" WHERE args->>'run_id' = $1", runID).Scan(&n))
	return n
}

// HoldArgs are the args of HoldActivity.
type HoldArgs struct{}

func (HoldArgs) Kind() string { return "hold" }

// HoldActivity holds its first attempt until its context ends; later
// attempts return at once.
type HoldActivity struct {
	activity.Defaults[HoldArgs, int]

	started chan struct{}
}

func (a *HoldActivity) Execute(ctx context.Context, _ HoldArgs) (int, error) {
	info, _ := activity.GetInfo(ctx)
	if info.Attempt == 1 {
		a.started <- struct{}{}
		<-ctx.Done()
		return 0, context.Cause(ctx)
	}
	return info.Attempt, nil
}

type HoldWorkflowArgs struct{}

func (HoldWorkflowArgs) Kind() string { return "hold_workflow" }

type HoldWorkflow struct {
	workflow.Defaults[HoldWorkflowArgs, int]
}

func (HoldWorkflow) Run(ctx workflow.Context, _ HoldWorkflowArgs) (int, error) {
	return workflow.ExecuteActivity[int](ctx, HoldArgs{}, &workflow.ActivityOpts{
		RetryPolicy: &workflow.RetryPolicy{InitialInterval: 10 * time.Millisecond},
	}).Get(ctx)
}

// TestDispatch: activities a worker can run are claimed by the task that
// schedules them and run at once, their outcomes continuing the run in the
// transaction that completes them; everything else (and everything with
// eager dispatch off) goes through River. Failures, retries and a stopping
// worker hand claimed jobs back to River.
func TestDispatch(t *testing.T) {
	t.Parallel()

	// runOrder runs a workflow of three charges to its end and returns it
	// with its activity jobs.
	runOrder := func(ctx context.Context, t *testing.T, b *testBundle) (*client.Run, []jobOf) {
		t.Helper()
		run, err := b.client.Start(ctx, OrderArgs{ID: "o", Cents: []int64{1, 2, 3}}, nil)
		require.NoError(t, err)
		receipt, err := getWithin[Receipt](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, int64(6), receipt.Total)
		jobs := activityJobs(ctx, t, b, run.RunID.String(), "charge")
		require.Len(t, jobs, 3)
		return run, jobs
	}

	t.Run("EagerAndContinued", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		run, jobs := runOrder(ctx, t, b)
		for _, j := range jobs {
			require.Equal(t, jobOf{attempt: 1, claimed: true, state: "completed"}, j)
		}
		require.Equal(t, 1, taskJobs(ctx, t, b, run.RunID.String()), "only the first task was a job: outcomes continued the run")
	})

	// One slot: an activity frees it once its code returned, so the
	// transaction that writes its outcome claims the run's next one.
	t.Run("OneSlotPassesOn", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, &worker.Config{MaxEagerActivities: 1})

		_, jobs := runOrder(ctx, t, b)
		for _, j := range jobs {
			require.Equal(t, jobOf{attempt: 1, claimed: true, state: "completed"}, j)
		}
	})

	t.Run("ThroughRiverWhenOff", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, &worker.Config{MaxEagerActivities: -1})

		_, jobs := runOrder(ctx, t, b)
		for _, j := range jobs {
			require.False(t, j.claimed, "fetched by River")
			require.Equal(t, "completed", j.state)
		}
	})

	t.Run("FailedAttemptRetriesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		b.charge.failures.Store(1)
		startWorker(ctx, t, b, nil)

		_, jobs := runOrder(ctx, t, b)
		require.Equal(t, jobOf{attempt: 2, claimed: false, errors: 1, state: "completed"}, jobs[0],
			"attempt 1 ran eagerly and failed; River ran attempt 2")
	})

	// River's job control (a cancelled run cancels its activities' jobs)
	// cancels a claimed attempt with River's remote cause, which writes the
	// job cancelled, as River's executor does for a fetched attempt.
	t.Run("RemoteCancelOfClaimedAttempt", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		block := &BlockActivity{started: make(chan string, 1), cancelled: make(chan string, 1)}
		startWith(ctx, t, b, func(w *worker.Worker) {
			worker.AddWorkflow(w, &CancellableWorkflow{})
			worker.AddActivity(w, block)
		})

		run, err := b.client.Start(ctx, CancellableArgs{Key: "r"}, nil)
		require.NoError(t, err)
		require.Equal(t, "r", receiveWithin(t, block.started))
		require.NoError(t, b.client.Cancel(ctx, run.WorkflowID, run.RunID, "no longer needed"))
		require.Equal(t, "r", receiveWithin(t, block.cancelled))
		_, err = getWithin[string](ctx, t, run)
		require.Error(t, err)

		var (
			state     string
			claimed   bool
			lastError string
		)
		requireEventually(t, func() bool {
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT state::text, attempted_at = created_at, coalesce(errors[1]->>'error', '') FROM "+
				b.names.RiverJob+" WHERE kind = 'block' AND metadata->'weir'->>'run_id' = $1", run.RunID.String()).Scan(&state, &claimed, &lastError))
			return state != "running"
		})
		require.True(t, claimed, "the attempt ran claimed")
		require.Equal(t, "cancelled", state)
		require.Contains(t, lastError, rivertype.ErrJobCancelledRemotely.Error(), "written with River's remote cause, not the context's error")
	})

	t.Run("StoppingWorkerHandsBack", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		hold := &HoldActivity{started: make(chan struct{}, 1)}
		newWorker := func() *worker.Worker {
			w, err := worker.New(b.pool, &worker.Config{Schema: b.schema, SweepInterval: 50 * time.Millisecond})
			require.NoError(t, err)
			worker.AddWorkflow(w, &HoldWorkflow{})
			worker.AddActivity(w, hold)
			require.NoError(t, w.Start(ctx))
			return w
		}
		first := newWorker()
		run, err := b.client.Start(ctx, HoldWorkflowArgs{}, nil)
		require.NoError(t, err)
		select {
		case <-hold.started:
		case <-time.After(time.Minute):
			t.Fatal("the activity never started")
		}
		stopCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_ = first.Stop(stopCtx) // past its deadline the held attempt is cancelled

		second := newWorker()
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			require.NoError(t, second.Stop(stopCtx))
		})
		got, err := getWithin[int](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, 2, got, "attempt 2 ran on the second worker")
		jobs := activityJobs(ctx, t, b, run.RunID.String(), "hold")
		require.Len(t, jobs, 1)
		require.Equal(t, 1, jobs[0].errors, "the cancelled attempt left its error")
	})

	t.Run("InterceptorsSeeRiverJobs", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, &worker.Config{Interceptors: []worker.Interceptor{worker.InterceptorDefaults{}}})

		run, jobs := runOrder(ctx, t, b)
		for _, j := range jobs {
			require.False(t, j.claimed)
		}
		require.Equal(t, 4, taskJobs(ctx, t, b, run.RunID.String()), "a task job per step")
	})
}

// BadArgs are the args of BadArgsActivity; decoding them panics while
// badArgsPanics is above zero, once per decode.
type BadArgs struct {
	N int `json:"n"`
}

func (BadArgs) Kind() string { return "bad_args" }

var badArgsPanics atomic.Int32

func (a *BadArgs) UnmarshalJSON(data []byte) error {
	if badArgsPanics.Add(-1) >= 0 {
		panic("decoding bad args")
	}
	type plain BadArgs
	return json.Unmarshal(data, (*plain)(a))
}

// BadArgsActivity returns its args' N.
type BadArgsActivity struct {
	activity.Defaults[BadArgs, int]
}

func (BadArgsActivity) Execute(_ context.Context, args BadArgs) (int, error) { return args.N, nil }

// BadArgsWorkflowArgs are the args of BadArgsWorkflow, which runs
// BadArgsActivity with N.
type BadArgsWorkflowArgs struct {
	N int `json:"n"`
}

func (BadArgsWorkflowArgs) Kind() string { return "bad_args_workflow" }

type BadArgsWorkflow struct {
	workflow.Defaults[BadArgsWorkflowArgs, int]
}

func (BadArgsWorkflow) Run(ctx workflow.Context, args BadArgsWorkflowArgs) (int, error) {
	return workflow.ExecuteActivity[int](ctx, BadArgs(args), nil).Get(ctx)
}

// A claimed attempt whose args panic when decoded fails, as River's
// executor fails a fetched one, and River retries it; the worker goes on.
func TestClaimedAttemptArgsPanic(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	startWith(ctx, t, b, func(w *worker.Worker) {
		worker.AddWorkflow(w, &BadArgsWorkflow{})
		worker.AddActivity(w, &BadArgsActivity{})
	})
	badArgsPanics.Store(1)
	run, err := b.client.Start(ctx, BadArgsWorkflowArgs{N: 7}, nil)
	require.NoError(t, err)
	got, err := getWithin[int](ctx, t, run)
	require.NoError(t, err)
	require.Equal(t, 7, got)
	require.Negative(t, badArgsPanics.Load(), "the args were decoded again")
	jobs := activityJobs(ctx, t, b, run.RunID.String(), "bad_args")
	require.Equal(t, []jobOf{{attempt: 2, claimed: false, errors: 1, state: "completed"}}, jobs,
		"attempt 1 ran claimed and failed; River ran attempt 2")
}

// ProbeArgs are the args of ProbeActivity; StartToClose is the workflow's
// start-to-close timeout for it.
type ProbeArgs struct {
	StartToClose time.Duration `json:"start_to_close"`
}

func (ProbeArgs) Kind() string { return "probe" }

// probed is what ProbeActivity saw of its context.
type probed struct {
	jobID    int64
	deadline time.Time
	ok       bool
	err      error // ctx.Err() once done
	cause    error // context.Cause(ctx) once done
}

// ProbeActivity reports its context's deadline, then, once beat says so,
// heartbeats until its context ends and reports how it ended.
type ProbeActivity struct {
	activity.Defaults[ProbeArgs, int]

	started chan probed
	beat    chan struct{}
	ended   chan probed
}

func (a *ProbeActivity) Execute(ctx context.Context, _ ProbeArgs) (int, error) {
	info, _ := activity.GetInfo(ctx)
	p := probed{jobID: info.JobID}
	p.deadline, p.ok = ctx.Deadline()
	a.started <- p
	select {
	case <-a.beat:
		_ = activity.Heartbeat(ctx, nil)
	case <-ctx.Done():
	}
	<-ctx.Done()
	p.err, p.cause = ctx.Err(), context.Cause(ctx)
	a.ended <- p
	return 0, ctx.Err()
}

type ProbeWorkflow struct {
	workflow.Defaults[ProbeArgs, int]
}

func (ProbeWorkflow) Run(ctx workflow.Context, args ProbeArgs) (int, error) {
	return workflow.ExecuteActivity[int](ctx, args, &workflow.ActivityOpts{
		RetryPolicy: &workflow.RetryPolicy{MaximumAttempts: 1}, StartToCloseTimeout: args.StartToClose,
	}).Get(ctx)
}

// A claimed attempt's context is what River's executor gives a fetched one:
// the start-to-close timeout as its deadline, context.DeadlineExceeded once
// past it, and cause fencing.ErrLeaseLost once its lease is refused.
func TestClaimedAttemptContext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	probe := &ProbeActivity{started: make(chan probed, 1), beat: make(chan struct{}, 1), ended: make(chan probed, 1)}
	startWith(ctx, t, b, func(w *worker.Worker) {
		worker.AddWorkflow(w, &ProbeWorkflow{})
		worker.AddActivity(w, probe)
	})
	receive := func(ch chan probed) probed {
		t.Helper()
		select {
		case p := <-ch:
			return p
		case <-time.After(30 * time.Second):
			t.Fatal("no report from the activity")
			return probed{}
		}
	}
	requireClaimed := func(run *client.Run) {
		t.Helper()
		jobs := activityJobs(ctx, t, b, run.RunID.String(), "probe")
		require.Len(t, jobs, 1)
		require.True(t, jobs[0].claimed, "the attempt ran claimed")
	}

	t.Run("Timeout", func(t *testing.T) {
		before := time.Now()
		run, err := b.client.Start(ctx, ProbeArgs{StartToClose: 500 * time.Millisecond}, nil)
		require.NoError(t, err)
		started := receive(probe.started)
		require.True(t, started.ok, "the attempt has a deadline")
		require.WithinRange(t, started.deadline, before, time.Now().Add(500*time.Millisecond))
		ended := receive(probe.ended)
		require.Equal(t, context.DeadlineExceeded, ended.err)
		require.Equal(t, context.DeadlineExceeded, ended.cause)
		_, err = getWithin[int](ctx, t, run)
		require.ErrorContains(t, err, "StartToClose")
		requireClaimed(run)
	})

	t.Run("LeaseLost", func(t *testing.T) {
		run, err := b.client.Start(ctx, ProbeArgs{StartToClose: time.Minute}, nil)
		require.NoError(t, err)
		started := receive(probe.started)
		_, err = b.pool.Exec(ctx, "UPDATE "+b.names.RiverJob+" SET lease_token = gen_random_uuid() WHERE id = $1", started.jobID)
		require.NoError(t, err)
		probe.beat <- struct{}{}
		ended := receive(probe.ended)
		require.Equal(t, context.Canceled, ended.err)
		require.ErrorIs(t, ended.cause, fencing.ErrLeaseLost)
		requireClaimed(run)
	})
}
