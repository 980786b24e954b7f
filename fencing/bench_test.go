package fencing_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
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
	"github.com/weirhq/weir/internal/cputime"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
)

// BenchmarkThroughput burns down the same number of no-op jobs through plain
// River (riverpgxv5, River's schema only) and through the fencing driver (the
// fencing migration installed, plugin first), on the same server in one run,
// in rounds of one burn-down each, and reports both throughputs and their
// ratio. Jobs per burn-down: WEIR_BENCH_JOBS (default 100000); rounds:
// WEIR_BENCH_ROUNDS (default 6). With WEIR_BENCH_MATRIX set it instead runs
// the four combinations of driver (plain, fencing) and schema (River's only,
// fencing migration installed), which splits the cost between the database
// triggers and the driver.
//
// A machine's speed can drift from minute to minute (a shared VM), so the
// benchmark pairs the two variants: each round runs both back to back,
// which goes first alternates from round to round, and the
// ratio reported as fenced/raw is the median of the rounds' ratios. The best
// round of each variant and their ratio are printed beside it. Each round's
// tables are dropped when it ends, so that autovacuum does not tax a later
// round with them.
//
// On Linux it also reports the CPU time each variant spent per job (mean
// over the rounds): this process's, and, when the server runs on this
// machine, that of every postgres process. At saturation the CPU ratio
// follows the throughput ratio with less spread from round to round, which
// makes it the steadier figure for comparing two builds in one run.
//
//	go test -run '^$' -bench Throughput -benchtime 1x ./fencing/
func BenchmarkThroughput(b *testing.B) {
	ctx := b.Context()
	pool := dbtest.Pool(ctx, b)
	// 100k, not fewer: a 20k burn-down lasts about a second, and start-up
	// and the last batches weigh in it (its ratio spread 0.85–0.91).
	jobs := envInt(b, "WEIR_BENCH_JOBS", 100_000)
	rounds := envInt(b, "WEIR_BENCH_ROUNDS", 6)

	for b.Loop() {
		if os.Getenv("WEIR_BENCH_MATRIX") != "" {
			for _, v := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
				res := burnDown2(ctx, b, pool, newCPUClock(pool), jobs, v[0], v[1])
				b.Logf("driver fenced=%v schema migrated=%v: %.0f jobs/s, CPU per job %s", v[0], v[1], res.rate, res.cpu.micros())
			}
			continue
		}
		clock := newCPUClock(pool)
		var (
			best   [2]float64
			cpu    [2]cpuTime // per job, summed over the rounds
			ratios []float64
		)
		for round := range rounds {
			var rate [2]float64
			for i := range 2 {
				variant := (i + round) % 2 // 0 raw, 1 fenced; who goes first alternates
				res := burnDown(ctx, b, pool, clock, jobs, variant == 1)
				rate[variant] = res.rate
				best[variant] = max(best[variant], res.rate)
				cpu[variant] = cpu[variant].add(res.cpu)
				b.Logf("round %d: %s %.0f jobs/s, CPU per job %s", round+1, [2]string{"raw", "fenced"}[variant],
					res.rate, res.cpu.micros())
			}
			ratios = append(ratios, rate[1]/rate[0])
		}
		ratio := median(ratios)
		b.ReportMetric(best[0], "raw_jobs/s")
		b.ReportMetric(best[1], "fenced_jobs/s")
		b.ReportMetric(ratio, "fenced/raw")
		fmt.Printf("throughput over %d no-op jobs, %d paired rounds: fenced/raw median %.3f [%.3f–%.3f] (target >= 0.90); best rounds: raw River %.0f jobs/s, fencing driver %.0f jobs/s, ratio %.3f\n",
			jobs, rounds, ratio, slices.Min(ratios), slices.Max(ratios), best[0], best[1], best[1]/best[0])
		if clock.ok() {
			raw, fenced := cpu[0].div(rounds), cpu[1].div(rounds)
			perJob := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
			b.ReportMetric(perJob(raw.total()), "raw_cpu_us/job")
			b.ReportMetric(perJob(fenced.total()), "fenced_cpu_us/job")
			fmt.Printf("CPU per job (%s, mean of %d rounds): raw River %s, fencing driver %s, raw/fenced %.3f\n",
				clock.what(), rounds, raw.micros(), fenced.micros(), float64(raw.total())/float64(fenced.total()))
		}
	}
}

