package worker_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/task"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// --- a workflow whose code panics on its first task attempt ---

type FlakyArgs struct {
	Key string `json:"key"`
}

func (FlakyArgs) Kind() string { return "flaky_workflow" }

var panicked sync.Map

type FlakyWorkflow struct {
	workflow.Defaults[FlakyArgs, string]
}

func (w *FlakyWorkflow) Run(ctx workflow.Context, args FlakyArgs) (string, error) {
	if _, loaded := panicked.LoadOrStore(args.Key, true); !loaded {
		panic("bug in workflow code")
	}
	return "recovered", nil
}

// --- an activity that panics ---

type PanicArgs struct{}

func (PanicArgs) Kind() string { return "panicky" }

type PanicActivity struct {
	activity.Defaults[PanicArgs, int]
}

func (a *PanicActivity) Execute(context.Context, PanicArgs) (int, error) { panic("activity bug") }

type PanicWorkflowArgs struct{}

func (PanicWorkflowArgs) Kind() string { return "panic_workflow" }

type PanicWorkflow struct {
	workflow.Defaults[PanicWorkflowArgs, int]
}

func (w *PanicWorkflow) Run(ctx workflow.Context, _ PanicWorkflowArgs) (int, error) {
	return workflow.ExecuteActivity[int](ctx, PanicArgs{}, &workflow.ActivityOpts{
		RetryPolicy: &workflow.RetryPolicy{MaximumAttempts: 1},
	}).Get(ctx)
}

// --- an activity that resumes from heartbeat details ---

type CountArgs struct {
	To int `json:"to"`
}

func (CountArgs) Kind() string { return "count" }

type CountActivity struct {
	activity.Defaults[CountArgs, []int]
}

// Execute counts to args.To, heartbeating each step; the first attempt fails
// half-way, the second resumes where the first stopped.
func (a *CountActivity) Execute(ctx context.Context, args CountArgs) ([]int, error) {
	info, _ := activity.GetInfo(ctx)
	start := 1
	if last, ok, err := activity.HeartbeatDetails[int](ctx); err != nil {
		return nil, err
	} else if ok {
		start = last + 1
	}
	var counted []int
	for i := start; i <= args.To; i++ {
		if info.Attempt == 1 && i > args.To/2 {
			return nil, errors.New("crash half-way")
		}
		counted = append(counted, i)
		if err := activity.Heartbeat(ctx, i); err != nil {
			return nil, err
		}
	}
	return counted, nil
}

type CountWorkflowArgs struct {
	To int `json:"to"`
}

func (CountWorkflowArgs) Kind() string { return "count_workflow" }

type CountWorkflow struct {
	workflow.Defaults[CountWorkflowArgs, []int]
}

func (w *CountWorkflow) Run(ctx workflow.Context, args CountWorkflowArgs) ([]int, error) {
	return workflow.ExecuteActivity[[]int](ctx, CountArgs(args), &workflow.ActivityOpts{
		RetryPolicy: &workflow.RetryPolicy{InitialInterval: 10 * time.Millisecond},
	}).Get(ctx)
}

// --- an activity whose effect is a database write, committed with its outcome ---

type DepositArgs struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
	Table   string `json:"table"`
}

func (DepositArgs) Kind() string { return "deposit" }

type DepositActivity struct {
	activity.Defaults[DepositArgs, int64]
	pool interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	}
	failAfterCommit sync.Map // account → first attempt returns an error after its commit
}

func (a *DepositActivity) Execute(ctx context.Context, args DepositArgs) (int64, error) {
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var balance int64
	if err := tx.QueryRow(ctx, "INSERT INTO "+args.Table+" (account, cents) VALUES ($1, $2)"+
		" ON CONFLICT (account) DO UPDATE SET cents = "+args.Table+".cents + $2 RETURNING cents", args.Account, args.Cents).Scan(&balance); err != nil {
		return 0, err
	}
	if err := activity.CompleteTx(ctx, tx, balance); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	if _, loaded := a.failAfterCommit.LoadOrStore(args.Account, true); !loaded {
		// The outcome is committed: this error must change nothing.
		return 0, errors.New("lost the reply after committing")
	}
	return balance, nil
}

