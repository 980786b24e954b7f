package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Scale workloads: bursts with every contender in processes of its own.
const (
	WorkloadScaleBurst   = "scale-burst"
	WorkloadScaleWorkers = "scale-workers"
	WorkloadScaleHop     = "scale-hop"
)

// ContenderWeirNormal is weir started the normal way: a starter process
// (client.Start without EagerStart) and worker processes that only work.
const ContenderWeirNormal = "weir-normal"

// ScaleContenders are the contenders of the scale bursts: weir and DBOS
// each started in the process that runs the workflows (eager start,
// direct), and each started by a client process of its own (normal start,
// queue).
var ScaleContenders = []string{ContenderWeir, ContenderWeirNormal, ContenderDBOSDirect, ContenderDBOSQueue}

// Scale defaults.
const (
	// ScalePool is the larger pool of the scale bursts, beside
	// PoolMaxConns.
	ScalePool = 64

	ScaleBurstN   = 2000
	ScaleBigN     = 20_000
	ScaleWorkersN = 2000
	ScaleHopN     = 1000

	// ScaleHopDelay is the delaying proxy's delay, each direction.
	ScaleHopDelay = time.Millisecond

	// ScaleMaxConnections is the private server's max_connections for the
	// scale workloads: four worker processes and a starter of 20
	// connections each, or a worker and a starter of 64, and the harness.
	ScaleMaxConnections = 200

	// busySampleInterval is how often the harness samples the busy
	// backends.
	busySampleInterval = 50 * time.Millisecond
)

// ScaleWorkerCounts are the worker-process counts of scale-workers.
var ScaleWorkerCounts = []int{1, 2, 4}

// scaleParams describe one scale measurement.
type scaleParams struct {
	contender string
	n         int
	pool      int           // connections of each process's pool
	workers   int           // worker processes (weir-normal, dbos-queue)
	delay     time.Duration // the proxy's delay each way, or none
	warmup    int           // warm-up workflows; 0 means warmupBurst
	profile   string        // profile each process's window into files named this + its name, or none
}

// scaleLayout is how a scale contender runs: the processes to start
// (workers first) and which one starts the workflows.
type scaleLayout struct {
	procs   []procFlags
	names   []string
	starter int // index into procs
	config  string
}

func (p scaleParams) layout(url string) (scaleLayout, error) {
	var l scaleLayout
	add := func(contender, role, name string) {
		l.procs = append(l.procs, procFlags{contender: contender, role: role, url: url, pool: p.pool})
		l.names = append(l.names, name)
	}
	split := func(contender, prefix string) {
		for k := 1; k <= p.workers; k++ {
			add(contender, roleWorker, fmt.Sprintf("%s-worker-%d", prefix, k))
		}
		add(contender, roleStarter, prefix+"-starter")
		l.starter = len(l.procs) - 1
	}
	processes := fmt.Sprintf("%d worker process", p.workers)
	if p.workers != 1 {
		processes += "es"
	}
	switch p.contender {
	case ContenderWeir:
		add(ContenderWeir, roleBoth, "weir")
		l.config = fmt.Sprintf("weir defaults, StartOpts.EagerStart, one process, pool %d", p.pool)
	case ContenderWeirNormal:
		split(ContenderWeir, "weir")
		l.config = fmt.Sprintf("weir defaults, client.Start in a starter process + %s, pool %d each", processes, p.pool)
	case ContenderDBOSDirect:
		add("dbos", roleBoth, "dbos")
		l.config = fmt.Sprintf("v1.8.0 direct RunWorkflow, one process, pool %d", p.pool)
	case ContenderDBOSQueue:
		split("dbos", "dbos")
		l.config = fmt.Sprintf("v1.8.0 dbos.Client Enqueue in a starter process + %s (queue, default polling), pool %d each", processes, p.pool)
	default:
		return l, fmt.Errorf("unknown scale contender %q (of %s)", p.contender, strings.Join(ScaleContenders, ", "))
	}
	if p.delay > 0 {
		l.config += fmt.Sprintf(", Postgres behind a proxy delaying each way %s", p.delay)
	}
	return l, nil
}

