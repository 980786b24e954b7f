package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "proc" { // a contender's process of TestRunScale
		main()
		os.Exit(0)
	}
	dbtest.Main(m)
}

func TestPercentile(t *testing.T) {
	t.Parallel()

	values := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tt := range []struct {
		p    float64
		want float64
	}{
		{p: 1, want: 1},
		{p: 10, want: 1},
		{p: 11, want: 2},
		{p: 50, want: 5},
		{p: 51, want: 6},
		{p: 99, want: 10},
		{p: 100, want: 10},
	} {
		require.InDelta(t, tt.want, percentile(values, tt.p), 0, "p%v", tt.p)
	}
	require.Equal(t, []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}, values, "percentile must not sort its input")
	require.True(t, math.IsNaN(percentile(nil, 50)))
	require.InDelta(t, 42.0, percentile([]float64{42}, 99), 0)
}

func TestCompletionPollGap(t *testing.T) {
	t.Parallel()
	require.Equal(t, completionPollInterval, completionPollGap(0), "the first polls are quick: a short burst ends on time")
	require.Equal(t, 50*time.Millisecond, completionPollGap(time.Second), "a twentieth of the wait")
	require.Equal(t, completionPollMax, completionPollGap(time.Hour), "never later than completionPollMax")
	// Polls over a 20 s wait: every count reads all completed rows, so their
	// number must not grow with the wait as 20 s / completionPollInterval.
	polls := 0
	for waited := time.Duration(0); waited < 20*time.Second; waited += completionPollGap(waited) {
		polls++
	}
	require.Less(t, polls, 200)
}

func TestMedianOf(t *testing.T) {
	t.Parallel()

	require.InDelta(t, 2.0, medianOf([]float64{3, 1, 2}), 0)
	require.InDelta(t, 2.5, medianOf([]float64{4, 1, 3, 2}), 0)
}

func TestFormatNumber(t *testing.T) {
	t.Parallel()

	require.Equal(t, "0", formatNumber(0, 0))
	require.Equal(t, "999", formatNumber(999, 0))
	require.Equal(t, "1,000", formatNumber(999.6, 0))
	require.Equal(t, "1,234,567.89", formatNumber(1234567.891, 2))
	require.Equal(t, "-12,345.0", formatNumber(-12345, 1))
}

func TestRotate(t *testing.T) {
	t.Parallel()

	require.Equal(t, []string{"b", "c", "a"}, rotate([]string{"a", "b", "c"}, 1))
	require.Equal(t, []string{"a", "b", "c"}, rotate([]string{"a", "b", "c"}, 3))
	require.Nil(t, rotate([]string(nil), 2))
}

