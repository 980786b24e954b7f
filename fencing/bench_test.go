package fencing_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
)

// BenchmarkThroughput burns down the same number of no-op jobs through plain
// River (riverpgxv5, River's schema only) and through the fencing driver (the
// fencing migration installed, plugin first), on the same server in one run,
// alternating rounds, and reports both throughputs and their ratio (best
// round of each). Jobs per round: WEIR_BENCH_JOBS (default 100000). With
// WEIR_BENCH_MATRIX set it instead runs the four combinations of driver
// (plain, fencing) and schema (River's only, fencing migration installed),
// which splits the cost between the database triggers and the driver.
//
// On Linux it also reports the CPU time each variant spent per job (mean
// over the rounds): this process's, and, when the server runs on this
// machine, that of every postgres process. At saturation the CPU ratio
// follows the throughput ratio with less spread from round to round, which
// makes it the steadier figure for comparing two builds in one run (the
// machine's own cost per job drifts between runs).
//
//	go test -run '^$' -bench Throughput -benchtime 1x ./fencing/
func BenchmarkThroughput(b *testing.B) {
	ctx := b.Context()
	pool := dbtest.Pool(ctx, b)
	// 100k, not fewer: a 20k burn-down lasts about a second, and start-up
	// and the last batches weigh in it (its ratio spread 0.85–0.91).
	jobs := 100_000
	if s := os.Getenv("WEIR_BENCH_JOBS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(b, err)
		jobs = n
	}
	const rounds = 3

	for b.Loop() {
		if os.Getenv("WEIR_BENCH_MATRIX") != "" {
			for _, v := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
				res := burnDown2(ctx, b, pool, newCPUClock(pool), jobs, v[0], v[1])
				b.Logf("driver fenced=%v schema migrated=%v: %.0f jobs/s, %.1f µs CPU per job", v[0], v[1], res.rate, float64(res.cpu.Nanoseconds())/1e3)
			}
			continue
		}
		clock := newCPUClock(pool)
		var (
			best [2]float64
			cpu  [2]time.Duration // per job, summed over the rounds
		)
		for round := range rounds {
			for variant, fenced := range []bool{false, true} {
				res := burnDown(ctx, b, pool, clock, jobs, fenced)
				best[variant] = max(best[variant], res.rate)
				cpu[variant] += res.cpu
				b.Logf("round %d: %s %.0f jobs/s, %.1f µs CPU per job", round+1, map[bool]string{false: "raw", true: "fenced"}[fenced],
					res.rate, float64(res.cpu.Nanoseconds())/1e3)
			}
		}
		ratio := best[1] / best[0]
		b.ReportMetric(best[0], "raw_jobs/s")
		b.ReportMetric(best[1], "fenced_jobs/s")
		b.ReportMetric(ratio, "fenced/raw")
		fmt.Printf("throughput over %d no-op jobs: raw River %.0f jobs/s, fencing driver %.0f jobs/s, ratio %.3f (target >= 0.90)\n",
			jobs, best[0], best[1], ratio)
		if clock.ok() {
			perJob := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / rounds }
			b.ReportMetric(perJob(cpu[0]), "raw_cpu_us/job")
			b.ReportMetric(perJob(cpu[1]), "fenced_cpu_us/job")
			fmt.Printf("CPU per job (%s, mean of %d rounds): raw River %.1f µs, fencing driver %.1f µs, raw/fenced %.3f\n",
				clock.what(), rounds, perJob(cpu[0]), perJob(cpu[1]), float64(cpu[0])/float64(cpu[1]))
		}
	}
}

// burnResult is one burn-down: jobs per second, and the CPU time spent per
// job while it ran (zero when the clock cannot tell).
type burnResult struct {
	cpu  time.Duration
	rate float64
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
func (c cpuClock) read() time.Duration {
	ticks := procTicks("/proc/self/stat", false)
	if c.postgres {
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, stat := range stats {
			ticks += procTicks(stat, true)
		}
	}
	// The kernel counts in USER_HZ, 100 on every Linux architecture Go runs on.
	return time.Duration(ticks) * (time.Second / 100)
}

// procTicks reads a /proc/PID/stat: its utime and stime (and cutime and
// cstime with children), or 0 for a process that is gone or, with postgres
// set, is not a postgres process.
func procTicks(path string, postgres bool) int64 {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	stat := string(raw)
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return 0
	}
	if postgres && !strings.HasPrefix(stat[open+1:end], "postgres") {
		return 0
	}
	// After the command come fields 3 (state) onwards, field N at N-3:
	// utime and stime are fields 14 and 15, cutime and cstime 16 and 17.
	fields := strings.Fields(stat[end+1:])
	n := 2
	if postgres {
		n = 4
	}
	if len(fields) < 11+n {
		return 0
	}
	var ticks int64
	for _, field := range fields[11 : 11+n] {
		t, _ := strconv.ParseInt(field, 10, 64)
		ticks += t
	}
	return ticks
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
	cpu := clock.read() - cpuStart
	stopCtx, stopCancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer stopCancel()
	require.NoError(b, client.Stop(stopCtx))
	return burnResult{cpu: cpu / time.Duration(jobs), rate: float64(jobs) / elapsed.Seconds()}
}