// completedSQLOf is the completed-workflows query of a scale contender.
func completedSQLOf(contender string) string {
	if contender == ContenderWeir || contender == ContenderWeirNormal {
		return (*weirEngine)(nil).completedSQL()
	}
	return (*dbosEngine)(nil).completedSQL()
}

// runScale measures a burst of p.n workflows of p.contender running in
// processes of its own: throughput and latency as the burst workload, plus
// the busy backends, the CPU of the contender's processes, of Postgres and
// of the harness, the contender's GC share and its duplicate executions.
func (h *harness) runScale(ctx context.Context, p scaleParams) (*Result, error) {
	res := &Result{Contender: p.contender, N: p.n, Unit: "wf/s", Pool: p.pool, ProxyDelayMs: float64(p.delay) / float64(time.Millisecond)}
	db, err := h.openDatabase(ctx, p.contender, dbOptions{proxy: p.delay > 0, delay: p.delay, noPool: true, serverCPU: true})
	if err != nil {
		return res, err
	}
	defer db.close()
	layout, err := p.layout(db.url)
	if err != nil {
		return res, err
	}
	res.Config = layout.config
	if p.contender == ContenderWeirNormal || p.contender == ContenderDBOSQueue {
		res.Workers = p.workers
	}

	ctx, cancel := context.WithTimeout(ctx, workflowTimeout)
	defer cancel()
	var procs []*proc
	defer func() {
		for _, pr := range slices.Backward(procs) {
			if err := pr.stop(); err != nil {
				h.logf("stopping %s: %v", pr.name, err)
			}
		}
	}()
	for i, f := range layout.procs { // one at a time: the first migrates
		pr, err := startProc(ctx, f, layout.names[i])
		if err != nil {
			return res, err
		}
		procs = append(procs, pr)
	}
	starter := procs[layout.starter]
	completedSQL := completedSQLOf(p.contender)

	warmup := cmp.Or(p.warmup, warmupBurst)
	if _, err := starter.do(procRequest{Op: "start", From: -warmup, To: 0}); err != nil {
		return res, fmt.Errorf("warming up: %w", err)
	}
	if err := waitCompleted(ctx, db, completedSQL, "i < 0", warmup, "warm-up workflows"); err != nil {
		return res, err
	}
	if _, err := starter.do(procRequest{Op: "check", From: -warmup, To: 0}); err != nil {
		return res, fmt.Errorf("warming up: %w", err)
	}
	res.Warmup = warmup

	win, err := db.beginWindow(ctx)
	if err != nil {
		return res, err
	}
	before, err := procStatsOf(procs)
	if err != nil {
		return res, err
	}
	if err := openWindows(procs); err != nil {
		return res, err
	}
	if err := h.profileProcs(procs, p.profile, true); err != nil {
		return res, err
	}
	sampler := sampleBusy(ctx, db.admin, db.name)
	type started struct {
		reply procReply
		err   error
	}
	startDone := make(chan started, 1)
	go func() {
		reply, err := starter.do(procRequest{Op: "start", From: 0, To: p.n})
		if err != nil {
			cancel()
		}
		startDone <- started{reply, err}
	}()
	waitErr := waitCompleted(ctx, db, completedSQL, "i >= 0", p.n, "workflows")
	busy := sampler.stop()
	if waitErr != nil {
		select { // the starter's error says more, if it failed
		case s := <-startDone:
			return res, errors.Join(s.err, waitErr)
		default:
			return res, waitErr
		}
	}
	s := <-startDone
	if s.err != nil {
		return res, s.err
	}
	if err := h.profileProcs(procs, p.profile, false); err != nil {
		return res, err
	}
	samples, err := closeWindows(procs)
	if err != nil {
		return res, err
	}
	after, err := procStatsOf(procs)
	if err != nil {
		return res, err
	}
	if err := win.end(ctx, res, p.n); err != nil {
		return res, err
	}
	res.HarnessCPUUsPerUnit, res.BenchCPUUsPerUnit = res.BenchCPUUsPerUnit, cpuUsPerUnit(time.Duration(after.CPUNs-before.CPUNs), p.n)
	res.GCShare, res.GCShareBy = gcShares(samples)
	res.AllocBytesPerUnit = math.Round(float64(after.AllocBytes-before.AllocBytes) / float64(p.n))
	res.GCCycles = int(after.GCCycles - before.GCCycles)
	res.BusyBackends, res.BusyBackendsBy = busy.average()

	starts := make([]time.Time, p.n)
	for i, ns := range s.reply.Starts {
		starts[i] = time.Unix(0, ns)
	}
	completed, err := completions(ctx, db, completedSQL, p.n)
	if err != nil {
		return res, err
	}
	latencyFigures(res, starts, completed)
	res.PerSec = float64(p.n) / res.ElapsedSec
	if _, err := starter.do(procRequest{Op: "check", From: 0, To: p.n}); err != nil {
		return res, err
	}
	return res, h.countExecutions(res, procs, layout.starter)
}

