package replay_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/gopool"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

// BenchmarkExecute measures the last workflow task of a run of n sequential
// activities (3 events each): the whole history is replayed, then the
// workflow completes.
func BenchmarkExecute(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("SequentialActivities=%d", n), func(b *testing.B) {
			starts := 0
			def := sequentialDefinition(n, &starts, nil)
			r := newRun(b, def, OrderArgs{ID: "o-1"})
			out := r.task()
			for range n - 1 {
				out = r.task(completed(b, out.Activities[0].EventID, 1))
			}
			params := &replay.ExecuteParams{
				History: r.history,
				Inputs:  []history.Event{completed(b, out.Activities[0].EventID, 1)},
				Now:     taskTime(n + 1),
			}
			kept := engine.NewFacts() // the history's attributes, decoded by an earlier task (a worker's cached run)
			for _, decode := range []func(history.Event) (history.Attributes, error){nil, kept.Decode} {
				b.Run(fmt.Sprintf("KeptAttributes=%t", decode != nil), func(b *testing.B) {
					params.Decode = decode
					b.ReportAllocs()
					for b.Loop() {
						out, err := replay.Execute(context.Background(), def, params)
						require.NoError(b, err)
						require.True(b, out.Completed)
					}
				})
			}
		})
	}
}

// threeSteps is the benchmarks' workflow: three no-op activities in
// sequence, each on the previous result.
func threeSteps(ctx workflow.Context, args OrderArgs) (int, error) {
	v := 0
	for step := 1; step <= 3; step++ {
		var err error
		if v, err = workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID, Step: v}, nil).Get(ctx); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// threeStepTasks returns the params of the four tasks of a run of
// threeSteps, each with the history its predecessors committed.
func threeStepTasks(b *testing.B, def *replay.Definition) []*replay.ExecuteParams {
	r := newRun(b, def, OrderArgs{ID: "o-1"})
	r.replayOnly = true
	var tasks []*replay.ExecuteParams
	var inputs []history.Event
	for i := range 4 {
		tasks = append(tasks, &replay.ExecuteParams{
			History: r.history, Inputs: inputs, Now: taskTime(i + 1), Info: replay.Info{TaskAttempt: 1},
		})
		out := r.task(inputs...)
		if i < 3 {
			inputs = []history.Event{completed(b, out.Activities[0].EventID, i+1)}
		}
	}
	return tasks
}

// BenchmarkThreeSteps measures a whole run of threeSteps (four workflow
// tasks): Sticky keeps the run's code in a Session between tasks, as a
// worker does with its cache, and Replay executes each task from the
// history, as a worker without the run cached does.
func BenchmarkThreeSteps(b *testing.B) {
	def := define(threeSteps)
	tasks := threeStepTasks(b, def)
	pool := gopool.New(time.Minute)
	defer pool.Close()
	ctx := context.Background()
	b.Run("Sticky", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			params := *tasks[0]
			params.Go = pool.Go
			_, s, err := replay.Start(ctx, def, &params)
			require.NoError(b, err)
			for _, p := range tasks[1:] {
				_, err := s.Continue(ctx, p)
				require.NoError(b, err)
			}
		}
	})
	b.Run("Replay", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, p := range tasks {
				params := *p
				params.Go = pool.Go
				_, err := replay.Execute(ctx, def, &params)
				require.NoError(b, err)
			}
		}
	})
}

// BenchmarkCachedRuns reports what a run's parked code holds between
// its tasks (a worker's cached run): its goroutines' stacks, which the
// garbage collector scans, and its heap.
func BenchmarkCachedRuns(b *testing.B) {
	def := define(threeSteps)
	tasks := threeStepTasks(b, def)
	const n = 1000
	sessions := make([]*replay.CachedRun, 0, n)
	var before, after runtime.MemStats
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		goroutines := runtime.NumGoroutine()
		for range n {
			_, s, err := replay.Start(context.Background(), def, tasks[1])
			require.NoError(b, err)
			sessions = append(sessions, s)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/n, "goroutines/session")
		b.ReportMetric(float64(after.StackInuse-before.StackInuse)/n, "stack-B/session")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/session")
		for _, s := range sessions {
			s.Close()
		}
		clear(sessions)
		sessions = sessions[:0]
	}
}