func TestSummarize(t *testing.T) {
	t.Parallel()

	lines := strings.Join([]string{
		`bench: a log line that is not JSON`,
		`{"workload":"workflows-burst","contender":"weir","config":"defaults","n":1000,"run":1,"runs":3,"unit":"wf/s","per_sec":100,"p50_ms":10,"p99_ms":30,"bench_cpu_us_per_unit":400,"postgres_cpu_us_per_unit":1600,"wal_bytes_per_unit":5000}`,
		`{"workload":"workflows-burst","contender":"weir","config":"defaults","n":1000,"run":2,"runs":3,"unit":"wf/s","per_sec":300,"p50_ms":20,"p99_ms":40,"bench_cpu_us_per_unit":600,"postgres_cpu_us_per_unit":1800,"wal_bytes_per_unit":7000}`,
		`{"workload":"workflows-burst","contender":"weir","config":"defaults","n":1000,"run":3,"runs":3,"error":"boom"}`,
		``,
		`{"workload":"jobs","contender":"fenced","config":"tuned","n":20000,"run":1,"runs":1,"unit":"jobs/s","per_sec":12345.6,"ratio_to_raw":0.9,"wal_bytes_per_unit":2000,"env":{"cpus":2,"cpu_model":"Virtual Turin","go":"go1.26","pg":{"version":"PostgreSQL 15","fsync":"on"},"private_server":true,"weir_commit":"abc"}}`,
		`{"workload":"costs","contender":"dbos-direct","config":"direct","n":200,"run":1,"runs":1,"round_trips_per_unit":32.84,"statements_per_unit":32.09,"tx_per_unit":8.09,"wal_bytes_per_unit":3406,"connections":3}`,
		`{"workload":"costs","contender":"weir","config":"eager","n":200,"run":1,"runs":1,"round_trips_per_unit":1.31,"statements_per_unit":4.85,"tx_per_unit":0.77,"wal_bytes_per_unit":18954}`,
	}, "\n")
	results, err := readResults(strings.NewReader(lines))
	require.NoError(t, err)
	require.Len(t, results, 6)

	got := summarize(results)
	require.Contains(t, got, "| weir | defaults | 1000 | 2 (+1 failed) | **200.0** [100.0–300.0] | **15.0** [10.0–20.0] | **35.0** [30.0–40.0] | 2,200 (500 + 1,700) | 6,000 |")
	require.Contains(t, got, "| fenced | tuned | 20000 | 1 | 12,346 | 0.900 | – | 2,000 |", "no CPU figure where none was measured")
	require.Contains(t, got, "| dbos-direct | direct | 200 | 1 | 32.840 | 32.090 | 8.090 | 3,406 | 3 |")
	require.Contains(t, got, "| weir | eager | 200 | 1 | 1.310 | 4.850 | 0.770 | 18,954 | 0 |", "no connection opened in the window is a figure")
	require.Less(t, strings.Index(got, "### Jobs"), strings.Index(got, "### Workflows, burst"), "tables come in workload order")
	require.NotContains(t, got, "open loop", "no table for a workload without results")
	require.Contains(t, got, "Environment: PostgreSQL 15; 2 CPUs (Virtual Turin), go1.26; settings: fsync=on; weir abc.")

	_, err = readResults(strings.NewReader(`{"workload": 3}`))
	require.Error(t, err)

	for tls, want := range map[string]string{
		`true`:  "; settings: fsync=on; connections encrypted (TLS); weir abc.",
		`false`: "; settings: fsync=on; connections unencrypted; weir abc.",
	} {
		results, err := readResults(strings.NewReader(`{"workload":"jobs","contender":"raw","config":"tuned","n":1,"run":1,"runs":1,"unit":"jobs/s","per_sec":1,"env":{"cpus":2,"go":"go1.26","pg":{"version":"PostgreSQL 15","fsync":"on"},"tls":` + tls + `,"weir_commit":"abc"}}`))
		require.NoError(t, err)
		require.Contains(t, summarize(results), want)
	}

	results, err = readResults(strings.NewReader(`{"workload":"jobs","contender":"raw","config":"tuned","n":1,"run":1,"runs":1,"unit":"jobs/s","per_sec":1,"env":{"cpus":2,"go":"go1.26","pg":{"version":"PostgreSQL 15","fsync":"on"},"tls":false,"round_trip":{"back_to_back_ms":0.101,"after_idle_ms":2.234,"idle_ms":50},"weir_commit":"abc"}}`))
	require.NoError(t, err)
	require.Contains(t, summarize(results), "; connections unencrypted; one round trip 0.10 ms back to back, 2.23 ms after 50 ms idle; weir abc.")
}

func TestMessageCounter(t *testing.T) {
	t.Parallel()

	type step struct {
		status        byte
		roundTrip, tx bool
	}
	c := &messageCounter{}
	for i, s := range []step{
		{status: 'I'},                            // end of startup
		{status: 'I', roundTrip: true, tx: true}, // autocommit statement
		{status: 'T', roundTrip: true},           // BEGIN
		{status: 'T', roundTrip: true},           // a statement in the block
		{status: 'I', roundTrip: true, tx: true}, // COMMIT
		{status: 'T', roundTrip: true},           // BEGIN
		{status: 'E', roundTrip: true},           // a failing statement
		{status: 'I', roundTrip: true, tx: true}, // ROLLBACK
		{status: 'I', roundTrip: true, tx: true}, // autocommit again
	} {
		roundTrip, tx := c.readyForQuery(s.status)
		require.Equal(t, s.roundTrip, roundTrip, "step %d round trip", i)
		require.Equal(t, s.tx, tx, "step %d transaction", i)
	}
}