// profileProcs starts or stops profiling each of procs into files named
// prefix + "-" + its name, when prefix is set, and logs their peak
// goroutine counts when it stops.
func (h *harness) profileProcs(procs []*proc, prefix string, start bool) error {
	if prefix == "" {
		return nil
	}
	for _, pr := range procs {
		req := procRequest{Op: "profile"}
		if start {
			req.Path = prefix + "-" + pr.name
		}
		reply, err := pr.do(req)
		if err != nil {
			return err
		}
		if !start {
			h.logf("%s: at most %d goroutines; profiles in %s-%s.*.pprof", pr.name, reply.PeakGoroutines, prefix, pr.name)
		}
	}
	return nil
}

// countExecutions merges the step executions of every process and records
// how many ran more than once (any is a failure, reported loudly) and, with
// several worker processes (procs but the starter), how evenly they shared
// them.
func (h *harness) countExecutions(res *Result, procs []*proc, starter int) error {
	var counts []map[string]int
	var byWorker []int
	for i, pr := range procs {
		reply, err := pr.do(procRequest{Op: "executions"})
		if err != nil {
			return err
		}
		counts = append(counts, reply.Executions)
		if i != starter {
			steps := 0
			for _, n := range reply.Executions {
				steps += n
			}
			byWorker = append(byWorker, steps)
		}
	}
	if res.Workers > 1 {
		res.BusiestWorkerShare = busiestShare(byWorker)
	}
	total := addCounts(counts)
	duplicates, examples := repeatedSteps(total)
	res.DuplicateExecutions = &duplicates
	if want := 3 * (res.N + res.Warmup); len(total) != want {
		return fmt.Errorf("%d distinct steps executed, want %d", len(total), want)
	}
	if duplicates > 0 {
		h.logf("!!! DUPLICATE EXECUTION: %s %s: %d step executions repeated (%s)", res.Contender, res.Config, duplicates, strings.Join(examples, "; "))
		res.Error = fmt.Sprintf("%d duplicate step executions: %s", duplicates, strings.Join(examples, "; "))
	}
	return nil
}

// busiestShare is the largest of steps over their mean (0 when none ran),
// to two decimals.
func busiestShare(steps []int) float64 {
	if len(steps) == 0 {
		return 0
	}
	total := 0
	for _, n := range steps {
		total += n
	}
	if total == 0 {
		return 0
	}
	share := float64(slices.Max(steps)) * float64(len(steps)) / float64(total)
	return math.Round(share*100) / 100
}

// addCounts adds up the processes' executions by step.
func addCounts(counts []map[string]int) map[string]int {
	total := map[string]int{}
	for _, c := range counts {
		for step, n := range c {
			total[step] += n
		}
	}
	return total
}

// repeatedSteps counts the executions in counts (by step) that repeated
// a step, and describes the first ten repeated steps.
func repeatedSteps(counts map[string]int) (repeats int, examples []string) {
	for _, step := range slices.Sorted(maps.Keys(counts)) {
		if n := counts[step]; n > 1 {
			repeats += n - 1
			if len(examples) < 10 {
				examples = append(examples, fmt.Sprintf("%s ran %d times", step, n))
			}
		}
	}
	return repeats, examples
}

