package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Workflow modes.
const (
	ModeBurst = "burst"
	ModeRate  = "rate"
)

// Workflow contenders.
const (
	ContenderWeir        = "weir"
	ContenderRiverChain  = "riverchain"
	ContenderGoWorkflows = "goworkflows"
	ContenderDBOSDirect  = "dbos-direct"
	ContenderDBOSQueue   = "dbos-queue"
)

// WorkflowContenders lists the workflow contenders in their default order.
var WorkflowContenders = []string{ContenderWeir, ContenderRiverChain, ContenderGoWorkflows, ContenderDBOSDirect, ContenderDBOSQueue}

// JobsContenders lists the jobs contenders in their default order.
var JobsContenders = []string{ContenderRaw, ContenderFenced}

// completionPollInterval is how often the harness first counts completed
// workflows, on a connection of its own. The count reads every completed
// row, so the wait stretches the interval (completionPollGap) up to
// completionPollMax: the polls' cost then grows as n log n, not as n², and
// is not charged to the contender's Postgres CPU as if its own.
const (
	completionPollInterval = 10 * time.Millisecond
	completionPollMax      = 200 * time.Millisecond
)

// completionPollGap is the pause before the next count, waited so far into
// a wait: a twentieth of it, within completionPollInterval and
// completionPollMax. The window ends at most that late after the last
// completion; throughput and latency come from the rows' own times.
func completionPollGap(waited time.Duration) time.Duration {
	return min(max(waited/20, completionPollInterval), completionPollMax)
}

// workflowTimeout bounds one workflows measurement.
const workflowTimeout = 5 * time.Minute

// workflowEngine is one contender running the workflow of the workflows
// workload: three sequential no-op steps, each returning its input plus
// one, so workflow i (input i) returns i+3. Workflow i has the ID "wf-<i>".
type workflowEngine interface {
	// config describes the engine's configuration.
	config() string

	// start starts workflow i with input i.
	start(ctx context.Context, i int) error

	// result waits for workflow i and returns its result.
	result(ctx context.Context, i int) (int, error)

	// completedSQL is a query of the completed workflows, as rows of the
	// workflow's number and the engine-written completion time.
	completedSQL() string

	// stop stops the engine's workers and closes its connections.
	stop(ctx context.Context) error
}

// newEngine sets up contender on db (migrations, workers) and starts it.
func newEngine(ctx context.Context, contender string, db *benchDB) (workflowEngine, error) {
	switch contender {
	case ContenderWeir:
		return newWeirEngine(ctx, db.pool, PoolMaxConns, roleBoth)
	case ContenderRiverChain:
		return newRiverChainEngine(ctx, db)
	case ContenderGoWorkflows:
		return newGoWorkflowsEngine(ctx, db)
	case ContenderDBOSDirect:
		return newDBOSEngine(ctx, db.url, PoolMaxConns, false, roleBoth)
	case ContenderDBOSQueue:
		return newDBOSEngine(ctx, db.url, PoolMaxConns, true, roleBoth)
	}
	return nil, fmt.Errorf("unknown workflow contender %q", contender)
}

// workflowsParams describe one workflows measurement.
type workflowsParams struct {
	contender string
	mode      string  // ModeBurst or ModeRate
	n         int     // workflows
	rate      float64 // starts per second, ModeRate only

	// countRoundTrips sends the engine's connections through the counting
	// proxy; the result is then a costs result.
	countRoundTrips bool

	// split sends the engine's connections through the counting proxy and
	// splits each workflow's latency into time in Postgres and the rest
	// (latency-split); meant for ModeRate.
	split bool
}

