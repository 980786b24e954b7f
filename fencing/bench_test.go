package fencing_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
)

// BenchmarkThroughput burns down the same number of no-op jobs through plain
// River (riverpgxv5, River's schema only) and through the fencing driver (the
// fencing migration installed, plugin first), on the same server in one run,
// alternating rounds, and reports both throughputs and their ratio (best
// round of each). Jobs per round: WEIR_BENCH_JOBS (default 20000). With
// WEIR_BENCH_MATRIX set it instead runs the four combinations of driver
// (plain, fencing) and schema (River's only, fencing migration installed),
// which splits the cost between the database triggers and the driver.
//
//	go test -run '^$' -bench Throughput -benchtime 1x ./fencing/
func BenchmarkThroughput(b *testing.B) {
	ctx := b.Context()
	pool := dbtest.Pool(ctx, b)
	jobs := 20_000
	if s := os.Getenv("WEIR_BENCH_JOBS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(b, err)
		jobs = n
	}
	const rounds = 3

	for b.Loop() {
		if os.Getenv("WEIR_BENCH_MATRIX") != "" {
			for _, v := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
				b.Logf("driver fenced=%v schema migrated=%v: %.0f jobs/s", v[0], v[1], burnDown2(ctx, b, pool, jobs, v[0], v[1]))
			}
			continue
		}
		var best [2]float64
		for round := range rounds {
			for variant, fenced := range []bool{false, true} {
				rate := burnDown(ctx, b, pool, jobs, fenced)
				best[variant] = max(best[variant], rate)
				b.Logf("round %d: %s %.0f jobs/s", round+1, map[bool]string{false: "raw", true: "fenced"}[fenced], rate)
			}
		}
		ratio := best[1] / best[0]
		b.ReportMetric(best[0], "raw_jobs/s")
		b.ReportMetric(best[1], "fenced_jobs/s")
		b.ReportMetric(ratio, "fenced/raw")
		fmt.Printf("throughput over %d no-op jobs: raw River %.0f jobs/s, fencing driver %.0f jobs/s, ratio %.3f (target >= 0.90)\n",
			jobs, best[0], best[1], ratio)
	}
}

func burnDown(ctx context.Context, b *testing.B, pool *pgxpool.Pool, jobs int, fenced bool) float64 {
	return burnDown2(ctx, b, pool, jobs, fenced, fenced)
}

func burnDown2(ctx context.Context, b *testing.B, pool *pgxpool.Pool, jobs int, fenced, migrated bool) float64 {
	b.Helper()
	schema := dbtest.EmptySchema(ctx, b)
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(b, err)
	opts := &migrations.UpOpts{Line: migrations.LineMain}
	if migrated {
		opts = nil
	}
	_, err = migrator.Up(ctx, opts)
	require.NoError(b, err)

	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	config := &river.Config{
		FetchCooldown:     2 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1000}},
		Schema:            schema,
		TestOnly:          true,
		Workers:           workers,
	}
	var driver riverdriver.Driver[pgx.Tx] = riverpgxv5.New(pool)
	if fenced {
		fencingDriver, err := fencing.NewDriver(pool, nil)
		require.NoError(b, err)
		config.Plugins = []rivertype.Plugin{fencingDriver.Plugin()}
		driver = fencingDriver
	}
	client, err := river.NewClient(driver, config)
	require.NoError(b, err)

	const batch = 5000
	for inserted := 0; inserted < jobs; inserted += batch {
		params := make([]river.InsertManyParams, min(batch, jobs-inserted))
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{}}
		}
		_, err := client.InsertManyFast(ctx, params)
		require.NoError(b, err)
	}

	completed, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: jobs + 100, Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	start := time.Now()
	require.NoError(b, client.Start(ctx))
	timeout := time.After(5 * time.Minute)
	for range jobs {
		select {
		case <-completed:
		case <-timeout:
			b.Fatal("burn-down timed out")
		}
	}
	elapsed := time.Since(start)
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	require.NoError(b, client.Stop(stopCtx))
	return float64(jobs) / elapsed.Seconds()
}