type DepositWorkflowArgs struct {
	Account string `json:"account"`
	Table   string `json:"table"`
}

func (DepositWorkflowArgs) Kind() string { return "deposit_workflow" }

type DepositWorkflow struct {
	workflow.Defaults[DepositWorkflowArgs, int64]
}

func (w *DepositWorkflow) Run(ctx workflow.Context, args DepositWorkflowArgs) (int64, error) {
	return workflow.ExecuteActivity[int64](ctx, DepositArgs{Account: args.Account, Cents: 250, Table: args.Table}, nil).Get(ctx)
}

func TestFailurePaths(t *testing.T) {
	t.Parallel()

	t.Run("ActivityCompleteTxCommitsEffectOnce", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		table := dbschema.Qualify(b.schema, "balances")
		// The test schema is reused across -count runs: a table of its own,
		// new each run.
		_, err := b.pool.Exec(ctx, "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" (account text PRIMARY KEY, cents bigint NOT NULL)")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = b.pool.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+table) })
		deposit := &DepositActivity{pool: b.pool}
		startWith(ctx, t, b, func(w *worker.Worker) {
			worker.AddWorkflow(w, &DepositWorkflow{})
			worker.AddActivity(w, deposit)
		})

		run, err := b.client.Start(ctx, DepositWorkflowArgs{Account: "acct-1", Table: table}, nil)
		require.NoError(t, err)
		balance, err := getWithin[int64](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, int64(250), balance, "the error after commit did not cause a second deposit")
		var cents int64
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT cents FROM "+table+" WHERE account = 'acct-1'").Scan(&cents))
		require.Equal(t, int64(250), cents)
	})

	t.Run("ActivityPanicFailsWithStack", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWith(ctx, t, b, func(w *worker.Worker) {
			worker.AddWorkflow(w, &PanicWorkflow{})
			worker.AddActivity(w, &PanicActivity{})
		})

		run, err := b.client.Start(ctx, PanicWorkflowArgs{}, nil)
		require.NoError(t, err)
		_, err = getWithin[int](ctx, t, run)
		var failed *client.WorkflowFailedError
		require.ErrorAs(t, err, &failed)
		require.Contains(t, err.Error(), "activity bug")
		var failureType, stack string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT attributes->'failure'->>'type', attributes->'failure'->>'stack' FROM "+b.names.History+
			" WHERE run_id = $1 AND type = 'ActivityFailed'", run.RunID).Scan(&failureType, &stack))
		require.Equal(t, "PanicError", failureType)
		require.Contains(t, stack, "PanicActivity", "the activity's stack is kept in history")
	})

	t.Run("HeartbeatDetailsResumeNextAttempt", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWith(ctx, t, b, func(w *worker.Worker) {
			worker.AddWorkflow(w, &CountWorkflow{})
			worker.AddActivity(w, &CountActivity{})
		})

		run, err := b.client.Start(ctx, CountWorkflowArgs{To: 10}, nil)
		require.NoError(t, err)
		counted, err := getWithin[[]int](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, []int{6, 7, 8, 9, 10}, counted, "attempt 2 resumed after attempt 1's last heartbeat")
	})

	t.Run("DiscardedTaskIsReplaced", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)

		run, err := b.client.Start(ctx, OrderArgs{ID: "d", Cents: []int64{4}}, nil)
		require.NoError(t, err)
		// An operator (or exhausted attempts) ends the run's task for good.
		tag, err := b.pool.Exec(ctx, "UPDATE "+b.names.RiverJob+" SET state = 'discarded', finalized_at = now() WHERE kind = $1",
			task.Kind("default", OrderArgs{}.Kind()))
		require.NoError(t, err)
		require.Equal(t, int64(1), tag.RowsAffected())

		startWorker(ctx, t, b, nil)
		receipt, err := getWithin[Receipt](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, int64(4), receipt.Total)
	})

	t.Run("UnknownKindWaitsForCapableWorker", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		// This worker does not know FlakyWorkflow: it must leave the task alone.
		startWith(ctx, t, b, func(w *worker.Worker) { worker.AddWorkflow(w, &SequentialWorkflow{}) })

		key := uuid.NewString()
		panicked.Store(key, true) // no panic in this test
		run, err := b.client.Start(ctx, FlakyArgs{Key: key}, nil)
		require.NoError(t, err)
		seq, err := b.client.Start(ctx, OrderArgs{ID: "known"}, nil)
		require.NoError(t, err)
		_, err = getWithin[Receipt](ctx, t, seq)
		require.NoError(t, err, "the worker is running")

		var state string
		var attempt int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT state, attempt FROM "+b.names.RiverJob+" WHERE kind = $1",
			task.Kind("default", FlakyArgs{}.Kind())).Scan(&state, &attempt))
		require.Equal(t, "available", state, "visible and waiting, not failed")
		require.Zero(t, attempt)

		startWith(ctx, t, b, func(w *worker.Worker) { worker.AddWorkflow(w, &FlakyWorkflow{}) })
		result, err := getWithin[string](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, "recovered", result)
	})

	t.Run("WorkflowPanicRetriesTaskVisibly", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWith(ctx, t, b, func(w *worker.Worker) { worker.AddWorkflow(w, &FlakyWorkflow{}) })

		run, err := b.client.Start(ctx, FlakyArgs{Key: uuid.NewString()}, nil)
		require.NoError(t, err)
		result, err := getWithin[string](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, "recovered", result, "the task failed once, then succeeded; the workflow did not fail")

		var errs []string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT array(SELECT (e->>'error') || (e->>'trace') FROM unnest(errors) e) FROM "+b.names.RiverJob+
			" WHERE kind = $1", task.Kind("default", FlakyArgs{}.Kind())).Scan(&errs))
		require.Len(t, errs, 1)
		require.Contains(t, errs[0], "bug in workflow code")
		require.Contains(t, errs[0], "FlakyWorkflow", "the panic's stack is recorded on the task")
	})
}