// runWorkflows starts p.n workflows of p.contender (all at once, or
// open-loop at p.rate), waits until the database shows all completed, and
// reports throughput, latency percentiles and WAL per workflow (and round
// trips with countRoundTrips). Results are checked afterwards through the
// engine's own API.
func (h *harness) runWorkflows(ctx context.Context, p workflowsParams) (*Result, error) {
	res := &Result{Contender: p.contender, N: p.n, Unit: "wf/s"}
	db, err := h.openDatabase(ctx, p.contender, dbOptions{proxy: p.countRoundTrips || p.split})
	if err != nil {
		return res, err
	}
	defer db.close()

	engine, err := newEngine(ctx, p.contender, db)
	if err != nil {
		return res, fmt.Errorf("setting up %s: %w", p.contender, err)
	}
	res.Config = engine.config()
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := engine.stop(stopCtx); err != nil {
			h.logf("stopping %s: %v", p.contender, err)
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, workflowTimeout)
	defer cancel()

	if err := warmUp(ctx, db, engine, p); err != nil {
		return res, fmt.Errorf("warming up %s: %w", p.contender, err)
	}
	res.Warmup = warmupWorkflows(p.mode)

	win, err := db.beginWindow(ctx)
	if err != nil {
		return res, err
	}
	starts := make([]time.Time, p.n)
	var (
		startErrMu sync.Mutex
		startErr   error
		startWG    sync.WaitGroup
	)
	launch := func(i int) {
		startWG.Go(func() {
			starts[i] = time.Now()
			if err := engine.start(ctx, i); err != nil {
				startErrMu.Lock()
				startErr = errors.Join(startErr, fmt.Errorf("starting workflow %d: %w", i, err))
				startErrMu.Unlock()
				cancel()
			}
		})
	}
	startErrs := func() error {
		startErrMu.Lock()
		defer startErrMu.Unlock()
		return startErr
	}
	go func() {
		if p.mode == ModeRate {
			ticker := time.NewTicker(time.Duration(float64(time.Second) / p.rate))
			defer ticker.Stop()
			for i := range p.n {
				if i > 0 {
					select {
					case <-ticker.C:
					case <-ctx.Done():
						return
					}
				}
				launch(i)
			}
			return
		}
		for i := range p.n {
			launch(i)
		}
	}()

	if err := waitCompleted(ctx, db, engine.completedSQL(), "i >= 0", p.n, "workflows"); err != nil {
		return res, errors.Join(startErrs(), err)
	}
	startWG.Wait()
	if err := startErrs(); err != nil {
		return res, err
	}
	if err := win.end(ctx, res, p.n); err != nil {
		return res, err
	}

	completed, err := completions(ctx, db, engine.completedSQL(), p.n)
	if err != nil {
		return res, err
	}
	ms := latencyFigures(res, starts, completed)
	if p.split {
		inPostgres, elsewhere, spans := make([]float64, p.n), make([]float64, p.n), make([]float64, p.n)
		paths := make([][]float64, p.n)
		for i := range p.n {
			busy, n := db.proxy.busy.within(starts[i], completed[i])
			inPostgres[i], elsewhere[i], spans[i] = float64(busy)/float64(time.Millisecond), ms[i]-float64(busy)/float64(time.Millisecond), float64(n)
			paths[i] = durationsMs(db.proxy.busy.path(starts[i], completed[i]))
		}
		res.InPostgresMs, res.ElsewhereMs, res.PostgresSpans = round3(percentile(inPostgres, 50)), round3(percentile(elsewhere, 50)), percentile(spans, 50)
		res.PathMs = medianPath(paths, pathEntriesMax)
	}
	if p.mode == ModeBurst {
		res.PerSec = float64(p.n) / res.ElapsedSec
	} else {
		res.Unit = ""
	}
	if err := checkResults(ctx, engine, p.n); err != nil {
		return res, err
	}
	return res, nil
}

// pathEntriesMax is how many entries of a workflow's path (busyClock.path)
// a latency split reports: the time before Postgres and four spans with
// what follows each.
const pathEntriesMax = 9

// medianPath returns, entry by entry, the median of rows' entries, for at
// most max entries and as long as at least half of the rows have the entry:
// the path of a run's workflows (in milliseconds), or of a group's runs.
func medianPath(rows [][]float64, max int) []float64 {
	var out []float64
	for k := range max {
		var values []float64
		for _, r := range rows {
			if len(r) > k {
				values = append(values, r[k])
			}
		}
		if len(values) == 0 || 2*len(values) < len(rows) {
			break
		}
		out = append(out, round3(percentile(values, 50)))
	}
	return out
}

// cpuUsPerUnit is d in microseconds per unit, to one decimal.
func cpuUsPerUnit(d time.Duration, n int) float64 {
	return math.Round(float64(d.Microseconds())/float64(n)*10) / 10
}

// latencyFigures fills res's latency percentiles and window from the start
// and completion times of its workflows, and returns the latencies in
// milliseconds.
func latencyFigures(res *Result, starts, completed []time.Time) []float64 {
	latencies := make([]time.Duration, len(starts))
	first, last := starts[0], time.Time{}
	for i := range starts {
		latencies[i] = completed[i].Sub(starts[i])
		if starts[i].Before(first) {
			first = starts[i]
		}
		if completed[i].After(last) {
			last = completed[i]
		}
	}
	ms := durationsMs(latencies)
	res.P50Ms = round3(percentile(ms, 50))
	res.P99Ms = round3(percentile(ms, 99))
	res.ElapsedSec = last.Sub(first).Seconds()
	return ms
}

