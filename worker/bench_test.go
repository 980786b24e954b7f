package worker_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// BenchmarkTimerLateness measures how late durable timers fire: the time
// from a timer's due time to its TimerFired event entering the run's history,
// over b.N timers of 200ms started at once. It reports the p50 and p99 in
// milliseconds.
func BenchmarkTimerLateness(b *testing.B) {
	ctx := context.Background()
	pool := dbtest.Pool(ctx, b)
	schema := dbtest.TestSchema(ctx, b)
	names := dbschema.New(schema)
	w, err := worker.New(pool, &worker.Config{Schema: schema})
	require.NoError(b, err)
	worker.AddWorkflow(w, &NapWorkflow{})
	require.NoError(b, w.Start(ctx))
	defer func() { _ = w.Stop(ctx) }()
	c, err := client.New(pool, &client.Config{Schema: schema, PollInterval: 100 * time.Millisecond})
	require.NoError(b, err)
	defer c.Close()

	b.ResetTimer()
	runs := make([]*client.Run, b.N)
	for i := range runs {
		runs[i], err = c.Start(ctx, NapArgs{Millis: 200}, nil)
		require.NoError(b, err)
	}
	for _, run := range runs {
		getCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		_, err := client.GetResult[time.Duration](getCtx, run)
		cancel()
		require.NoError(b, err)
	}
	b.StopTimer()

	rows, err := pool.Query(ctx, "SELECT extract(epoch FROM (f.created_at - (s.attributes->>'fire_at')::timestamptz)) * 1000"+
		" FROM "+names.History+" f JOIN "+names.History+" s ON s.run_id = f.run_id AND s.event_id = f.resolves_event_id"+
		" WHERE f.type = 'TimerFired'")
	require.NoError(b, err)
	var lateness []float64
	for rows.Next() {
		var ms float64
		require.NoError(b, rows.Scan(&ms))
		lateness = append(lateness, ms)
	}
	require.NoError(b, rows.Err())
	require.Len(b, lateness, b.N)
	slices.Sort(lateness)
	b.ReportMetric(lateness[len(lateness)/2], "p50-late-ms")
	b.ReportMetric(lateness[min(len(lateness)-1, len(lateness)*99/100)], "p99-late-ms")
}

// StepArgs are the args of BenchmarkWorkflowBurst's no-op activity.
type StepArgs struct {
	N int `json:"n"`
}

func (StepArgs) Kind() string { return "bench_step" }

// StepActivity returns its input plus one.
type StepActivity struct {
	activity.Defaults[StepArgs, int]
}

func (StepActivity) Execute(_ context.Context, args StepArgs) (int, error) { return args.N + 1, nil }

// ThreeStepArgs are the args of ThreeStepWorkflow.
type ThreeStepArgs struct {
	N int `json:"n"`
}

func (ThreeStepArgs) Kind() string { return "bench_three_steps" }

// ThreeStepWorkflow runs three no-op activities in sequence.
type ThreeStepWorkflow struct {
	workflow.Defaults[ThreeStepArgs, int]
}

func (ThreeStepWorkflow) Run(ctx workflow.Context, args ThreeStepArgs) (int, error) {
	n := args.N
	for range 3 {
		var err error
		if n, err = workflow.ExecuteActivity[int](ctx, StepArgs{N: n}, nil).Get(ctx); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// BenchmarkWorkflowBurst starts WEIR_BENCH_WORKFLOWS (default 1000)
// workflows of three no-op activities at once and reports workflows per
// second (first start to last close) and the p50/p99 of start to close, as
// the run rows record it. The bench module (bench/) compares the same
// workload with peers.
func BenchmarkWorkflowBurst(b *testing.B) {
	ctx := context.Background()
	pool := dbtest.Pool(ctx, b)
	n := 1000
	var err error
	if s := os.Getenv("WEIR_BENCH_WORKFLOWS"); s != "" {
		n, err = strconv.Atoi(s)
		require.NoError(b, err)
	}
	for b.Loop() {
		schema := dbtest.TestSchema(ctx, b)
		names := dbschema.New(schema)
		config := &worker.Config{Schema: schema}
		if s := os.Getenv("WEIR_BENCH_EAGER"); s != "" {
			config.MaxEagerActivities, err = strconv.Atoi(s)
			require.NoError(b, err)
		}
		w, err := worker.New(pool, config)
		require.NoError(b, err)
		worker.AddWorkflow(w, &ThreeStepWorkflow{})
		worker.AddActivity(w, &StepActivity{})
		require.NoError(b, w.Start(ctx))
		c, err := client.New(pool, &client.Config{Schema: schema})
		require.NoError(b, err)

		begins := make([]time.Time, n)
		runIDs := make([]string, n)
		var wg sync.WaitGroup
		first := time.Now()
		for i := range n {
			wg.Go(func() {
				begins[i] = time.Now()
				run, err := c.Start(ctx, ThreeStepArgs{N: i}, nil)
				if err != nil {
					b.Error(err)
					return
				}
				runIDs[i] = run.RunID.String()
			})
		}
		wg.Wait()
		b.ReportMetric(time.Since(first).Seconds()*1000, "starts-ms")
		deadline := time.Now().Add(5 * time.Minute)
		for {
			var open int
			require.NoError(b, pool.QueryRow(ctx, "SELECT count(*) FROM "+names.Run+" WHERE state = 'running'").Scan(&open))
			if open == 0 {
				break
			}
			require.True(b, time.Now().Before(deadline), "%d runs still open", open)
			time.Sleep(20 * time.Millisecond)
		}
		var last time.Time
		latencies := make([]float64, 0, n)
		for i, id := range runIDs {
			var closed time.Time
			var result int
			require.NoError(b, pool.QueryRow(ctx, "SELECT closed_at, convert_from(result, 'UTF8')::int FROM "+names.Run+" WHERE run_id = $1 AND state = 'completed'", id).Scan(&closed, &result))
			require.Equal(b, i+3, result)
			latencies = append(latencies, float64(closed.Sub(begins[i]).Microseconds())/1000)
			if closed.After(last) {
				last = closed
			}
		}
		slices.Sort(latencies)
		b.ReportMetric(float64(n)/last.Sub(first).Seconds(), "wf/s")
		b.ReportMetric(latencies[len(latencies)/2], "p50-ms")
		b.ReportMetric(latencies[min(len(latencies)-1, len(latencies)*99/100)], "p99-ms")
		c.Close()
		require.NoError(b, w.Stop(ctx))
	}
}
