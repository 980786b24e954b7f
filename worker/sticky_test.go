package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type StickyArgs struct {
	Key     string `json:"key"`
	Signals int    `json:"signals"` // "add" signals to take after the activities
	Steps   int    `json:"steps"`   // sequential activities
	Sleep   bool   `json:"sleep"`   // a durable sleep after each activity
}

func (StickyArgs) Kind() string { return "sticky" }

// StickyWorkflow runs Steps activities one after another, then adds up
// Signals "add" signals, and counts how many times its code started from
// the beginning (a replay, or the run's first task) per Key.
type StickyWorkflow struct {
	workflow.Defaults[StickyArgs, int]

	mu      sync.Mutex
	starts  map[string]int
	unwound map[string]int // code that returned or was unwound
}

func (w *StickyWorkflow) Run(ctx workflow.Context, args StickyArgs) (int, error) {
	w.mu.Lock()
	w.starts[args.Key]++
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.unwound[args.Key]++
		w.mu.Unlock()
	}()
	n := 0
	for range args.Steps {
		var err error
		if n, err = workflow.ExecuteActivity[int](ctx, StepArgs{N: n}, nil).Get(ctx); err != nil {
			return 0, err
		}
		if args.Sleep {
			if err := workflow.Sleep(ctx, time.Millisecond); err != nil {
				return 0, err
			}
		}
	}
	adds := workflow.GetSignalChannel[AddSignal](ctx)
	for range args.Signals {
		add, err := adds.Receive(ctx)
		if err != nil {
			return 0, err
		}
		n += add.N
	}
	return n, nil
}

func (w *StickyWorkflow) startsOf(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.starts[key]
}

// live is how many copies of key's code are running or blocked.
func (w *StickyWorkflow) live(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.starts[key] - w.unwound[key]
}

func newStickyWorkflow() *StickyWorkflow {
	return &StickyWorkflow{starts: map[string]int{}, unwound: map[string]int{}}
}

// TestStickyExecution: a worker keeps a run's workflow code between its
// tasks (Config.MaxCachedRuns), so a run it advances task after task runs
// its code once instead of replaying it at every task; with the cache off
// it replays at every task; and a run that another worker moved in between
// is replayed, not continued from code that missed what that worker did.
func TestStickyExecution(t *testing.T) {
	t.Parallel()

	// started starts a worker serving wf and StepActivity.
	started := func(ctx context.Context, t *testing.T, b *testBundle, wf *StickyWorkflow, config *worker.Config) *worker.Worker {
		t.Helper()
		config.Schema = b.schema
		w, err := worker.New(b.pool, config)
		require.NoError(t, err)
		worker.AddWorkflow(w, wf)
		worker.AddActivity(w, &StepActivity{})
		require.NoError(t, w.Start(ctx))
		return w
	}
	// start is started, stopped when the test ends.
	start := func(ctx context.Context, t *testing.T, b *testBundle, wf *StickyWorkflow, config *worker.Config) {
		t.Helper()
		w := started(ctx, t, b, wf, config)
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(stopCtx))
		})
	}

	for _, c := range []struct {
		name   string
		config worker.Config
		args   StickyArgs
		starts int // times the code starts from the beginning
		why    string
	}{
		{"CodeRunsOnceAcrossTasks", worker.Config{}, StickyArgs{Key: "a", Steps: 10}, 1,
			"11 tasks, and the code started once: no task replayed it"},
		// Each activity's outcome starts a timer, so it leaves its group of
		// outcomes and commits alone, taking what it decided in the group
		// (the code has run ahead of history there); each timer's task
		// continues the code.
		{"StepsThatCommitAloneKeepTheCode", worker.Config{}, StickyArgs{Key: "a", Steps: 5, Sleep: true}, 1,
			"11 tasks, and the code started once"},
		{"CacheOffReplaysEveryTask", worker.Config{MaxCachedRuns: -1}, StickyArgs{Key: "a", Steps: 10}, 11,
			"every one of the 11 tasks replays the code"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := setup(ctx, t)
			wf := newStickyWorkflow()
			start(ctx, t, b, wf, &c.config)

			run, err := b.client.Start(ctx, c.args, nil)
			require.NoError(t, err)
			got, err := getWithin[int](ctx, t, run)
			require.NoError(t, err)
			require.Equal(t, c.args.Steps, got)
			require.Equal(t, c.starts, wf.startsOf("a"), c.why)
			requireHistoryWellFormed(ctx, t, b, run)
		})
	}

	t.Run("StopUnwindsTheCodeItKept", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		wf := newStickyWorkflow()
		w := started(ctx, t, b, wf, &worker.Config{})

		// The run waits for a signal after its activities: its code stays
		// in the worker, blocked, between tasks.
		run, err := b.client.Start(ctx, StickyArgs{Key: "a", Steps: 2, Signals: 1}, nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var open bool
			err := b.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+b.names.History+" WHERE run_id = $1 AND type = 'ActivityCompleted' AND event_id > 5)", run.RunID).Scan(&open)
			return err == nil && open
		}, 30*time.Second, 10*time.Millisecond, "the run reached its signal")
		require.Eventually(t, func() bool { return wf.live("a") == 1 }, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, 1, wf.startsOf("a"))

		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(stopCtx))
		require.Zero(t, wf.live("a"), "the code kept for the run was unwound when the worker stopped")
	})

	t.Run("RunMovedByAnotherWorkerIsReplayed", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		// Two workers take the run's signal tasks as River hands them out:
		// each keeps the code of the tasks it ran, and a worker whose last
		// task of the run is not the run's last must not continue it.
		wf := newStickyWorkflow()
		start(ctx, t, b, wf, &worker.Config{})
		start(ctx, t, b, wf, &worker.Config{})

		const signals = 30
		runs := make([]*client.Run, 3)
		want := 0
		for i := range runs {
			run, err := b.client.Start(ctx, StickyArgs{Key: fmt.Sprint(i), Steps: 2, Signals: signals}, nil)
			require.NoError(t, err)
			runs[i] = run
		}
		for n := 1; n <= signals; n++ {
			want += n
			for i := range runs {
				require.NoError(t, b.client.Signal(ctx, runs[i].WorkflowID, runs[i].RunID, AddSignal{N: n}, nil))
			}
			time.Sleep(5 * time.Millisecond) // one task per signal, most of the time
		}
		replayed := 0
		for i, run := range runs {
			got, err := getWithin[int](ctx, t, run)
			require.NoError(t, err)
			require.Equal(t, 2+want, got, "run %d", i)
			requireHistoryWellFormed(ctx, t, b, run)
			replayed += wf.startsOf(fmt.Sprint(i)) - 1
		}
		t.Logf("replays over %d runs of about %d tasks each: %d", len(runs), signals+3, replayed)
		// Both happened: a worker replayed runs the other had moved, and
		// continued runs it had moved last. (A worker that continued code
		// past history it did not decide would fail the task, refused by the
		// cache's append point, then by Session.Continue; historyCache's own
		// test checks the first.)
		require.Positive(t, replayed, "the two workers never took turns on a run")
		require.Less(t, replayed, len(runs)*(signals+3), "no task continued a run's code")
	})
}
