package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/task"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// gate lets a test hold the first attempt of something and release it later.
type gate struct {
	entered chan int64 // receives the job ID of the held attempt
	release chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan int64, 1), release: make(chan struct{})} }

func (g *gate) await(t *testing.T) int64 {
	t.Helper()
	select {
	case id := <-g.entered:
		return id
	case <-time.After(60 * time.Second):
		t.Fatal("the held attempt never started")
		return 0
	}
}

// gates are per test, found by a key in the args (activities and workflows
// are shared by type, tests run in parallel).
var gates = struct {
	sync.Mutex
	m map[string]*gate
}{m: map[string]*gate{}}

func registerGate(key string) *gate {
	gates.Lock()
	defer gates.Unlock()
	g := newGate()
	gates.m[key] = g
	return g
}

func gateFor(key string) *gate {
	gates.Lock()
	defer gates.Unlock()
	return gates.m[key]
}

type HeldArgs struct {
	Key string `json:"key"`
}

func (HeldArgs) Kind() string { return "held" }

// HeldActivity holds its first attempt until the test releases it, ignoring
// its context, as a stuck or partitioned worker would; later attempts return
// at once. Each attempt reports which attempt it was.
type HeldActivity struct {
	activity.Defaults[HeldArgs, string]
}

func (a *HeldActivity) Execute(ctx context.Context, args HeldArgs) (string, error) {
	info, _ := activity.GetInfo(ctx)
	if info.Attempt == 1 {
		g := gateFor(args.Key)
		g.entered <- info.JobID
		<-g.release
	}
	return fmt.Sprintf("attempt %d", info.Attempt), nil
}

type HeldWorkflowArgs struct {
	Key       string `json:"key"`
	HoldTask  bool   `json:"hold_task"`
	TaskGates string `json:"task_gates"`
}

func (HeldWorkflowArgs) Kind() string { return "held_workflow" }

// HeldWorkflow runs HeldActivity; with HoldTask, its first workflow task is
// held inside workflow code (the task holds the run's lock meanwhile).
type HeldWorkflow struct {
	workflow.Defaults[HeldWorkflowArgs, string]
}

func (w *HeldWorkflow) Run(ctx workflow.Context, args HeldWorkflowArgs) (string, error) {
	if args.HoldTask && workflow.GetInfo(ctx).TaskAttempt == 1 {
		g := gateFor(args.TaskGates)
		select {
		case g.entered <- 0:
			<-g.release
		default: // a replay of the same attempt: already held once
		}
	}
	return workflow.ExecuteActivity[string](ctx, HeldArgs{Key: args.Key}, &workflow.ActivityOpts{
		RetryPolicy: &workflow.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaximumAttempts: 5},
	}).Get(ctx)
}

