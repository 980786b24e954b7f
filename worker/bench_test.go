package worker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/worker"
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
		" FROM "+names.Event+" f JOIN "+names.Event+" s ON s.run_id = f.run_id AND s.event_id = f.resolves_event_id"+
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
