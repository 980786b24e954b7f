package client_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
)

// BenchmarkStartAllocs measures what a client allocates per start on the
// normal start path (no worker linked): 2,000 starts, 64 at a time, so
// that starts share groups as a starter process's do. It reports
// allocations and bytes allocated per start, steady whatever the
// machine's load, unlike the time.
//
//	go test -run '^$' -bench StartAllocs -benchtime 3x ./client/
func BenchmarkStartAllocs(b *testing.B) {
	ctx := context.Background()
	pool := dbtest.Pool(ctx, b)
	const n, concurrent = 2000, 64
	var allocs, bytes float64
	for b.Loop() {
		b.StopTimer()
		c, err := client.New(pool, &client.Config{Schema: dbtest.TestSchema(ctx, b)})
		require.NoError(b, err)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for k := 0; k < n; k += concurrent {
			_, errs := burst(min(concurrent, n-k), func(i int) (*client.Run, error) {
				return c.Start(ctx, orderArgs{ID: fmt.Sprint(k + i), Cents: 7}, nil)
			})
			for _, err := range errs {
				require.NoError(b, err)
			}
		}
		b.StopTimer()
		runtime.ReadMemStats(&after)
		c.Close()
		allocs += float64(after.Mallocs-before.Mallocs) / n
		bytes += float64(after.TotalAlloc-before.TotalAlloc) / n
		b.StartTimer()
	}
	b.ReportMetric(allocs/float64(b.N), "allocs/start")
	b.ReportMetric(bytes/float64(b.N), "B/start")
}