// warmupWorkflows is how many workflows each measurement completes before
// its window opens: warmupBurst at once before a burst, warmupRate at the
// measured rate before an open loop.
func warmupWorkflows(mode string) int {
	if mode == ModeBurst {
		return warmupBurst
	}
	return warmupRate
}

const (
	// warmupBurst opens every connection of a contender's pool (20) and
	// runs its statements on each: ten workflows at once opened about ten,
	// so the burst's first workflows opened the rest, and every connection
	// paid its first plans (Postgres plans a prepared statement afresh for
	// its first five runs) inside the window.
	warmupBurst = 200

	// warmupRate is enough for an open loop, which uses few connections at
	// a time.
	warmupRate = 10
)

func warmUp(ctx context.Context, db *benchDB, engine workflowEngine, p workflowsParams) error {
	n := warmupWorkflows(p.mode)
	var gap time.Duration
	if p.mode == ModeRate {
		gap = time.Duration(float64(time.Second) / p.rate)
	}
	g, gctx := errgroup.WithContext(ctx)
	for k := 1; k <= n; k++ {
		if k > 1 && gap > 0 {
			select {
			case <-time.After(gap):
			case <-gctx.Done():
			}
		}
		g.Go(func() error { return engine.start(gctx, -k) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := waitCompleted(ctx, db, engine.completedSQL(), "i < 0", n, "warm-up workflows"); err != nil {
		return err
	}
	for k := 1; k <= n; k++ {
		got, err := engine.result(ctx, -k)
		if err != nil {
			return fmt.Errorf("getting result of warm-up workflow %d: %w", -k, err)
		}
		if got != -k+3 {
			return fmt.Errorf("warm-up workflow %d returned %d, want %d", -k, got, -k+3)
		}
	}
	return nil
}

// waitCompleted polls, every completionPollInterval on the harness's own
// connection, until n of the completed workflows (completedSQL, an engine's)
// numbered as where says (a condition on i) are done.
func waitCompleted(ctx context.Context, db *benchDB, completedSQL, where string, n int, what string) error {
	countSQL := "SELECT count(*) FROM (" + completedSQL + ") AS c(i, at) WHERE " + where
	began := time.Now()
	for {
		var done int
		if err := db.admin.QueryRow(ctx, countSQL).Scan(&done); err != nil {
			return fmt.Errorf("counting completed %s: %w", what, err)
		}
		if done >= n {
			return nil
		}
		select {
		case <-time.After(completionPollGap(time.Since(began))):
		case <-ctx.Done():
			return fmt.Errorf("%d of %d %s completed: %w", done, n, what, ctx.Err())
		}
	}
}

// completions reads the completion times of workflows 0..n-1 (not the
// warm-up's, numbered below 0).
func completions(ctx context.Context, db *benchDB, completedSQL string, n int) ([]time.Time, error) {
	rows, err := db.admin.Query(ctx, completedSQL)
	if err != nil {
		return nil, fmt.Errorf("reading completion times: %w", err)
	}
	defer rows.Close()
	out := make([]time.Time, n)
	for rows.Next() {
		var (
			i  int
			at time.Time
		)
		if err := rows.Scan(&i, &at); err != nil {
			return nil, err
		}
		if i < 0 {
			continue // warm-up
		}
		if i >= n {
			return nil, fmt.Errorf("completed workflow %d is not one of 0..%d", i, n-1)
		}
		out[i] = at
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if i := slices.IndexFunc(out, time.Time.IsZero); i >= 0 {
		return nil, fmt.Errorf("workflow %d has no completion time", i)
	}
	return out, nil
}

// checkResults asks the engine for the result of workflows 0..n-1 and
// checks each is its input plus three.
func checkResults(ctx context.Context, engine workflowEngine, n int) error {
	return checkRange(ctx, engine, 0, n)
}

// checkRange is checkResults for workflows from..to-1.
func checkRange(ctx context.Context, engine workflowEngine, from, to int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := from; i < to; i++ {
		g.Go(func() error {
			got, err := engine.result(ctx, i)
			if err != nil {
				return fmt.Errorf("getting result of workflow %d: %w", i, err)
			}
			if got != i+3 {
				return fmt.Errorf("workflow %d returned %d, want %d", i, got, i+3)
			}
			return nil
		})
	}
	return g.Wait()
}

// round3 rounds to three decimals.
func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// workflowID is the ID of workflow i in every engine.
func workflowID(i int) string { return fmt.Sprintf("wf-%d", i) }
