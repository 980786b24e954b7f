package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// --- timers ---

type NapArgs struct {
	Millis int `json:"millis"`
}

func (NapArgs) Kind() string { return "nap" }

type NapWorkflow struct {
	workflow.Defaults[NapArgs, time.Duration]
}

// Run sleeps durably and reports how long workflow time advanced.
func (w *NapWorkflow) Run(ctx workflow.Context, args NapArgs) (time.Duration, error) {
	start := workflow.Now(ctx)
	if err := workflow.Sleep(ctx, time.Duration(args.Millis)*time.Millisecond); err != nil {
		return 0, err
	}
	return workflow.Now(ctx).Sub(start), nil
}

// --- signals ---

type AddSignal struct {
	N int `json:"n"`
}

func (AddSignal) Kind() string { return "add" }

type DoneSignal struct{}

func (DoneSignal) Kind() string { return "done" }

type SumQuery struct{}

func (SumQuery) Kind() string { return "current_sum" }

type OtherQuery struct{}

func (OtherQuery) Kind() string { return "other" }

type SumArgs struct {
	TimeoutSeconds int `json:"timeout_seconds"`
}

func (SumArgs) Kind() string { return "sum" }

type SumWorkflow struct {
	workflow.Defaults[SumArgs, int]
}

// Run adds up "add" signals until a "done" signal, or until its timer fires.
func (w *SumWorkflow) Run(ctx workflow.Context, args SumArgs) (int, error) {
	adds := workflow.GetSignalChannel[AddSignal](ctx)
	done := workflow.GetSignalChannel[DoneSignal](ctx)
	timeout := workflow.NewTimer(ctx, time.Duration(args.TimeoutSeconds)*time.Second)
	sum, finished := 0, false
	workflow.SetQueryHandler(ctx, func(SumQuery) (int, error) { return sum, nil })
	for !finished {
		workflow.NewSelector(ctx).
			AddFuture(adds, func() {
				add, err := adds.Receive(ctx)
				if err == nil {
					sum += add.N
				}
			}).
			AddFuture(done, func() { _, _ = done.Receive(ctx); finished = true }).
			AddFuture(timeout, func() { sum, finished = -1, true }).
			Select(ctx)
	}
	// Drain adds that came with done.
	for {
		add, ok, err := adds.TryReceive(ctx)
		if err != nil || !ok {
			break
		}
		sum += add.N
	}
	return sum, nil
}

// --- cancellation ---

type BlockArgs struct {
	Key string `json:"key"`
}

func (BlockArgs) Kind() string { return "block" }

type BlockActivity struct {
	activity.Defaults[BlockArgs, string]
	started   chan string
	cancelled chan string
}

func (a *BlockActivity) Execute(ctx context.Context, args BlockArgs) (string, error) {
	a.started <- args.Key
	<-ctx.Done()
	a.cancelled <- args.Key
	return "", ctx.Err()
}

type CancellableArgs struct {
	Key string `json:"key"`
}

func (CancellableArgs) Kind() string { return "cancellable" }

type CancellableWorkflow struct {
	workflow.Defaults[CancellableArgs, string]
}

func (w *CancellableWorkflow) Run(ctx workflow.Context, args CancellableArgs) (string, error) {
	_, err := workflow.ExecuteActivity[string](ctx, BlockArgs(args), nil).Get(ctx)
	return "", err
}