// base64Codec is a codec whose output is not JSON, like an encrypting one.
type base64Codec struct{ client.JSONCodec }

func (c base64Codec) Encode(v any) ([]byte, error) {
	data, err := c.JSONCodec.Encode(v)
	if err != nil {
		return nil, err
	}
	return []byte(base64.StdEncoding.EncodeToString(data)), nil
}

func (c base64Codec) Decode(data []byte, v any) error {
	if len(data) == 0 {
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(string(data))
	if err != nil {
		return err
	}
	return c.JSONCodec.Decode(raw, v)
}

func TestPayloads(t *testing.T) {
	t.Parallel()

	t.Run("CustomCodecOnClientAndWorker", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		c, err := client.New(b.pool, &client.Config{Codec: base64Codec{}, Schema: b.schema})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		startWorker(ctx, t, b, &worker.Config{Codec: base64Codec{}})

		run, err := c.Start(ctx, OrderArgs{ID: "secret", Cents: []int64{5, 6}}, nil)
		require.NoError(t, err)
		receipt, err := getWithin[Receipt](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, int64(11), receipt.Total)

		var args []byte
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT args FROM "+b.names.Run+" WHERE run_id = $1", run.RunID).Scan(&args))
		require.NotContains(t, string(args), "secret", "stored through the codec")
		var result string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT attributes->>'result' FROM "+b.names.History+
			" WHERE run_id = $1 AND type = 'ActivityCompleted' LIMIT 1", run.RunID).Scan(&result))
		require.NotContains(t, result, "secret", "activity results too")
	})

	t.Run("ActivityResultTooLarge", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, &worker.Config{MaxPayloadBytes: 10})

		run, err := b.client.Start(ctx, OrderArgs{ID: "big", Cents: []int64{1}}, nil)
		require.NoError(t, err)
		_, err = getWithin[Receipt](ctx, t, run)
		require.ErrorIs(t, err, client.ErrWorkflowFailed)
		require.ErrorContains(t, err, "PayloadTooLarge")
		require.Equal(t, int64(1), b.charge.calls.Load(), "not retried")
	})
}

