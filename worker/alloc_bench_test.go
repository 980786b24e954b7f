package worker_test

import (
	"context"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/worker"
)

// BenchmarkNormalStartAllocs measures what the worker allocates per
// workflow on the normal start path: WEIR_BENCH_WORKFLOWS (default 2,000)
// workflows of three no-op activities are started with client.Start while
// no worker runs, then a worker is started and runs them all. Only the
// worker's run is measured; it reports allocations and bytes allocated per
// workflow (steady whatever the machine's load, unlike the time), the heap
// the garbage collector found live at most during the run, and the share of the process's CPU the
// garbage collector took (indicative: it follows the load).
//
//	go test -run '^$' -bench NormalStartAllocs -benchtime 3x ./worker/
func BenchmarkNormalStartAllocs(b *testing.B) {
	ctx := context.Background()
	pool := dbtest.Pool(ctx, b)
	n := 2000
	if s := os.Getenv("WEIR_BENCH_WORKFLOWS"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(b, err)
	}
	var allocs, bytes, live, gcSec, cpuSec float64
	for b.Loop() {
		b.StopTimer()
		schema := dbtest.TestSchema(ctx, b)
		names := dbschema.New(schema)
		c, err := client.New(pool, &client.Config{Schema: schema})
		require.NoError(b, err)
		for i := range n {
			_, err := c.Start(ctx, ThreeStepArgs{N: i}, nil)
			require.NoError(b, err)
		}
		c.Close()
		config := &worker.Config{Schema: schema}
		if s := os.Getenv("WEIR_BENCH_CACHE"); s != "" {
			config.MaxCachedRuns, err = strconv.Atoi(s)
			require.NoError(b, err)
		}
		w, err := worker.New(pool, config)
		require.NoError(b, err)
		worker.AddWorkflow(w, &ThreeStepWorkflow{})
		worker.AddActivity(w, &StepActivity{})
		runtime.GC()
		before, gcBefore := readAllocs()
		io0, _ := os.ReadFile("/proc/self/io")
		b.StartTimer()

		require.NoError(b, w.Start(ctx))
		deadline := time.Now().Add(5 * time.Minute)
		for {
			var open int
			require.NoError(b, pool.QueryRow(ctx, "SELECT count(*) FROM "+names.Run+" WHERE state = 'running'").Scan(&open))
			if open == 0 {
				break
			}
			require.True(b, time.Now().Before(deadline), "%d runs still open", open)
			live = max(live, liveHeap())
			if os.Getenv("WEIR_BENCH_GCDEBUG") != "" {
				ss := []metrics.Sample{{Name: "/sched/goroutines:goroutines"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/heap:bytes"}, {Name: "/gc/heap/goal:bytes"}}
				metrics.Read(ss)
				if open < n*3/4 && os.Getenv("WEIR_BENCH_GDUMP") != "" {
					f, _ := os.Create(os.Getenv("WEIR_BENCH_GDUMP"))
					_ = pprof.Lookup("goroutine").WriteTo(f, 1)
					f.Close()
					os.Setenv("WEIR_BENCH_GDUMP", "")
				}
				b.Logf("open %d g %d stack %d heap %d goal %d", open, ss[0].Value.Uint64(), ss[1].Value.Uint64(), ss[2].Value.Uint64(), ss[3].Value.Uint64())
			}
			time.Sleep(50 * time.Millisecond)
		}

		b.StopTimer()
		after, gcAfter := readAllocs()
		io1, _ := os.ReadFile("/proc/self/io")
		if os.Getenv("WEIR_BENCH_GCDEBUG") != "" {
			b.Logf("io before %s after %s", io0, io1)
		}
		require.NoError(b, w.Stop(ctx))
		if os.Getenv("WEIR_BENCH_GCDEBUG") != "" {
			for _, q := range []string{"SELECT type || ' ' || count(*) || ' ' || avg(octet_length(attributes::text))::int FROM " + names.Event + " GROUP BY type",
				"SELECT kind || ' ' || count(*) || ' args ' || avg(octet_length(args::text))::int || ' meta ' || avg(octet_length(metadata::text))::int || ' ' || max(metadata::text) FROM " + names.RiverJob + " GROUP BY kind",
				"SELECT 'run ' || avg(octet_length(r::text))::int || ' ' || max(r::text) FROM " + names.Run + " r"} {
				rows, err := pool.Query(ctx, q)
				require.NoError(b, err)
				for rows.Next() {
					var line string
					require.NoError(b, rows.Scan(&line))
					b.Log(line)
				}
			}
			ss := []metrics.Sample{{Name: "/cpu/classes/gc/mark/assist:cpu-seconds"}, {Name: "/cpu/classes/gc/mark/dedicated:cpu-seconds"}, {Name: "/cpu/classes/gc/mark/idle:cpu-seconds"}, {Name: "/cpu/classes/gc/pause:cpu-seconds"}, {Name: "/gc/cycles/total:gc-cycles"}, {Name: "/sched/goroutines:goroutines"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/heap:bytes"}}
			metrics.Read(ss)
			for _, s := range ss {
				b.Logf("%s %v", s.Name, s.Value)
			}
		}
		allocs += float64(after.Mallocs-before.Mallocs) / float64(n)
		bytes += float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
		gcSec += gcAfter[0] - gcBefore[0]
		cpuSec += (gcAfter[1] - gcAfter[2]) - (gcBefore[1] - gcBefore[2])
		b.StartTimer()
	}
	b.ReportMetric(allocs/float64(b.N), "allocs/wf")
	b.ReportMetric(bytes/float64(b.N), "B/wf")
	b.ReportMetric(live/(1<<20), "heap-MiB")
	b.ReportMetric(100*gcSec/cpuSec, "gc-%")
	b.ReportMetric(1e6*gcSec/float64(b.N*n), "gc-µs/wf")
	b.ReportMetric(1e6*cpuSec/float64(b.N*n), "cpu-µs/wf")
}

// readAllocs reads the allocation totals and the runtime's CPU estimates
// (GC, total, idle; seconds).
func readAllocs() (runtime.MemStats, [3]float64) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	samples := []metrics.Sample{
		{Name: "/cpu/classes/gc/total:cpu-seconds"},
		{Name: "/cpu/classes/total:cpu-seconds"},
		{Name: "/cpu/classes/idle:cpu-seconds"},
	}
	metrics.Read(samples)
	return m, [3]float64{samples[0].Value.Float64(), samples[1].Value.Float64(), samples[2].Value.Float64()}
}

// liveHeap is the heap the last GC found live, in bytes.
func liveHeap() float64 {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	return float64(sample[0].Value.Uint64())
}