func TestFeatures(t *testing.T) {
	t.Parallel()

	start := func(ctx context.Context, t *testing.T, b *testBundle) *BlockActivity {
		t.Helper()
		block := &BlockActivity{started: make(chan string, 10), cancelled: make(chan string, 10)}
		w, err := worker.New(b.pool, &worker.Config{Schema: b.schema, SweepInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		worker.AddWorkflow(w, &NapWorkflow{})
		worker.AddWorkflow(w, &SumWorkflow{})
		worker.AddWorkflow(w, &CancellableWorkflow{})
		worker.AddActivity(w, block)
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(stopCtx))
		})
		return block
	}

	t.Run("CancelReachesRunningActivity", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		block := start(ctx, t, b)

		run, err := b.client.Start(ctx, CancellableArgs{Key: "c"}, nil)
		require.NoError(t, err)
		require.Equal(t, "c", receiveWithin(t, block.started))

		require.NoError(t, b.client.Cancel(ctx, run.WorkflowID, run.RunID, "customer changed their mind"))
		require.Equal(t, "c", receiveWithin(t, block.cancelled), "the activity's context is cancelled")

		_, err = getWithin[string](ctx, t, run)
		var failed *client.WorkflowFailedError
		require.ErrorAs(t, err, &failed)
		require.Equal(t, "cancelled", failed.State)

		require.NoError(t, b.client.Cancel(ctx, run.WorkflowID, run.RunID, "again"), "cancelling a cancelled run is a no-op")
		requireHistoryWellFormed(ctx, t, b, run)
	})

	t.Run("DurableTimer", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		start(ctx, t, b)

		run, err := b.client.Start(ctx, NapArgs{Millis: 300}, nil)
		require.NoError(t, err)
		slept, err := getWithin[time.Duration](ctx, t, run)
		require.NoError(t, err)
		require.GreaterOrEqual(t, slept, 300*time.Millisecond, "workflow time advanced at least the timer's duration")

		page, err := b.client.History(ctx, run.WorkflowID, run.RunID, nil)
		require.NoError(t, err)
		var types []client.EventType
		for _, e := range page.Events {
			types = append(types, e.Type)
		}
		require.Contains(t, types, client.EventType("TimerStarted"))
		require.Contains(t, types, client.EventType("TimerFired"))
	})

	t.Run("QueryRunningWorkflow", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		start(ctx, t, b)

		run, err := b.client.Start(ctx, SumArgs{TimeoutSeconds: 3600}, nil)
		require.NoError(t, err)
		require.NoError(t, b.client.Signal(ctx, run.WorkflowID, uuid.Nil, AddSignal{N: 5}, nil))
		requireEventually(t, func() bool {
			var sum int
			err := b.client.Query(ctx, run.WorkflowID, uuid.Nil, SumQuery{}, &sum, nil)
			require.NoError(t, err)
			return sum == 5
		})
		require.NoError(t, b.client.Terminate(ctx, run.WorkflowID, uuid.Nil, "done"))

		// Nobody runs this workflow's kind: the query times out, typed.
		orphan, err := b.client.Start(ctx, client.RawArgs{JSON: []byte(`{}`), KindName: "nobody_runs_this"}, nil)
		require.NoError(t, err)
		err = b.client.Query(ctx, orphan.WorkflowID, orphan.RunID, SumQuery{}, nil, &client.QueryOpts{Timeout: 300 * time.Millisecond})
		var timeout *client.QueryTimeoutError
		require.ErrorAs(t, err, &timeout)
		require.ErrorIs(t, err, client.ErrQueryTimeout)
		require.Equal(t, orphan.RunID, timeout.RunID)
	})

	t.Run("QueryBeforeFirstTask", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)

		// No worker yet: the query waits for the run's first task, which
		// finds it waiting and wakes the responders.
		run, err := b.client.Start(ctx, SumArgs{TimeoutSeconds: 3600}, nil)
		require.NoError(t, err)
		answered := make(chan error, 1)
		var sum int
		go func() {
			answered <- b.client.Query(ctx, run.WorkflowID, run.RunID, SumQuery{}, &sum, &client.QueryOpts{Timeout: time.Minute})
		}()
		requireEventually(t, func() bool {
			var waiting bool
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+b.names.Query+" WHERE run_id = $1)", run.RunID).Scan(&waiting))
			return waiting
		})
		start(ctx, t, b)
		require.NoError(t, <-answered)
		require.Zero(t, sum)
		require.NoError(t, b.client.Terminate(ctx, run.WorkflowID, uuid.Nil, "done"))
	})

	t.Run("SignalWithStart", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		start(ctx, t, b)

		// Racing callers reach one run; every signal arrives.
		const callers = 5
		runs := make([]*client.Run, callers)
		errs := make([]error, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				runs[i], errs[i] = b.client.SignalWithStart(ctx, SumArgs{TimeoutSeconds: 3600}, &client.StartOpts{WorkflowID: "sws"},
					AddSignal{N: 1}, nil)
			})
		}
		wg.Wait()
		created := 0
		for i := range callers {
			require.NoError(t, errs[i])
			require.Equal(t, runs[0].RunID, runs[i].RunID)
			if runs[i].Created {
				created++
			}
		}
		require.Equal(t, 1, created)
		require.NoError(t, b.client.Signal(ctx, "sws", uuid.Nil, DoneSignal{}, nil))
		sum, err := getWithin[int](ctx, t, runs[0])
		require.NoError(t, err)
		require.Equal(t, callers, sum)

		// After the run closed, SignalWithStart starts the next one.
		next, err := b.client.SignalWithStart(ctx, SumArgs{TimeoutSeconds: 3600}, &client.StartOpts{WorkflowID: "sws"}, AddSignal{N: 7}, nil)
		require.NoError(t, err)
		require.True(t, next.Created)
		require.Equal(t, int64(2), next.Generation)
		require.NoError(t, b.client.Signal(ctx, "sws", uuid.Nil, DoneSignal{}, nil))
		sum, err = getWithin[int](ctx, t, next)
		require.NoError(t, err)
		require.Equal(t, 7, sum)
	})

	t.Run("SignalsDedupAndCancelTheTimer", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		start(ctx, t, b)

		run, err := b.client.Start(ctx, SumArgs{TimeoutSeconds: 3600}, nil)
		require.NoError(t, err)
		require.NoError(t, b.client.Signal(ctx, run.WorkflowID, uuid.Nil, AddSignal{N: 1}, &client.SignalOpts{RequestID: "a"}))
		require.NoError(t, b.client.Signal(ctx, run.WorkflowID, uuid.Nil, AddSignal{N: 1}, &client.SignalOpts{RequestID: "a"}), "a retry of the same signal")
		// And a retry after the first one is already in history.
		requireEventually(t, func() bool {
			var n int
			_ = b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.History+" WHERE run_id = $1 AND type = 'SignalReceived'", run.RunID).Scan(&n)
			return n == 1
		})
		require.NoError(t, b.client.Signal(ctx, run.WorkflowID, uuid.Nil, AddSignal{N: 1}, &client.SignalOpts{RequestID: "a"}))
		require.NoError(t, b.client.Signal(ctx, run.WorkflowID, uuid.Nil, AddSignal{N: 10}, nil))
		// A signal sent in the caller's transaction arrives iff it commits.
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, b.client.SignalTx(ctx, tx, run.WorkflowID, uuid.Nil, AddSignal{N: 1000}, nil))
		require.NoError(t, tx.Rollback(ctx))
		require.NoError(t, b.client.Signal(ctx, run.WorkflowID, uuid.Nil, AddSignal{N: 100}, nil))
		require.NoError(t, b.client.Signal(ctx, run.WorkflowID, uuid.Nil, DoneSignal{}, nil))

		sum, err := getWithin[int](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, 111, sum)

		// A closed run answers queries from its replayed history.
		var queried int
		require.NoError(t, b.client.Query(ctx, run.WorkflowID, run.RunID, SumQuery{}, &queried, nil))
		require.Equal(t, 111, queried)
		err = b.client.Query(ctx, run.WorkflowID, run.RunID, OtherQuery{}, &queried, nil)
		require.ErrorIs(t, err, client.ErrQueryFailed)
		require.ErrorContains(t, err, "UnknownQuery")

		err = b.client.Signal(ctx, run.WorkflowID, uuid.Nil, AddSignal{N: 1}, nil)
		require.ErrorIs(t, err, client.ErrRunClosed)
		var closed *client.RunClosedError
		require.True(t, errors.As(err, &closed))
		require.Equal(t, "completed", closed.State)
		requireHistoryWellFormed(ctx, t, b, run)
	})
}