// TestCountingProxy counts a known conversation with a real Postgres.
func TestCountingProxy(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	proxy, err := newCountingProxy(ctx, dbtest.URL(ctx, t), true, 0)
	require.NoError(t, err)
	defer proxy.Close()

	conn, err := pgx.Connect(ctx, proxy.URL())
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	require.Equal(t, counts{Connections: 1}, proxy.snapshot(), "the startup is no round trip")

	step := func(name string, want counts, fn func()) {
		t.Helper()
		before := proxy.snapshot()
		fn()
		require.Equal(t, want, proxy.snapshot().sub(before), name)
	}

	step("simple query", counts{RoundTrips: 1, Statements: 1, Transactions: 1}, func() {
		_, err := conn.Exec(ctx, "SELECT 1")
		require.NoError(t, err)
	})
	step("extended query in one round trip", counts{RoundTrips: 1, Statements: 1, Transactions: 1}, func() {
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT $1::int + 1", pgx.QueryExecModeExec, 1).Scan(&n))
		require.Equal(t, 2, n)
	})
	step("explicit transaction", counts{RoundTrips: 4, Statements: 4, Transactions: 1}, func() {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "CREATE TEMP TABLE t (x int)")
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "INSERT INTO t VALUES (1)")
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	})
	step("failed transaction", counts{RoundTrips: 3, Statements: 2, Transactions: 1}, func() {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SELECT 1/0")
		require.Error(t, err)
		require.NoError(t, tx.Rollback(ctx))
	})
	step("simple query with three statements", counts{RoundTrips: 1, Statements: 3, Transactions: 1}, func() {
		_, err := conn.Exec(ctx, "BEGIN; SELECT 1; COMMIT")
		require.NoError(t, err)
	})
	step("prepared statement, then executed", counts{RoundTrips: 3, Statements: 2, Transactions: 3}, func() {
		for range 2 {
			var n int
			require.NoError(t, conn.QueryRow(ctx, "SELECT $1::int -- a comment\n  * 2", 21).Scan(&n))
			require.Equal(t, 42, n)
		}
	})

	detail := proxy.detailSnapshot()
	require.Equal(t, int64(3), detail["SELECT $1::int * 2"], "prepare, then two executions of the cached statement: %v", detail)
	require.Equal(t, int64(1), detail["SELECT $1::int + 1"])
	require.Equal(t, int64(2), detail["begin"])
	require.Equal(t, int64(1), detail["BEGIN; SELECT 1; COMMIT"])
	var total int64
	for _, n := range detail {
		total += n
	}
	require.Equal(t, proxy.snapshot().RoundTrips, total, "every round trip is attributed")
}

func TestStatementLabel(t *testing.T) {
	t.Parallel()

	require.Equal(t, "SELECT a FROM t WHERE x = $1", statementLabel("-- name: Foo :one\nSELECT a\n  FROM t -- why\n\tWHERE x = $1\n"))
	require.Equal(t, "(none)", statementLabel(""))
	require.Equal(t, strings.Repeat("x", 120)+"…", statementLabel(strings.Repeat("x", 200)))
}

