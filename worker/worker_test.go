package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// --- workflows and activities used by the tests ---

type ChargeArgs struct {
	Order string `json:"order"`
	Cents int64  `json:"cents"`
}

func (ChargeArgs) Kind() string { return "charge" }

type Charge struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}

type ChargeActivity struct {
	activity.Defaults[ChargeArgs, Charge]

	calls    atomic.Int64
	failures atomic.Int64 // fail this many first attempts
}

func (a *ChargeActivity) Execute(ctx context.Context, args ChargeArgs) (Charge, error) {
	a.calls.Add(1)
	info, ok := activity.GetInfo(ctx)
	if !ok {
		return Charge{}, errors.New("no activity info")
	}
	if a.failures.Add(-1) >= 0 {
		return Charge{}, fmt.Errorf("bank unavailable (attempt %d)", info.Attempt)
	}
	if args.Cents < 0 {
		return Charge{}, &workflow.ApplicationError{Message: "negative amount", NonRetryable: true, Type: "InvalidAmount"}
	}
	return Charge{ID: fmt.Sprintf("%s/%s/%d", info.WorkflowID, args.Order, info.ScheduledEventID), Cents: args.Cents}, nil
}

type OrderArgs struct {
	ID    string  `json:"id"`
	Cents []int64 `json:"cents"`
}

func (OrderArgs) Kind() string { return "order" }

type Receipt struct {
	Charges []string `json:"charges"`
	Total   int64    `json:"total"`
}

// SequentialWorkflow charges each amount in turn.
type SequentialWorkflow struct {
	workflow.Defaults[OrderArgs, Receipt]
}

func (w *SequentialWorkflow) Run(ctx workflow.Context, args OrderArgs) (Receipt, error) {
	var receipt Receipt
	for i, cents := range args.Cents {
		charge, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: fmt.Sprintf("%s-%d", args.ID, i), Cents: cents}, nil).Get(ctx)
		if err != nil {
			return Receipt{}, err
		}
		receipt.Charges = append(receipt.Charges, charge.ID)
		receipt.Total += charge.Cents
	}
	return receipt, nil
}

type ParallelArgs struct {
	ID    string  `json:"id"`
	Cents []int64 `json:"cents"`
}

func (ParallelArgs) Kind() string { return "parallel_order" }

// ParallelWorkflow charges every amount at once.
type ParallelWorkflow struct {
	workflow.Defaults[ParallelArgs, Receipt]
}

func (w *ParallelWorkflow) Run(ctx workflow.Context, args ParallelArgs) (Receipt, error) {
	futures := make([]workflow.Future[Charge], len(args.Cents))
	for i, cents := range args.Cents {
		futures[i] = workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: fmt.Sprintf("%s-%d", args.ID, i), Cents: cents}, nil)
	}
	var receipt Receipt
	for _, f := range futures {
		charge, err := f.Get(ctx)
		if err != nil {
			return Receipt{}, err
		}
		receipt.Charges = append(receipt.Charges, charge.ID)
		receipt.Total += charge.Cents
	}
	return receipt, nil
}

// EmailArgs are a plain River job's args.
type EmailArgs struct {
	To string `json:"to"`
}

func (EmailArgs) Kind() string { return "send_email" }

type EmailWorker struct {
	river.WorkerDefaults[EmailArgs]
	sent chan string
}

func (w *EmailWorker) Work(ctx context.Context, job *river.Job[EmailArgs]) error {
	if job.Args.To == "bounce@example.com" {
		return river.JobCancel(errors.New("mailbox does not exist"))
	}
	w.sent <- job.Args.To
	return nil
}

type NotifyArgs struct {
	To string `json:"to"`
}

func (NotifyArgs) Kind() string { return "notify" }

// NotifyWorkflow runs a plain River worker as an activity.
type NotifyWorkflow struct {
	workflow.Defaults[NotifyArgs, string]
}

func (w *NotifyWorkflow) Run(ctx workflow.Context, args NotifyArgs) (string, error) {
	if _, err := workflow.ExecuteActivity[struct{}](ctx, EmailArgs(args), nil).Get(ctx); err != nil {
		return "", err
	}
	return "sent to " + args.To, nil
}