func receiveWithin(t *testing.T, ch chan string) string {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(60 * time.Second):
		t.Fatal("nothing received")
		return ""
	}
}

type CountdownArgs struct {
	N int `json:"n"`
}

func (CountdownArgs) Kind() string { return "countdown" }

type CountdownWorkflow struct {
	workflow.Defaults[CountdownArgs, int64]
}

// Run continues as new N times, then returns its generation.
func (w *CountdownWorkflow) Run(ctx workflow.Context, args CountdownArgs) (int64, error) {
	if args.N > 0 {
		return 0, workflow.ContinueAsNew(ctx, CountdownArgs{N: args.N - 1})
	}
	return workflow.GetInfo(ctx).Generation, nil
}

func TestContinueAsNew(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	w, err := worker.New(b.pool, &worker.Config{Schema: b.schema})
	require.NoError(t, err)
	worker.AddWorkflow(w, &CountdownWorkflow{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.WithoutCancel(ctx)) })

	run, err := b.client.Start(ctx, CountdownArgs{N: 3}, &client.StartOpts{WorkflowID: "countdown"})
	require.NoError(t, err)
	generation, err := getWithin[int64](ctx, t, run)
	require.NoError(t, err)
	require.Equal(t, int64(4), generation, "Get follows the chain to the last run")

	runs, err := b.client.List(ctx, &client.ListOpts{WorkflowIDPrefix: "countdown"})
	require.NoError(t, err)
	require.Len(t, runs.Runs, 4)
	states := map[string]int{}
	for _, r := range runs.Runs {
		states[r.State]++
	}
	require.Equal(t, map[string]int{"continued_as_new": 3, "completed": 1}, states)

	first, err := b.client.Describe(ctx, "countdown", run.RunID)
	require.NoError(t, err)
	require.Equal(t, "continued_as_new", first.State)
	page, err := b.client.History(ctx, "countdown", run.RunID, nil)
	require.NoError(t, err)
	require.Equal(t, client.EventType("WorkflowContinuedAsNew"), page.Events[len(page.Events)-1].Type)
}