// TestServerEnvTLS reads whether the harness's connections are encrypted:
// not through an sslmode=disable URL, and yes through sslmode=require when
// the server offers TLS.
func TestServerEnvTLS(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	base, err := url.Parse(dbtest.URL(ctx, t))
	require.NoError(t, err)
	for mode, want := range map[string]bool{"disable": false, "require": true} {
		u := *base
		q := u.Query()
		q.Set("sslmode", mode)
		u.RawQuery = q.Encode()
		env, err := (&server{base: &u}).env(ctx)
		if mode == "require" && err != nil {
			require.ErrorContains(t, err, "refused TLS", "only a server without TLS may refuse sslmode=require")
			continue
		}
		require.NoError(t, err)
		require.NotNil(t, env.TLS)
		require.Equal(t, want, *env.TLS, "sslmode=%s", mode)
		require.NotNil(t, env.RoundTrip)
		require.Positive(t, env.RoundTrip.BackToBackMs)
		require.Positive(t, env.RoundTrip.AfterIdleMs)
		require.Equal(t, 50.0, env.RoundTrip.IdleMs)
	}
}

// TestBusyClockWithin sums the busy spans that a window covers, cutting the
// ones it crosses.
func TestBusyClockWithin(t *testing.T) {
	t.Parallel()

	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	b := &busyClock{}
	for _, s := range [][2]int{{10, 20}, {30, 35}, {40, 60}} {
		b.sent(at(s[0]))
		b.sent(at(s[0] + 1)) // a second request while the first is outstanding
		b.answered(at(s[0] + 2))
		b.answered(at(s[1]))
	}
	b.answered(at(70)) // an answer to nothing outstanding changes nothing

	for _, tt := range []struct {
		name      string
		from, to  int
		wantMs    int
		wantSpans int
	}{
		{"all", 0, 100, 35, 3},
		{"none before", 0, 10, 0, 0},
		{"none between", 21, 29, 0, 0},
		{"cut at both ends", 15, 50, 5 + 5 + 10, 3},
		{"inside one", 45, 50, 5, 1},
		{"after", 60, 100, 0, 0},
	} {
		busy, spans := b.within(at(tt.from), at(tt.to))
		require.Equal(t, time.Duration(tt.wantMs)*time.Millisecond, busy, tt.name)
		require.Equal(t, tt.wantSpans, spans, tt.name)
	}

	// The same spans as a path: outside, [inside], outside, ….
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tt := range []struct {
		name     string
		from, to int
		want     []time.Duration
	}{
		{"all", 0, 100, ms(10, 10, 10, 5, 5, 20, 40)},
		{"none", 21, 29, ms(8)},
		{"cut at both ends", 15, 50, ms(0, 5, 10, 5, 5, 10, 0)},
		{"ends in a span", 5, 45, ms(5, 10, 10, 5, 5, 5, 0)},
	} {
		require.Equal(t, tt.want, b.path(at(tt.from), at(tt.to)), tt.name)
	}
}

// TestMedianPath takes the median of each entry over the rows that have
// it, and stops where fewer than half of them do.
func TestMedianPath(t *testing.T) {
	t.Parallel()

	paths := [][]float64{
		{0.3, 1.5, 0.2, 1.0, 0},
		{0.4, 1.4, 0.1, 0.9, 0},
		{0.2, 1.6, 0.3},
		{0.5},
	}
	require.Equal(t, []float64{0.3, 1.5, 0.2, 0.9, 0}, medianPath(paths, 9))
	require.Equal(t, []float64{0.3, 1.5}, medianPath(paths, 2), "at most max entries")
	require.Empty(t, medianPath(nil, 9))
}

// TestCountingProxyBusy records the time Postgres spends answering, and
// not the time the client spends between requests.
func TestCountingProxyBusy(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	proxy, err := newCountingProxy(ctx, dbtest.URL(ctx, t), false, 0)
	require.NoError(t, err)
	defer proxy.Close()
	config, err := pgx.ParseConfig(proxy.URL())
	require.NoError(t, err)
	config.DefaultQueryExecMode = pgx.QueryExecModeExec // no round trips to prepare
	conn, err := pgx.ConnectConfig(ctx, config)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))

	from := time.Now()
	_, err = conn.Exec(ctx, "SELECT pg_sleep(0.05)")
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond) // the client's own time
	batch := &pgx.Batch{}
	batch.Queue("SELECT pg_sleep(0.03)")
	batch.Queue("SELECT pg_sleep(0.03)")
	require.NoError(t, conn.SendBatch(ctx, batch).Close())
	to := time.Now()

	busy, spans := proxy.busy.within(from, to)
	require.Equal(t, 2, spans, "a query, then a batch in one round trip")
	require.GreaterOrEqual(t, busy, 110*time.Millisecond)
	require.Less(t, busy, to.Sub(from)-90*time.Millisecond, "the client's sleep is not Postgres's time")
}