// --- harness ---

type testBundle struct {
	charge *ChargeActivity
	client *client.Client
	email  *EmailWorker
	names  *dbschema.Names
	pool   *pgxpool.Pool
	schema string
}

func setup(ctx context.Context, t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	c, err := client.New(pool, &client.Config{Schema: schema, PollInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return &testBundle{
		charge: &ChargeActivity{},
		client: c,
		email:  &EmailWorker{sent: make(chan string, 100)},
		names:  dbschema.New(schema),
		pool:   pool,
		schema: schema,
	}
}

// link makes the bundle's client one linked to w (client.Config.EagerStarter),
// so that its eager starts hand their first tasks to w.
func (b *testBundle) link(t *testing.T, w *worker.Worker) {
	t.Helper()
	c, err := client.New(b.pool, &client.Config{Schema: b.schema, PollInterval: 200 * time.Millisecond, EagerStarter: w})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	b.client = c
}

// startWorker starts a worker serving every test workflow and activity, and
// links the bundle's client to it (link).
func startWorker(ctx context.Context, t *testing.T, b *testBundle, config *worker.Config) *worker.Worker {
	t.Helper()
	if config == nil {
		config = &worker.Config{}
	}
	config.Schema = b.schema
	if config.SweepInterval == 0 {
		config.SweepInterval = 50 * time.Millisecond
	}
	w, err := worker.New(b.pool, config)
	require.NoError(t, err)
	worker.AddWorkflow(w, &SequentialWorkflow{})
	worker.AddWorkflow(w, &ParallelWorkflow{})
	worker.AddWorkflow(w, &NotifyWorkflow{})
	worker.AddActivity(w, b.charge)
	worker.AddRiverWorker(w, b.email)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	b.link(t, w)
	return w
}

// startWith starts a worker that serves what register registers, stopped
// when the test ends.
func startWith(ctx context.Context, t *testing.T, b *testBundle, register func(w *worker.Worker)) *worker.Worker {
	t.Helper()
	w, err := worker.New(b.pool, &worker.Config{Schema: b.schema, SweepInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	register(w)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
	})
	b.link(t, w)
	return w
}

func getWithin[R any](ctx context.Context, t *testing.T, run *client.Run) (R, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	return client.GetResult[R](ctx, run)
}

func TestWorker(t *testing.T) {
	t.Parallel()

	t.Run("ActivityFailureFailsWorkflow", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		run, err := b.client.Start(ctx, OrderArgs{ID: "bad", Cents: []int64{-5}}, nil)
		require.NoError(t, err)
		_, err = getWithin[Receipt](ctx, t, run)
		var failed *client.WorkflowFailedError
		require.ErrorAs(t, err, &failed)
		require.Equal(t, "failed", failed.State)
		require.Contains(t, err.Error(), "negative amount")
		require.Equal(t, int64(1), b.charge.calls.Load(), "a non-retryable error is not retried")
	})

	// The closing task notifies once it has committed (not inside its
	// transaction): an awaiter that never polls in the test's time still
	// wakes, whether the run closes in an activity's continuation (eager) or
	// in a task job fetched by River (eager dispatch off), and whether the
	// run started eagerly or not.
	for _, c := range []struct {
		name   string
		config *worker.Config
		opts   *client.StartOpts
	}{
		{"ClosingWakesAwaiterEager", nil, &client.StartOpts{EagerStart: true}},
		{"ClosingWakesAwaiterThroughRiver", &worker.Config{MaxEagerActivities: -1}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := setup(ctx, t)
			w := startWorker(ctx, t, b, c.config)
			awaiter, err := client.New(b.pool, &client.Config{Schema: b.schema, PollInterval: time.Hour, EagerStarter: w})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, awaiter.Close()) })

			started, err := awaiter.Start(ctx, OrderArgs{ID: "wake", Cents: []int64{1, 2}}, c.opts)
			require.NoError(t, err)
			done := make(chan error, 1)
			var receipt Receipt
			go func() { done <- started.Get(ctx, &receipt) }()
			select {
			case err := <-done:
				require.NoError(t, err)
				require.Equal(t, int64(3), receipt.Total)
			case <-time.After(20 * time.Second):
				t.Fatal("the run's close did not wake its awaiter")
			}
		})
	}

	t.Run("ActivityRetriesThenSucceeds", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		b.charge.failures.Store(2)
		startWorker(ctx, t, b, nil)

		run, err := b.client.Start(ctx, retryingArgs(), nil)
		require.NoError(t, err)
		receipt, err := getWithin[Receipt](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, int64(7), receipt.Total)
		require.Equal(t, int64(3), b.charge.calls.Load())
	})

	t.Run("NoLostWakeUpsWithoutSweeper", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		// Every activity outcome races the task commits of its siblings; the
		// run lock alone must make sure none is stranded.
		startWorker(ctx, t, b, &worker.Config{SweepInterval: time.Hour})

		const workflows = 20
		runs := make([]*client.Run, workflows)
		for i := range runs {
			var err error
			runs[i], err = b.client.Start(ctx, ParallelArgs{ID: fmt.Sprint(i), Cents: []int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}, nil)
			require.NoError(t, err)
		}
		for _, run := range runs {
			receipt, err := getWithin[Receipt](ctx, t, run)
			require.NoError(t, err)
			require.Equal(t, int64(10), receipt.Total)
			requireHistoryWellFormed(ctx, t, b, run)
			requireEveryActivityResolved(ctx, t, b, run)
		}
	})

	t.Run("OneRunExecutesUnderRacingStarts", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		const starters = 5
		var wg sync.WaitGroup
		runs := make([]*client.Run, starters)
		errs := make([]error, starters)
		for i := range starters {
			wg.Go(func() {
				// Rejecting duplicates: with the default policy, a start
				// that comes after the run closed (a one-activity run can
				// close before the last racer gets the lock) rightly starts
				// generation 2.
				runs[i], errs[i] = b.client.Start(ctx, OrderArgs{ID: "race", Cents: []int64{9}}, &client.StartOpts{
					IDReusePolicy: client.IDReuseRejectDuplicate, WorkflowID: "race", RequestID: fmt.Sprint("req-", i),
				})
			})
		}
		wg.Wait()
		var winner *client.Run
		for i := range starters {
			if errs[i] == nil {
				require.Nil(t, winner)
				winner = runs[i]
			} else if !errors.Is(errs[i], client.ErrWorkflowIDReuse) {
				require.ErrorIs(t, errs[i], client.ErrWorkflowAlreadyStarted)
			}
		}
		require.NotNil(t, winner)
		_, err := getWithin[Receipt](ctx, t, winner)
		require.NoError(t, err)
		require.Equal(t, int64(1), b.charge.calls.Load(), "exactly one run executed")
	})

	t.Run("PlainRiverWorkerAsActivity", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		// No sweeper: the outcome must come through the fencing layer, in
		// River's own state write.
		startWorker(ctx, t, b, &worker.Config{SweepInterval: time.Hour})

		run, err := b.client.Start(ctx, NotifyArgs{To: "ann@example.com"}, nil)
		require.NoError(t, err)
		result, err := getWithin[string](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, "sent to ann@example.com", result)
		require.Equal(t, "ann@example.com", <-b.email.sent)

		bounced, err := b.client.Start(ctx, NotifyArgs{To: "bounce@example.com"}, nil)
		require.NoError(t, err)
		_, err = getWithin[string](ctx, t, bounced)
		require.ErrorIs(t, err, client.ErrWorkflowFailed)
		require.ErrorContains(t, err, "mailbox does not exist")
	})

	t.Run("TenParallelActivities", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		cents := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
		run, err := b.client.Start(ctx, ParallelArgs{ID: "p", Cents: cents}, nil)
		require.NoError(t, err)
		receipt, err := getWithin[Receipt](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, int64(55), receipt.Total)
		require.Len(t, receipt.Charges, 10)
		for i, id := range receipt.Charges {
			require.Contains(t, id, fmt.Sprintf("/p-%d/", i), "results in the order the workflow asked")
		}
		requireHistoryWellFormed(ctx, t, b, run)
		requireEveryActivityResolved(ctx, t, b, run)
	})

	t.Run("ThreeSequentialActivities", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		run, err := b.client.Start(ctx, OrderArgs{ID: "o-1", Cents: []int64{100, 20, 3}}, &client.StartOpts{WorkflowID: "order-o-1"})
		require.NoError(t, err)
		receipt, err := getWithin[Receipt](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, int64(123), receipt.Total)
		require.Len(t, receipt.Charges, 3)
		require.Equal(t, int64(3), b.charge.calls.Load())
		requireHistoryWellFormed(ctx, t, b, run)
		requireEveryActivityResolved(ctx, t, b, run)
	})

	t.Run("ThousandConcurrentWorkflows", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, &worker.Config{Queues: map[string]river.QueueConfig{client.QueueDefault: {MaxWorkers: 50}}})

		const count = 1000
		runs := make([]*client.Run, count)
		for i := range runs {
			var err error
			runs[i], err = b.client.Start(ctx, OrderArgs{ID: fmt.Sprint(i), Cents: []int64{int64(i)}}, nil)
			require.NoError(t, err)
		}
		var wg sync.WaitGroup
		errs := make([]error, count)
		totals := make([]int64, count)
		for i, run := range runs {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				defer cancel()
				receipt, err := client.GetResult[Receipt](ctx, run)
				errs[i], totals[i] = err, receipt.Total
			})
		}
		wg.Wait()
		for i := range runs {
			require.NoError(t, errs[i], "run %d", i)
			require.Equal(t, int64(i), totals[i])
		}
		require.Equal(t, int64(count), b.charge.calls.Load())
	})
}

