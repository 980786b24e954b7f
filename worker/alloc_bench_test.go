package worker_test

import (
	"context"
	"os"
	"runtime"
	"runtime/metrics"
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
// workflow (steady whatever the machine's load, unlike the time), the most
// heap the garbage collector found live during the run, and the garbage
// collector's CPU, per workflow and as a share of the process's CPU
// (indicative: both follow the load), the WAL Postgres wrote per workflow
// and the metadata bytes of an activity's job. WEIR_BENCH_CACHE sets
// Config.MaxCachedRuns.
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
	var allocs, bytes, live, gcSec, cpuSec, wal, metadata float64
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
		var lsn string
		require.NoError(b, pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn))
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
			time.Sleep(50 * time.Millisecond)
		}

		b.StopTimer()
		after, gcAfter := readAllocs()
		require.NoError(b, w.Stop(ctx))
		var walBytes, metadataBytes float64
		require.NoError(b, pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)", lsn).Scan(&walBytes))
		require.NoError(b, pool.QueryRow(ctx, "SELECT coalesce(avg(octet_length(metadata::text)), 0) FROM "+names.RiverJob+
			" WHERE kind = $1", StepArgs{}.Kind()).Scan(&metadataBytes))
		wal += walBytes / float64(n)
		metadata += metadataBytes
		allocs += float64(after.Mallocs-before.Mallocs) / float64(n)
		bytes += float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
		gcSec += gcAfter[0] - gcBefore[0]
		cpuSec += (gcAfter[1] - gcAfter[2]) - (gcBefore[1] - gcBefore[2])
		b.StartTimer()
	}
	b.ReportMetric(allocs/float64(b.N), "allocs/wf")
	b.ReportMetric(bytes/float64(b.N), "B/wf")
	b.ReportMetric(live/(1<<20), "heap-MiB")
	b.ReportMetric(wal/float64(b.N), "wal-B/wf")
	b.ReportMetric(metadata/float64(b.N), "metadata-B/activity")
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