// TestRunWorkflowsWarmsUp measures a few workflows of weir and of the River
// chain in each mode on the test server: the warm-up's workflows (numbered
// below 0) complete first and count in no figure, so the measured ones are
// exactly 0..n-1 (completions refuses a run where one is missing, which is
// what counting a warm-up workflow as measured would leave).
func TestRunWorkflowsWarmsUp(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	h := testHarness(ctx, t)
	for _, contender := range []string{ContenderWeir, ContenderRiverChain} {
		for _, mode := range []string{ModeBurst, ModeRate} {
			res, err := h.runWorkflows(ctx, workflowsParams{contender: contender, mode: mode, n: 5, rate: 50})
			require.NoError(t, err, "%s %s", contender, mode)
			require.Equal(t, 5, res.N)
			require.Equal(t, warmupWorkflows(mode), res.Warmup)
			require.Positive(t, res.P50Ms)
			require.GreaterOrEqual(t, res.P99Ms, res.P50Ms)
			require.Positive(t, res.WALBytesPerUnit)
			if mode == ModeBurst {
				require.Positive(t, res.PerSec)
			}
		}
	}
}

// TestRunWorkflowsSplit splits a few open-loop weir workflows: their time
// in Postgres, the rest, and the path between them, which alternates the
// two, starts outside Postgres and has an entry per busy span and gap.
func TestRunWorkflowsSplit(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	h := testHarness(ctx, t)
	res, err := h.runWorkflows(ctx, workflowsParams{contender: ContenderWeir, mode: ModeRate, n: 5, rate: 50, split: true})
	require.NoError(t, err)
	require.Positive(t, res.InPostgresMs)
	require.Positive(t, res.ElsewhereMs)
	require.GreaterOrEqual(t, res.PostgresSpans, 2.0, "the start and at least one step")
	require.GreaterOrEqual(t, len(res.PathMs), 2*int(res.PostgresSpans), "before each span, the span")
	require.LessOrEqual(t, len(res.PathMs), pathEntriesMax)
	for i, v := range res.PathMs {
		if i%2 == 1 {
			require.Positive(t, v, "span %d", i/2+1)
		}
		require.LessOrEqual(t, v, res.P99Ms, "entry %d is a part of a workflow's latency", i)
	}
}