type RelayArgs struct {
	Sum int `json:"sum"`
}

func (RelayArgs) Kind() string { return "relay" }

// RelayWorkflow takes one "add" signal per run and continues as new with the
// running sum; a "done" signal ends it. Every signal it has not taken when a
// run ends must reach the next run.
type RelayWorkflow struct {
	workflow.Defaults[RelayArgs, int]
}

func (w *RelayWorkflow) Run(ctx workflow.Context, args RelayArgs) (int, error) {
	adds := workflow.GetSignalChannel[AddSignal](ctx)
	done := workflow.GetSignalChannel[DoneSignal](ctx)
	for {
		if add, ok, err := adds.TryReceive(ctx); err != nil {
			return 0, err
		} else if ok {
			return 0, workflow.ContinueAsNew(ctx, RelayArgs{Sum: args.Sum + add.N})
		}
		if _, ok, _ := done.TryReceive(ctx); ok {
			return args.Sum, nil
		}
		workflow.NewSelector(ctx).AddFuture(adds, func() {}).AddFuture(done, func() {}).Select(ctx)
	}
}

func TestContinueAsNewCarriesSignals(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	w, err := worker.New(b.pool, &worker.Config{Schema: b.schema})
	require.NoError(t, err)
	worker.AddWorkflow(w, &RelayWorkflow{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.WithoutCancel(ctx)) })

	run, err := b.client.Start(ctx, RelayArgs{}, &client.StartOpts{WorkflowID: "relay"})
	require.NoError(t, err)
	// Signals to the workflow ID race the runs continuing as new.
	for i := 1; i <= 6; i++ {
		require.NoError(t, b.client.Signal(ctx, "relay", uuid.Nil, AddSignal{N: i}, nil))
	}
	require.NoError(t, b.client.Signal(ctx, "relay", uuid.Nil, DoneSignal{}, nil))

	sum, err := getWithin[int](ctx, t, run)
	require.NoError(t, err)
	require.Equal(t, 21, sum, "1+2+…+6: no signal lost across the chain")
}

type GreetingArgs struct{}

func (GreetingArgs) Kind() string { return "greeting" }

// GreetingV1 waits for "done" and greets in English.
type GreetingV1 struct {
	workflow.Defaults[GreetingArgs, string]
}

func (w *GreetingV1) Run(ctx workflow.Context, _ GreetingArgs) (string, error) {
	greeting := "hello"
	if _, err := workflow.GetSignalChannel[DoneSignal](ctx).Receive(ctx); err != nil {
		return "", err
	}
	return greeting, nil
}

// GreetingV2 is the same workflow type after a change, guarded by GetVersion.
type GreetingV2 struct {
	workflow.Defaults[GreetingArgs, string]
}

func (w *GreetingV2) Run(ctx workflow.Context, _ GreetingArgs) (string, error) {
	// The change: decided where v1 decided, before waiting. A run that passed
	// here under v1 replays this point with no version marker, so it gets
	// DefaultVersion and keeps the old behaviour.
	greeting := "bonjour"
	if workflow.GetVersion(ctx, "french", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		greeting = "hello"
	}
	if _, err := workflow.GetSignalChannel[DoneSignal](ctx).Receive(ctx); err != nil {
		return "", err
	}
	return greeting, nil
}