// NamespacedArgs are run by NamespacedWorkflow, which says where it ran.
type NamespacedArgs struct{}

func (NamespacedArgs) Kind() string { return "namespaced" }

type NamespacedWorkflow struct {
	workflow.Defaults[NamespacedArgs, string]
	servedBy string
}

func (w *NamespacedWorkflow) Run(ctx workflow.Context, _ NamespacedArgs) (string, error) {
	activityBy, err := workflow.ExecuteActivity[string](ctx, WhereArgs{}, nil).Get(ctx)
	return w.servedBy + ", activity by " + activityBy, err
}

type WhereArgs struct{}

func (WhereArgs) Kind() string { return "where" }

// WhereActivity says which worker ran it.
type WhereActivity struct {
	activity.Defaults[WhereArgs, string]
	servedBy string
	ran      atomic.Int64
}

func (a *WhereActivity) Execute(context.Context, WhereArgs) (string, error) {
	a.ran.Add(1)
	return a.servedBy, nil
}

func TestNamespaces(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)

	for _, namespace := range []string{"team-a", "team-b"} {
		w, err := worker.New(b.pool, &worker.Config{Namespaces: []string{namespace}, Schema: b.schema})
		require.NoError(t, err)
		worker.AddWorkflow(w, &NamespacedWorkflow{servedBy: "worker of " + namespace})
		// The same activity kind on both, in the same queue.
		worker.AddActivity(w, &WhereActivity{servedBy: "worker of " + namespace})
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() { _ = w.Stop(context.WithoutCancel(ctx)) })
	}

	var runs []*client.Run
	for i := range 12 {
		namespace := []string{"team-a", "team-b"}[i%2]
		run, err := b.client.Start(ctx, NamespacedArgs{}, &client.StartOpts{Namespace: namespace})
		require.NoError(t, err)
		runs = append(runs, run)
	}
	for _, run := range runs {
		servedBy, err := getWithin[string](ctx, t, run)
		require.NoError(t, err)
		want := "worker of " + run.Namespace
		require.Equal(t, want+", activity by "+want, servedBy, "only a worker of the run's namespace runs its workflow code and its activities")
	}

	_, err := worker.New(b.pool, &worker.Config{Namespaces: []string{"bad/namespace"}})
	require.Error(t, err)
}