// procStatsOf sums the procStats of procs.
func procStatsOf(procs []*proc) (procStats, error) {
	var sum procStats
	for _, pr := range procs {
		reply, err := pr.do(procRequest{Op: "stats"})
		if err != nil {
			return sum, err
		}
		if reply.Stats == nil {
			return sum, fmt.Errorf("process %s sent no stats", pr.name)
		}
		sum.CPUNs += reply.Stats.CPUNs
		sum.AllocBytes += reply.Stats.AllocBytes
		sum.GCCycles += reply.Stats.GCCycles
	}
	return sum, nil
}

// openWindows opens every process's measurement window (cpuWindow).
func openWindows(procs []*proc) error {
	for _, pr := range procs {
		if _, err := pr.do(procRequest{Op: "window"}); err != nil {
			return err
		}
	}
	return nil
}

// closeWindows closes every process's measurement window and gives its
// samples by the process's name.
func closeWindows(procs []*proc) (map[string]windowSamples, error) {
	by := make(map[string]windowSamples, len(procs))
	for _, pr := range procs {
		reply, err := pr.do(procRequest{Op: "window-end"})
		if err != nil {
			return nil, err
		}
		if reply.Window == nil {
			return nil, fmt.Errorf("process %s sent no window", pr.name)
		}
		by[pr.name] = *reply.Window
	}
	return by, nil
}

// gcShares is the share of the processes' sampled CPU time that went to
// GC, and each process's own when there are several (nil for one).
func gcShares(by map[string]windowSamples) (float64, map[string]float64) {
	share := func(s windowSamples) float64 {
		if s.CPUNs <= 0 {
			return 0
		}
		return round3(float64(s.GCNs) / float64(s.CPUNs))
	}
	var sum windowSamples
	var each map[string]float64
	if len(by) > 1 {
		each = make(map[string]float64, len(by))
	}
	for name, s := range by {
		sum.CPUNs += s.CPUNs
		sum.GCNs += s.GCNs
		if each != nil {
			each[name] = share(s)
		}
	}
	return share(sum), each
}

// busySampler counts, every busySampleInterval, the client backends of a
// database that run a statement (pg_stat_activity.state = 'active'), by
// application_name, leaving out the harness's own.
type busySampler struct {
	stopped chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	samples int
	counts  map[string]int
}

// busySQL counts a database's active client backends by application_name,
// the sampler's own and the harness's left out (and autovacuum's, which are
// no client's).
const busySQL = `SELECT application_name, count(*) FROM pg_stat_activity
	WHERE datname = $1 AND backend_type = 'client backend' AND state = 'active'
		AND pid <> pg_backend_pid() AND application_name <> $2
	GROUP BY application_name`

func sampleBusy(ctx context.Context, admin *pgxpool.Pool, database string) *busySampler {
	s := &busySampler{stopped: make(chan struct{}), done: make(chan struct{}), counts: map[string]int{}}
	go func() {
		defer close(s.done)
		ticker := time.NewTicker(busySampleInterval)
		defer ticker.Stop()
		for {
			s.sample(ctx, admin, database)
			select {
			case <-ticker.C:
			case <-s.stopped:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return s
}

func (s *busySampler) sample(ctx context.Context, admin *pgxpool.Pool, database string) {
	rows, err := admin.Query(ctx, busySQL, database, harnessAppName)
	if err != nil {
		return
	}
	counts := map[string]int{}
	for rows.Next() {
		var (
			name string
			n    int
		)
		if rows.Scan(&name, &n) == nil {
			counts[cmp.Or(name, "(unnamed)")] += n
		}
	}
	if rows.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	for name, n := range counts {
		s.counts[name] += n
	}
}

// stop ends the sampling and returns the sampler.
func (s *busySampler) stop() *busySampler {
	close(s.stopped)
	<-s.done
	return s
}

// average returns the average number of busy backends per sample, in all
// and by application_name.
func (s *busySampler) average() (float64, map[string]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.samples == 0 {
		return 0, nil
	}
	by := map[string]float64{}
	total := 0
	for name, n := range s.counts {
		by[name] = round3(float64(n) / float64(s.samples))
		total += n
	}
	return round3(float64(total) / float64(s.samples)), by
}

// withParam returns connString (a postgres:// URL) with the query
// parameter key set to value.
func withParam(connString, key, value string) (string, error) {
	u, err := url.Parse(connString)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String(), nil
}