func TestVersioningAcrossADeploy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)

	// Version 1 is deployed; a run starts and waits.
	v1, err := worker.New(b.pool, &worker.Config{Schema: b.schema})
	require.NoError(t, err)
	worker.AddWorkflow(v1, &GreetingV1{})
	require.NoError(t, v1.Start(ctx))
	old, err := b.client.Start(ctx, GreetingArgs{}, &client.StartOpts{WorkflowID: "old"})
	require.NoError(t, err)
	requireEventually(t, func() bool {
		desc, err := b.client.Describe(ctx, "old", old.RunID)
		return err == nil && desc.HistoryLength > 0
	})
	require.NoError(t, v1.Stop(ctx))

	// Version 2 replaces it while the old run is in flight.
	v2, err := worker.New(b.pool, &worker.Config{Schema: b.schema})
	require.NoError(t, err)
	worker.AddWorkflow(v2, &GreetingV2{})
	require.NoError(t, v2.Start(ctx))
	t.Cleanup(func() { _ = v2.Stop(context.WithoutCancel(ctx)) })
	fresh, err := b.client.Start(ctx, GreetingArgs{}, &client.StartOpts{WorkflowID: "new"})
	require.NoError(t, err)

	for _, id := range []string{"old", "new"} {
		require.NoError(t, b.client.Signal(ctx, id, uuid.Nil, DoneSignal{}, nil))
	}
	greeting, err := getWithin[string](ctx, t, old)
	require.NoError(t, err)
	require.Equal(t, "hello", greeting, "the run that started on v1 stays on the old branch")
	greeting, err = getWithin[string](ctx, t, fresh)
	require.NoError(t, err)
	require.Equal(t, "bonjour", greeting, "a run started on v2 takes the new branch")
}

type SettleArgs struct{}

func (SettleArgs) Kind() string { return "settle" }

// SettleWorkflow charges once, then twice at once, then waits for "done".
type SettleWorkflow struct {
	workflow.Defaults[SettleArgs, int64]
}

func (w *SettleWorkflow) Run(ctx workflow.Context, _ SettleArgs) (int64, error) {
	first, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: "first", Cents: 1}, nil).Get(ctx)
	if err != nil {
		return 0, err
	}
	second := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: "second", Cents: 2}, nil)
	third := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: "third", Cents: 3}, nil)
	total := first.Cents
	for _, f := range []workflow.Future[Charge]{second, third} {
		c, err := f.Get(ctx)
		if err != nil {
			return 0, err
		}
		total += c.Cents
	}
	_, _ = workflow.GetSignalChannel[DoneSignal](ctx).Receive(ctx)
	return total, nil
}

// An activity's pending row (its deadlines, for the sweeper) goes with the
// task that records its outcome, one at a time or several in one task, while
// the run goes on.
func TestActivityOutcomesRetirePendingRows(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		config *worker.Config
	}{
		{"Eager", nil},
		{"ThroughRiver", &worker.Config{MaxEagerActivities: -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := setup(ctx, t)
			config := c.config
			if config == nil {
				config = &worker.Config{}
			}
			config.Schema = b.schema
			w, err := worker.New(b.pool, config)
			require.NoError(t, err)
			worker.AddWorkflow(w, &SettleWorkflow{})
			worker.AddActivity(w, b.charge)
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { _ = w.Stop(context.WithoutCancel(ctx)) })

			run, err := b.client.Start(ctx, SettleArgs{}, nil)
			require.NoError(t, err)
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				var resolved, pending int
				require.NoError(t, b.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+b.names.History+
					" WHERE run_id = $1 AND type = 'ActivityCompleted'), (SELECT count(*) FROM "+b.names.Activity+" WHERE run_id = $1)",
					run.RunID).Scan(&resolved, &pending))
				if resolved == 3 && pending == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d activities resolved, %d pending rows left", resolved, pending)
				}
			}

			require.NoError(t, b.client.Signal(ctx, run.WorkflowID, uuid.Nil, DoneSignal{}, nil))
			total, err := getWithin[int64](ctx, t, run)
			require.NoError(t, err)
			require.Equal(t, int64(6), total)
		})
	}
}