func startHeldWorker(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, fencingConfig *fencing.Config) *worker.Worker {
	t.Helper()
	// HeldWorkflow blocks inside workflow code on purpose: no deadlock check.
	w, err := worker.New(pool, &worker.Config{DeadlockTimeout: -1, Fencing: fencingConfig, Schema: schema, SweepInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	worker.AddWorkflow(w, &HeldWorkflow{})
	worker.AddActivity(w, &HeldActivity{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = w.Stop(stopCtx)
	})
	return w
}

// recoverJob does what the fencing reaper does to a job whose lease expired:
// back to available, with an error recorded; the trigger revokes its token.
func recoverJob(ctx context.Context, t *testing.T, b *testBundle, jobID int64) {
	t.Helper()
	tag, err := b.pool.Exec(ctx, "UPDATE "+b.names.RiverJob+" SET state = 'available', scheduled_at = now(),"+
		" errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt, 'error', 'test: lease expired', 'trace', ''))"+
		", lease_expires_at = NULL WHERE id = $1 AND state = 'running'", jobID)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())
}

func TestRecovery(t *testing.T) {
	t.Parallel()

	t.Run("StaleActivityCompletionAddsNoOutcome", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		w := startHeldWorker(ctx, t, b.pool, b.schema, nil)
		key := uuid.NewString()
		g := registerGate(key)

		run, err := b.client.Start(ctx, HeldWorkflowArgs{Key: key}, nil)
		require.NoError(t, err)
		jobID := g.await(t)

		// Attempt 1 is stuck; its job is recovered and attempt 2 finishes.
		recoverJob(ctx, t, b, jobID)
		result, err := getWithin[string](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, "attempt 2", result)

		// Attempt 1 comes back and tries to complete: fenced out.
		before := w.FencingStats().StaleWritesRejected
		close(g.release)
		requireEventually(t, func() bool { return w.FencingStats().StaleWritesRejected > before })
		requireHistoryWellFormed(ctx, t, b, run)
		requireEveryActivityResolved(ctx, t, b, run)
		var completions int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.History+
			" WHERE run_id = $1 AND type = 'ActivityCompleted'", run.RunID).Scan(&completions))
		require.Equal(t, 1, completions)
		var inbox int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.Inbox+" WHERE run_id = $1", run.RunID).Scan(&inbox))
		require.Zero(t, inbox, "the stale attempt wrote no outcome")
	})

	t.Run("StaleContinuationChangesNothing", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		w := startHeldWorker(ctx, t, b.pool, b.schema, &fencing.Config{LeaseTTL: time.Second, ReaperInterval: 100 * time.Millisecond})
		key := uuid.NewString()
		g := registerGate(key)

		run, err := b.client.Start(ctx, HeldWorkflowArgs{Key: key}, nil)
		require.NoError(t, err)
		jobID := g.await(t)
		var nextEventID int64
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT next_event_id FROM "+b.names.Run+" WHERE run_id = $1", run.RunID).Scan(&nextEventID))

		// Attempt 1 (claimed, eager) is stuck; a new attempt holds its job
		// now (and then dies: its lease expires and attempt 3 runs).
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			// The lease trigger gives attempt 2 a token, and a lease of a
			// second (as a fetch asks for it). The statement ends attempt
			// 1's live lease itself, as it must to take the job from it.
			if _, err := tx.Exec(ctx, "SELECT set_config('weir.fencing_lease_ttl', '1 second', true)"); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, "UPDATE "+b.names.RiverJob+" SET attempt = 2, attempted_at = now(), lease_expires_at = NULL WHERE id = $1 AND state = 'running'", jobID)
			require.Equal(t, int64(1), tag.RowsAffected())
			return err
		}))

		// Attempt 1 comes back: its outcome would continue the run (no task
		// is queued), and its completion rides with the continuation's
		// writes. Fenced out: nothing it wrote commits.
		before := w.FencingStats().StaleWritesRejected
		close(g.release)
		requireEventually(t, func() bool { return w.FencingStats().StaleWritesRejected > before })
		var now int64
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT next_event_id FROM "+b.names.Run+" WHERE run_id = $1", run.RunID).Scan(&now))
		var completions int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.History+
			" WHERE run_id = $1 AND type = 'ActivityCompleted'", run.RunID).Scan(&completions))
		require.Zero(t, completions, "the stale attempt's outcome did not commit")
		require.Equal(t, nextEventID, now, "the stale continuation appended nothing")

		result, err := getWithin[string](ctx, t, run)
		require.NoError(t, err, dumpJobs(ctx, t, b))
		require.Equal(t, "attempt 3", result, "the attempt after the stale one's completed the activity")
		requireHistoryWellFormed(ctx, t, b, run)
		requireEveryActivityResolved(ctx, t, b, run)
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.History+
			" WHERE run_id = $1 AND type = 'ActivityCompleted'", run.RunID).Scan(&completions))
		require.Equal(t, 1, completions)
	})

	t.Run("StaleTaskCommitChangesNothing", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startHeldWorker(ctx, t, b.pool, b.schema, nil)
		taskKey, activityKey := uuid.NewString(), uuid.NewString()
		tg := registerGate(taskKey)
		ag := registerGate(activityKey)
		close(ag.release) // the activity is not held here

		run, err := b.client.Start(ctx, HeldWorkflowArgs{Key: activityKey, HoldTask: true, TaskGates: taskKey}, nil)
		require.NoError(t, err)
		tg.await(t) // task attempt 1 is inside workflow code, holding the run lock

		var taskJobID int64
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT id FROM "+b.names.RiverJob+" WHERE kind = $1 AND state = 'running'",
			task.Kind("default", HeldWorkflowArgs{}.Kind())).Scan(&taskJobID))
		recoverJob(ctx, t, b, taskJobID)
		// Attempt 2 is fetched and waits for the run lock; attempt 1 goes on
		// and tries to commit its events: fenced out, rolled back.
		requireEventually(t, func() bool {
			var attempt int
			_ = b.pool.QueryRow(ctx, "SELECT attempt FROM "+b.names.RiverJob+" WHERE id = $1", taskJobID).Scan(&attempt)
			return attempt == 2
		})
		close(tg.release)

		result, err := getWithin[string](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, "attempt 1", result)
		requireHistoryWellFormed(ctx, t, b, run)
		requireEveryActivityResolved(ctx, t, b, run)

		// Every task boundary in history is from attempt 2 or later of the
		// first task: nothing attempt 1 appended survived.
		var fromStale int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.History+
			" WHERE run_id = $1 AND type = 'WorkflowTaskStarted' AND (attributes->>'attempt')::int = 1"+
			" AND event_id < (SELECT min(event_id) FROM "+b.names.History+" WHERE run_id = $1 AND type = 'ActivityScheduled')",
			run.RunID).Scan(&fromStale))
		require.Zero(t, fromStale)
		var started int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.History+
			" WHERE run_id = $1 AND type = 'WorkflowStarted'", run.RunID).Scan(&started))
		require.Equal(t, 1, started)
	})

	t.Run("WorkerCutOffMidActivity", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		key := uuid.NewString()
		g := registerGate(key)

		// A worker that serves none of this test's kinds starts first and
		// becomes River's leader, so the reaper keeps running when A is cut
		// (a cut leader is also covered by F4, but costs a leader failover).
		fencingConfig := &fencing.Config{LeaseTTL: time.Second, ReaperInterval: 100 * time.Millisecond}
		leader, err := worker.New(b.pool, &worker.Config{Fencing: fencingConfig, Schema: b.schema})
		require.NoError(t, err)
		worker.AddWorkflow(leader, &SequentialWorkflow{})
		require.NoError(t, leader.Start(ctx))
		t.Cleanup(func() { _ = leader.Stop(context.WithoutCancel(ctx)) })

		// Worker A reaches Postgres through a proxy the test can cut.
		proxy := dbtest.NewProxy(ctx, t, dbtest.URL(ctx, t))
		poolA, err := pgxpool.New(ctx, proxy.URL())
		require.NoError(t, err)
		t.Cleanup(poolA.Close)
		workerA := startHeldWorker(ctx, t, poolA, b.schema, fencingConfig)

		run, err := b.client.Start(ctx, HeldWorkflowArgs{Key: key}, &client.StartOpts{WorkflowID: "cut-off-" + key})
		require.NoError(t, err)
		g.await(t)
		proxy.Cut()

		// Worker B takes over once A's lease expires.
		startHeldWorker(ctx, t, b.pool, b.schema, fencingConfig)
		result, err := getWithin[string](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, "attempt 2", result)

		// W3: same workflow ID, run ID and generation.
		var workflowID string
		var generation int64
		var runs int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT workflow_id, generation, (SELECT count(*) FROM "+b.names.Run+
			" WHERE workflow_id = r.workflow_id) FROM "+b.names.Run+" r WHERE run_id = $1", run.RunID).Scan(&workflowID, &generation, &runs))
		require.Equal(t, run.WorkflowID, workflowID)
		require.Equal(t, run.Generation, generation)
		require.Equal(t, 1, runs)
		requireHistoryWellFormed(ctx, t, b, run)
		requireEveryActivityResolved(ctx, t, b, run)

		// A's network comes back and its attempt finally finishes: its
		// completion is refused, and history is unchanged.
		proxy.Restore()
		close(g.release)
		requireEventually(t, func() bool {
			stats := workerA.FencingStats()
			return stats.StaleWritesRejected+stats.LeasesLost > 0
		})
		requireHistoryWellFormed(ctx, t, b, run)
		requireEveryActivityResolved(ctx, t, b, run)
	})
}

// requireEventually polls cond until it holds or a minute passes.
func requireEventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(10 * time.Millisecond) //nolint:forbidigo // polling a condition with a deadline
	}
}