// TestActivityStaysInItsNamespace: a worker of team-b that registers an
// activity kind team-a uses, in the same queue, fetches team-a's activity
// but never runs it: it waits for a worker of team-a.
func TestActivityStaysInItsNamespace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	start := func(namespace, queue string, wf workflow.Workflow[NamespacedArgs, string], servedBy string) *WhereActivity {
		w, err := worker.New(b.pool, &worker.Config{
			Namespaces: []string{namespace}, Queues: map[string]river.QueueConfig{queue: {MaxWorkers: 10}}, Schema: b.schema,
		})
		require.NoError(t, err)
		if wf != nil {
			worker.AddWorkflow(w, wf)
		}
		act := &WhereActivity{servedBy: servedBy}
		worker.AddActivity(w, act)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() { _ = w.Stop(context.WithoutCancel(ctx)) })
		return act
	}
	// Team-a's first worker runs the workflow from its own queue and serves
	// no activity queue; team-b's serves the activities' queue.
	start("team-a", "tasks", &NamespacedWorkflow{servedBy: "worker of team-a"}, "worker of team-a")
	teamB := start("team-b", workflow.QueueDefault, nil, "worker of team-b")

	run, err := b.client.Start(ctx, NamespacedArgs{}, &client.StartOpts{Namespace: "team-a", Queue: "tasks"})
	require.NoError(t, err)
	// Team-b's worker has fetched the activity (and handed it back).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var fetched bool
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+b.names.RiverJob+" WHERE kind = 'where' AND attempted_at IS NOT NULL)").Scan(&fetched))
		if fetched {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the activity was never fetched; jobs:\n%s", dumpJobs(ctx, t, b))
		}
		time.Sleep(10 * time.Millisecond)
	}

	start("team-a", workflow.QueueDefault, &NamespacedWorkflow{servedBy: "worker of team-a"}, "worker of team-a")
	servedBy, err := getWithin[string](ctx, t, run)
	require.NoError(t, err, dumpJobs(ctx, t, b))
	require.Equal(t, "worker of team-a, activity by worker of team-a", servedBy)
	require.Zero(t, teamB.ran.Load(), "team-b's worker never ran team-a's activity")
}

func dumpJobs(ctx context.Context, t *testing.T, b *testBundle) string {
	rows, err := b.pool.Query(ctx, "SELECT kind, state, attempt, queue, coalesce(array_to_string(errors::text[], ';'), '') FROM "+b.names.RiverJob)
	require.NoError(t, err)
	defer rows.Close()
	out := ""
	for rows.Next() {
		var kind, state, queue, errs string
		var attempt int
		require.NoError(t, rows.Scan(&kind, &state, &attempt, &queue, &errs))
		out += fmt.Sprintf("%s %s %d %s %s\n", kind, state, attempt, queue, errs)
	}
	return out
}

func TestRetention(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	require.NoError(t, b.client.RegisterNamespace(ctx, "short-lived", &client.NamespaceOpts{Retention: time.Millisecond}))
	// The default namespace keeps the worker's default retention (30 days).
	startWorker(ctx, t, b, &worker.Config{Namespaces: []string{"default", "short-lived"}})

	kept, err := b.client.Start(ctx, OrderArgs{ID: "kept", Cents: []int64{1}}, &client.StartOpts{WorkflowID: "kept"})
	require.NoError(t, err)
	_, err = getWithin[Receipt](ctx, t, kept)
	require.NoError(t, err)

	shortLived, err := client.New(b.pool, &client.Config{Namespace: "short-lived", Schema: b.schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = shortLived.Close() })
	gone, err := shortLived.Start(ctx, OrderArgs{ID: "gone", Cents: []int64{1}}, &client.StartOpts{WorkflowID: "gone"})
	require.NoError(t, err)
	// Retention (1 ms) may delete the closed run before its result is read.
	if _, err = getWithin[Receipt](ctx, t, gone); !errors.Is(err, client.ErrRunNotFound) {
		require.NoError(t, err)
	}

	requireEventually(t, func() bool {
		_, err := shortLived.Describe(ctx, "gone", gone.RunID)
		return errors.Is(err, client.ErrRunNotFound)
	})
	n := b.names
	for _, table := range []string{n.History, n.Event, n.Activity, n.Inbox, n.Query, n.Update} {
		var rows int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE run_id = $1", gone.RunID).Scan(&rows))
		require.Zero(t, rows, "its rows in %s went with it", table)
	}
	_, err = b.client.Describe(ctx, "kept", kept.RunID)
	require.NoError(t, err, "the default namespace keeps its runs")

	again, err := shortLived.Start(ctx, OrderArgs{ID: "gone", Cents: []int64{1}}, &client.StartOpts{WorkflowID: "gone"})
	require.NoError(t, err)
	require.Equal(t, int64(2), again.Generation, "generations stay monotonic after retention")
}