// TestRunScale measures a few workflows of contenders in processes of
// their own: weir's normal start and DBOS's queue with two worker processes
// each, and weir eager behind a delaying proxy. Every step ran once and the
// figures of the scale workloads are there.
func TestRunScale(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	h := testHarness(ctx, t)
	profiles := t.TempDir()
	for _, p := range []scaleParams{
		{contender: ContenderWeirNormal, n: 20, pool: 4, workers: 2, warmup: 5, profile: filepath.Join(profiles, "normal")},
		{contender: ContenderDBOSQueue, n: 20, pool: 4, workers: 2, warmup: 5},
		{contender: ContenderWeir, n: 20, pool: 4, delay: 2 * time.Millisecond, warmup: 5},
	} {
		res, err := h.runScale(ctx, p)
		require.NoError(t, err, "%+v", p)
		require.Empty(t, res.Error)
		require.NotNil(t, res.DuplicateExecutions)
		require.Zero(t, *res.DuplicateExecutions)
		require.Equal(t, 5, res.Warmup)
		require.Positive(t, res.PerSec)
		require.GreaterOrEqual(t, res.P99Ms, res.P50Ms)
		require.Equal(t, 4, res.Pool)
		if p.workers > 0 {
			require.Equal(t, p.workers, res.Workers)
			require.Contains(t, res.Config, "2 worker processes")
			require.True(t, res.BusiestWorkerShare >= 1 && res.BusiestWorkerShare <= 2, "the busiest of 2 workers ran from half to all of the steps: %v", res.BusiestWorkerShare)
		} else {
			require.Zero(t, res.BusiestWorkerShare, "one process: nothing to share")
		}
		if p.delay > 0 {
			require.InDelta(t, 2.0, res.ProxyDelayMs, 0)
			require.Greater(t, res.P50Ms, 4.0, "a workflow makes more than one round trip, each delayed 2 ms each way")
		}
		require.GreaterOrEqual(t, res.PostgresCPUUsPerUnit, 0.0, "the server's processes only: another server stopping takes nothing away")
		require.GreaterOrEqual(t, res.BenchCPUUsPerUnit, 0.0)
		require.Positive(t, res.AllocBytesPerUnit, "every contender's processes allocate in its window")
		for name := range res.BusyBackendsBy {
			require.NotEqual(t, harnessAppName, name, "the harness's own connections are left out")
		}
		if p.workers > 0 { // a starter and two workers: each its own GC share
			require.Len(t, res.GCShareBy, 3)
			for name, share := range res.GCShareBy {
				require.Contains(t, name, strings.Split(p.contender, "-")[0])
				require.True(t, share >= 0 && share <= 1, "%s: %v", name, share)
			}
		} else {
			require.Nil(t, res.GCShareBy, "one process: its share is the total")
		}
	}
	for _, name := range []string{"weir-worker-1", "weir-worker-2", "weir-starter"} { // --proc-profile
		for _, suffix := range []string{"cpu.pprof", "allocs-base.pprof", "allocs.pprof", "goroutine-peak.pprof", "goroutine-000s.pprof", "gc.txt"} {
			info, err := os.Stat(filepath.Join(profiles, "normal-"+name+"."+suffix))
			require.NoError(t, err)
			require.Positive(t, info.Size(), "%s.%s", name, suffix)
		}
	}
}

func TestBusiestShare(t *testing.T) {
	t.Parallel()

	require.InDelta(t, 1.0, busiestShare([]int{300, 300, 300, 300}), 0)
	require.InDelta(t, 1.61, busiestShare([]int{805, 417, 385, 393}), 0, "805 against a mean of 500")
	require.InDelta(t, 4.0, busiestShare([]int{0, 600, 0, 0}), 0, "one worker of four ran everything")
	require.Zero(t, busiestShare([]int{0, 0}))
	require.Zero(t, busiestShare(nil))
}

func TestRepeatedSteps(t *testing.T) {
	t.Parallel()

	// wf-2#0 ran once in each of two processes: a duplicate too.
	total := addCounts([]map[string]int{{"wf-1#0": 1, "wf-1#1": 3, "wf-2#0": 1}, {"wf-2#0": 1}, nil})
	repeats, examples := repeatedSteps(total)
	require.Equal(t, 3, repeats)
	require.Equal(t, []string{"wf-1#1 ran 3 times", "wf-2#0 ran 2 times"}, examples)
	repeats, examples = repeatedSteps(map[string]int{"wf-1#0": 1})
	require.Zero(t, repeats)
	require.Empty(t, examples)
}

// TestCountingProxyDelay: with a delay, each round trip through the proxy
// takes at least the delay each way, and the conversation stays intact.
func TestCountingProxyDelay(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	const delay = 20 * time.Millisecond
	proxy, err := newCountingProxy(ctx, dbtest.URL(ctx, t), false, delay)
	require.NoError(t, err)
	defer proxy.Close()
	conn, err := pgx.Connect(ctx, proxy.URL())
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))

	for i := range 3 {
		begin := time.Now()
		var got string
		require.NoError(t, conn.QueryRow(ctx, "SELECT repeat('x', $1::int)", 100_000).Scan(&got))
		require.Len(t, got, 100_000)
		require.GreaterOrEqual(t, time.Since(begin), 2*delay, "round trip %d", i)
	}
}