// requireEveryActivityResolved checks W5 on a run that awaited all its
// activities: each has exactly one outcome.
func requireEveryActivityResolved(ctx context.Context, t *testing.T, b *testBundle, run *client.Run) {
	t.Helper()
	var scheduled, resolved int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE type = 'ActivityScheduled'),"+
		" count(*) FILTER (WHERE type LIKE 'Activity%' AND resolves_event_id IS NOT NULL)"+
		" FROM "+b.names.History+" WHERE run_id = $1", run.RunID).Scan(&scheduled, &resolved))
	require.Positive(t, scheduled)
	require.Equal(t, scheduled, resolved, "one outcome per activity")
}

func retryingArgs() OrderArgs { return OrderArgs{ID: "retry", Cents: []int64{7}} }

// requireHistoryWellFormed checks W4 and W5 on a closed run: gap-free event
// IDs, one outcome per scheduled activity, one terminal event.
func requireHistoryWellFormed(ctx context.Context, t *testing.T, b *testBundle, run *client.Run) {
	t.Helper()
	var count, maxID, outcomes, distinctOutcomes, orphans, terminal int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*), max(event_id),"+
		" count(resolves_event_id), count(DISTINCT resolves_event_id),"+
		" count(*) FILTER (WHERE resolves_event_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM "+b.names.History+
		"  s WHERE s.run_id = e.run_id AND s.event_id = e.resolves_event_id AND s.type IN ('ActivityScheduled', 'TimerStarted', 'ChildWorkflowScheduled'))),"+
		" count(*) FILTER (WHERE type IN ('WorkflowCompleted', 'WorkflowFailed', 'WorkflowCanceled'))"+
		" FROM "+b.names.History+" e WHERE run_id = $1", run.RunID).Scan(&count, &maxID, &outcomes, &distinctOutcomes, &orphans, &terminal))
	require.Equal(t, count, maxID, "event IDs are gap-free")
	require.Equal(t, distinctOutcomes, outcomes, "at most one outcome per activity or timer")
	require.Zero(t, orphans, "every outcome resolves something the workflow scheduled")
	require.Equal(t, int64(1), terminal)

	var pending, inbox int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+b.names.Activity+" WHERE run_id = $1),"+
		" (SELECT count(*) FROM "+b.names.Inbox+" WHERE run_id = $1)", run.RunID).Scan(&pending, &inbox))
	require.Zero(t, pending)
	require.Zero(t, inbox)
}