// envInt reads a positive integer setting from the environment.
func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	require.NoError(b, err)
	require.Positive(b, n, name)
	return n
}

// median returns the median of xs (the mean of the middle two for an even
// count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// burnResult is one burn-down: jobs per second, and the CPU time spent per
// job while it ran (zero when the clock cannot tell).
type burnResult struct {
	cpu  cpuTime
	rate float64
}

// cpuTime is CPU time spent: by this process (the River client, the fencing
// driver) and by Postgres.
type cpuTime struct {
	self, postgres time.Duration
}

func (t cpuTime) total() time.Duration { return t.self + t.postgres }

func (t cpuTime) add(u cpuTime) cpuTime {
	return cpuTime{self: t.self + u.self, postgres: t.postgres + u.postgres}
}

func (t cpuTime) sub(u cpuTime) cpuTime {
	return cpuTime{self: t.self - u.self, postgres: t.postgres - u.postgres}
}

func (t cpuTime) div(n int) cpuTime {
	return cpuTime{self: t.self / time.Duration(n), postgres: t.postgres / time.Duration(n)}
}

// micros formats the CPU time per job ("97.1 µs (this process 31.0,
// Postgres 66.1)").
func (t cpuTime) micros() string {
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	return fmt.Sprintf("%.1f µs (this process %.1f, Postgres %.1f)", us(t.total()), us(t.self), us(t.postgres))
}

// cpuClock reads, from /proc (Linux), the CPU time used by this process and,
// when the test server runs on this machine, by every postgres process
// (with the children they reaped, so that backends which exit during a
// burn-down still count).
type cpuClock struct {
	postgres bool
}

func newCPUClock(pool *pgxpool.Pool) cpuClock {
	host := pool.Config().ConnConfig.Host
	return cpuClock{postgres: host == "localhost" || strings.HasPrefix(host, "127.") || host == "::1" || strings.HasPrefix(host, "/")}
}

func (c cpuClock) ok() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

func (c cpuClock) what() string {
	if c.postgres {
		return "this process and Postgres"
	}
	return "this process only: the server is not on this machine"
}

// read returns the CPU time used so far, or zero when /proc cannot tell.
func (c cpuClock) read() cpuTime {
	t := cpuTime{self: cputime.Process()}
	if c.postgres {
		t.postgres = cputime.Postgres()
	}
	return t
}

func burnDown(ctx context.Context, b *testing.B, pool *pgxpool.Pool, clock cpuClock, jobs int, fenced bool) burnResult {
	return burnDown2(ctx, b, pool, clock, jobs, fenced, fenced)
}

func burnDown2(ctx context.Context, b *testing.B, pool *pgxpool.Pool, clock cpuClock, jobs int, fenced, migrated bool) burnResult {
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
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: envInt(b, "WEIR_BENCH_MAX_WORKERS", 1000)}},
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
	// Both variants start from clean buffers: the migration's and the
	// inserts' dirty pages are not written during the burn-down.
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		b.Logf("no checkpoint before the burn-down: %v", err)
	}
	cpuStart := clock.read()
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
	cpu := clock.read().sub(cpuStart)
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	require.NoError(b, client.Stop(stopCtx))
	// Drop the round's tables now, not when the benchmark ends: autovacuum
	// would otherwise process their 100k updated rows during a later round
	// and tax whichever variant runs then.
	_, err = pool.Exec(stopCtx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	require.NoError(b, err)
	return burnResult{cpu: cpu.div(jobs), rate: float64(jobs) / elapsed.Seconds()}
}