// TestSummarizeScale: the scale tables divide throughput by the peer's
// run by run, show allocation per workflow with the GC cycles, and flag
// duplicate executions.
func TestSummarizeScale(t *testing.T) {
	t.Parallel()

	lines := strings.Join([]string{
		`{"workload":"scale-burst","contender":"weir-normal","config":"normal","n":2000,"run":1,"runs":1,"per_sec":300,"pool":64,"workers":1,"busy_backends":3,"busy_backends_by":{"weir-starter":1,"weir-worker-1":2},"gc_share":0.25,"gc_share_by":{"weir-starter":0.3,"weir-worker-1":0.225},"alloc_bytes_per_unit":71234,"gc_cycles":23,"bench_cpu_us_per_unit":100,"postgres_cpu_us_per_unit":200,"harness_cpu_us_per_unit":10,"duplicate_executions":0}`,
		`{"workload":"scale-burst","contender":"dbos-direct","config":"direct","n":2000,"run":1,"runs":1,"per_sec":200,"pool":64,"busy_backends":20,"duplicate_executions":0}`,
		`{"workload":"scale-burst","contender":"dbos-direct","config":"direct","n":2000,"run":1,"runs":1,"per_sec":100,"pool":20,"duplicate_executions":0}`,
		`{"workload":"scale-workers","contender":"weir-normal","config":"k1","n":2000,"run":1,"runs":2,"per_sec":400,"pool":20,"workers":1,"duplicate_executions":0}`,
		`{"workload":"scale-workers","contender":"weir-normal","config":"k1","n":2000,"run":2,"runs":2,"per_sec":500,"pool":20,"workers":1,"duplicate_executions":0}`,
		`{"workload":"scale-workers","contender":"weir-normal","config":"k4","n":2000,"run":1,"runs":1,"per_sec":360,"pool":20,"workers":4,"duplicate_executions":2,"error":"2 duplicate step executions"}`,
		`{"workload":"scale-workers","contender":"weir-normal","config":"k4","n":2000,"run":2,"runs":2,"per_sec":380,"pool":20,"workers":4,"duplicate_executions":0,"busiest_worker_share":1.61}`,
	}, "\n")
	results, err := readResults(strings.NewReader(lines))
	require.NoError(t, err)
	got := summarize(results)
	require.Contains(t, got, "| weir-normal | normal | 2000 | 1 | 300.0 | 1.50 | – | – | 3.0 (weir-starter 1.0, weir-worker-1 2.0) | 300 (100 + 200) | 10 | 25.0 (weir-starter 30.0, weir-worker-1 22.5) | 71.2 (23) | 0 |", "divided by dbos-direct at the same pool")
	require.Contains(t, got, "| weir-normal | k4 | 2000 | 1 (+1 failed) | 380.0 | 0.76 |", "divided by the one-worker run of the same number")
	require.Contains(t, got, "**2: FAILED** | 1.61 |", "the busiest worker's share, of the runs that did not fail")
	require.Contains(t, got, "| weir-normal | k1 | 2000 | 2 |")
	require.Contains(t, got, "| 0 | – |", "one worker: no share")
}

// TestSummarizePairedRatio: a drift of the machine's speed between runs
// moves both contenders alike and stays out of the ratio, which is the
// median of the runs' own ratios, not the ratio of the medians.
func TestSummarizePairedRatio(t *testing.T) {
	t.Parallel()

	var lines []string
	for run, rates := range [][2]float64{{3000, 1650}, {3100, 1530}, {3200, 1760}, {4200, 1950}, {4300, 1840}} {
		for i, contender := range []string{"weir", "dbos-direct"} {
			lines = append(lines, fmt.Sprintf(`{"workload":"scale-burst","contender":%q,"config":%q,"n":2000,"run":%d,"runs":5,"per_sec":%g,"pool":20}`,
				contender, contender, run+1, rates[i]))
		}
	}
	results, err := readResults(strings.NewReader(strings.Join(lines, "\n")))
	require.NoError(t, err)
	// Medians 3,200 and 1,760 would give 1.82; the runs give 1.82, 2.03,
	// 1.82, 2.15 and 2.34.
	require.Contains(t, summarize(results), "| weir | weir | 2000 | 5 | **3,200.0** [3,000.0–4,300.0] | 2.03 [1.82–2.34] |")
}

// TestSummarizeOpenLoopRatio: the open-loop table divides each run's p50
// by DBOS direct's p50 of the same run, as the scale tables divide
// throughput.
func TestSummarizeOpenLoopRatio(t *testing.T) {
	t.Parallel()

	var lines []string
	for run, p50s := range [][2]float64{{5, 5}, {6, 4}, {4, 2}} {
		for i, contender := range []string{"weir", "dbos-direct"} {
			lines = append(lines, fmt.Sprintf(`{"workload":"workflows-rate","contender":%q,"config":%q,"n":100,"run":%d,"runs":3,"p50_ms":%g,"p99_ms":9,"pool":20}`,
				contender, contender, run+1, p50s[i]))
		}
	}
	results, err := readResults(strings.NewReader(strings.Join(lines, "\n")))
	require.NoError(t, err)
	got := summarize(results)
	// The medians, 5 and 4, would give 1.25; the runs give 1, 1.5 and 2.
	require.Contains(t, got, "| weir | weir | 100 | 3 | **5.0** [4.0–6.0] | 1.50 [1.00–2.00] | **9.0** [9.0–9.0] |")
	require.Contains(t, got, "| dbos-direct | dbos-direct | 100 | 3 | **4.0** [2.0–5.0] | 1.00 [1.00–1.00] |")
}

// TestServerCPU finds the test server's postmaster (when it runs on this
// machine) and sees its processes' CPU time grow with a query's work.
func TestServerCPU(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	admin, err := pgxpool.New(ctx, dbtest.URL(ctx, t))
	require.NoError(t, err)
	defer admin.Close()
	postmaster := postmasterOf(ctx, admin)
	if postmaster == 0 {
		t.Skip("the test server does not run on this machine (or there is no /proc)")
	}
	// A server started for this test binary may not have used a tick of
	// CPU yet: only the growth is certain.
	before := serverCPU(postmaster)
	require.GreaterOrEqual(t, before, time.Duration(0))
	_, err = admin.Exec(ctx, "SELECT count(*) FROM generate_series(1, 3000000)")
	require.NoError(t, err)
	require.Greater(t, serverCPU(postmaster), before)
}

func TestCPUModelOf(t *testing.T) {
	t.Parallel()
	info := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 17\nmodel name\t: Oxide  Virtual Turin-like Processor   \nflags\t\t: fpu\n\nprocessor\t: 1\nmodel name\t: Other\n"
	require.Equal(t, "Oxide Virtual Turin-like Processor", cpuModelOf(info), "the first CPU's, spaces folded; not the model number's line")
	require.Empty(t, cpuModelOf("processor\t: 0\nCPU implementer\t: 0x41\n"), "a system that names no model")
	if _, err := os.Stat("/proc/cpuinfo"); err == nil && runtime.GOARCH == "amd64" {
		require.NotEmpty(t, cpuModel(), "this machine's /proc/cpuinfo names its model")
	}
}

// testHarness is a harness on the test server that logs to t and writes
// its results nowhere.
func testHarness(ctx context.Context, t *testing.T) *harness {
	t.Helper()
	base, err := url.Parse(dbtest.URL(ctx, t))
	require.NoError(t, err)
	return &harness{logf: t.Logf, out: newResultWriter(io.Discard, nil), server: &server{base: base, logf: t.Logf}}
}
