package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/integration/chaos"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/pgcluster"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/worker"
)

// Sizes. CI runs the defaults; `make chaos` sets WEIR_CHAOS_WORKFLOWS (and may
// set the others) for a long run.
const (
	envWorkflows = "WEIR_CHAOS_WORKFLOWS"
	envWorkers   = "WEIR_CHAOS_WORKERS"
	envSteps     = "WEIR_CHAOS_STEPS"
	envRate      = "WEIR_CHAOS_RATE"    // workflow starts per second
	envSignals   = "WEIR_CHAOS_SIGNALS" // signals each workflow waits for
	envRace      = "WEIR_CHAOS_RACE"    // build the worker program with -race
	// envLogs names a directory to keep each scenario's logs in (Postgres's
	// log and every process's warnings), whether it passed or not.
	envLogs = "WEIR_CHAOS_LOGS"

	chaosSchema = "weir"
	leaseTTL    = time.Second
)

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	return n
}

var (
	workerBinaryOnce sync.Once
	workerBinaryPath string
	workerBinaryErr  error
)

// workerBinary builds integration/cmd/chaosworker once per test binary.
func workerBinary(t *testing.T) string {
	t.Helper()
	workerBinaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "weir-chaosworker-")
		if err != nil {
			workerBinaryErr = err
			return
		}
		workerBinaryPath = filepath.Join(dir, "chaosworker")
		args := []string{"build", "-o", workerBinaryPath}
		if os.Getenv(envRace) != "" {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "./cmd/chaosworker")...).CombinedOutput() //nolint:noctx // a build
		if err != nil {
			workerBinaryErr = fmt.Errorf("building chaosworker: %w\n%s", err, out)
		}
	})
	require.NoError(t, workerBinaryErr)
	return workerBinaryPath
}

// workerProc is one slot of the fleet: a worker process that faults may
// kill and restart, pause and resume, cut off and reconnect.
type workerProc struct {
	slot  int
	url   string
	proxy *dbtest.Proxy // nil: straight to the server

	// faulting is held through a kill and its restart, and through a
	// pause: two fault loops (TestChaosMixed) that picked the same worker
	// take turns. Without it both could restart the slot, one process
	// replacing the other in cmd and done, and the orphan outlived the test
	// (goleak found its Wait goroutine).
	faulting sync.Mutex

	mu     sync.Mutex
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   chan struct{}
	paused bool
	output bytes.Buffer // every incarnation's stdout and stderr
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

var outputMu sync.Mutex // guards every workerProc.output

func (p *workerProc) start(t *testing.T, h *harness) {
	t.Helper()
	cmd := exec.Command(workerBinary(t)) //nolint:noctx // signalled by the test
	cmd.Env = append(os.Environ(),
		chaos.EnvDatabaseURL+"="+p.url,
		chaos.EnvSchema+"="+chaosSchema,
		chaos.EnvLeaseTTL+"="+h.leaseTTL.String(),
		chaos.EnvWorkerName+"="+fmt.Sprint("w", p.slot),
	)
	if h.logDir != "" {
		cmd.Env = append(cmd.Env, chaos.EnvLogLevel+"=warn")
	}
	cmd.Stdout = lockedWriter{&outputMu, &p.output}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = workerSysProcAttr()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.stdin, p.done, p.paused = cmd, stdin, done, false
	p.mu.Unlock()
}

func (p *workerProc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return p.cmd.Process.Signal(sig)
}

// kill SIGKILLs the process and waits for it to be gone.
func (p *workerProc) kill(ctx context.Context) error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return err
	}
	return p.wait(ctx)
}

func (p *workerProc) wait(ctx context.Context) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("worker w%d did not exit: %w", p.slot, ctx.Err())
	}
}

// stop resumes the process if paused, then asks it to stop (SIGTERM) and
// waits; past the timeout it is killed.
func (p *workerProc) stop(ctx context.Context) error {
	p.mu.Lock()
	paused, exited := p.paused, false
	select {
	case <-p.done:
		exited = true
	default:
	}
	p.mu.Unlock()
	if exited {
		return nil
	}
	if paused {
		_ = p.signal(syscall.SIGCONT)
	}
	_ = p.signal(syscall.SIGTERM)
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := p.wait(stopCtx); err != nil {
		_ = p.kill(context.WithoutCancel(ctx))
		return err
	}
	return nil
}

// harness is one scenario's world: a private Postgres server, a fleet of
// worker processes, a client, and counters of faults injected.
type harness struct {
	t        *testing.T
	ctx      context.Context
	server   *pgcluster.Cluster
	pool     *pgxpool.Pool
	client   *client.Client
	tables   chaos.Tables
	leaseTTL time.Duration
	workers  []*workerProc
	eager    bool   // starts are eager (harnessOpts.eager)
	logDir   string // where the scenario's logs are kept (WEIR_CHAOS_LOGS), or ""

	signals int       // Bonus signals each workflow waits for
	began   time.Time // the workload's start
	rate    float64   // workflow starts per second

	faultsMu sync.Mutex
	faults   map[string]int
}

type harnessOpts struct {
	workers  int
	viaProxy bool // each worker reaches Postgres through its own proxy
	eager    bool // eager starts, taken by a worker in this process
}

func newHarness(t *testing.T, opts harnessOpts) *harness {
	t.Helper()
	ctx := t.Context()
	workerBinary(t) // build before the clock of any scenario starts

	server := dbtest.Server(ctx, t, nil)
	logDir, inProcessLog := scenarioLogs(t, server)
	config, err := pgxpool.ParseConfig(server.URL("postgres"))
	require.NoError(t, err)
	config.MaxConns = 30
	config.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	migrator, err := migrations.New(pool, &migrations.Config{Schema: chaosSchema})
	require.NoError(t, err)
	_, err = migrator.Up(ctx, nil)
	require.NoError(t, err)
	tables := chaos.NewTables(chaosSchema)
	_, err = pool.Exec(ctx, tables.CreateSQL())
	require.NoError(t, err)

	h := &harness{
		t: t, ctx: ctx, server: server, pool: pool, tables: tables,
		leaseTTL: leaseTTL, faults: make(map[string]int), eager: opts.eager, logDir: logDir,
	}
	var eagerStarter client.EagerStarter // the in-process worker, linked to the client
	if opts.eager {
		// Configured as the worker processes are; it survives every fault
		// but Postgres's restarts.
		w, err := worker.New(pool, &worker.Config{
			Fencing:       &fencing.Config{LeaseTTL: leaseTTL, ReaperInterval: leaseTTL / 5},
			Logger:        slog.New(slog.NewTextHandler(inProcessLog, &slog.HandlerOptions{Level: slog.LevelWarn})),
			Schema:        chaosSchema,
			SweepInterval: 500 * time.Millisecond,
		})
		require.NoError(t, err)
		worker.AddWorkflow(w, &chaos.Workflow{})
		worker.AddActivity(w, &chaos.PlainActivity{Pool: pool, Tables: tables, Worker: "in-process"})
		worker.AddActivity(w, &chaos.EffectActivity{Pool: pool, Tables: tables, Worker: "in-process"})
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
			defer cancel()
			_ = w.Stop(stopCtx)
		})
		eagerStarter = w
	}
	c, err := client.New(pool, &client.Config{PollInterval: 200 * time.Millisecond, Schema: chaosSchema, EagerStarter: eagerStarter})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	h.client = c
	for slot := range opts.workers {
		p := &workerProc{slot: slot, url: server.URL("postgres")}
		if opts.viaProxy {
			p.proxy = dbtest.NewProxy(ctx, t, p.url)
			p.url = p.proxy.URL()
		}
		p.start(t, h)
		h.workers = append(h.workers, p)
	}
	t.Cleanup(func() {
		h.stopWorkers()
		outputMu.Lock()
		for _, p := range h.workers {
			// A worker process must never panic or race (build it with
			// WEIR_CHAOS_RACE=1 to look for races under faults).
			for _, sign := range []string{"panic:", "WARNING: DATA RACE", "fatal error:"} {
				if i := strings.Index(p.output.String(), sign); i >= 0 {
					t.Errorf("worker w%d: %s", p.slot, p.output.String()[i:min(len(p.output.String()), i+3000)])
				}
			}
		}
		if logDir != "" {
			for _, p := range h.workers {
				if err := os.WriteFile(filepath.Join(logDir, fmt.Sprintf("w%d.log", p.slot)), p.output.Bytes(), 0o644); err != nil {
					t.Errorf("keeping worker w%d's log: %v", p.slot, err)
				}
			}
		}
		outputMu.Unlock()
		if t.Failed() {
			outputMu.Lock()
			defer outputMu.Unlock()
			for _, p := range h.workers {
				out := p.output.String()
				if len(out) > 8000 {
					out = "…" + out[len(out)-8000:]
				}
				t.Logf("worker w%d output:\n%s", p.slot, out)
			}
		}
	})
	return h
}

// stopWorkers heals every fault on the workers' side and stops them
// gracefully, so that their last fencing counters reach chaos_stats.
func (h *harness) stopWorkers() {
	ctx := context.WithoutCancel(h.ctx)
	var wg sync.WaitGroup
	for _, p := range h.workers {
		if p.proxy != nil {
			p.proxy.SetLatency(0)
			p.proxy.Restore()
		}
		wg.Go(func() {
			if err := p.stop(ctx); err != nil {
				h.t.Errorf("stopping worker w%d: %v", p.slot, err)
			}
		})
	}
	wg.Wait()
}

func (h *harness) fault(kind string) {
	h.faultsMu.Lock()
	defer h.faultsMu.Unlock()
	h.faults[kind]++
}

func (h *harness) faultCount() (total int, summary string) {
	h.faultsMu.Lock()
	defer h.faultsMu.Unlock()
	for _, kind := range slices.Sorted(maps.Keys(h.faults)) {
		if n := h.faults[kind]; n > 0 {
			total += n
			summary += fmt.Sprintf(" %s=%d", kind, n)
		}
	}
	return total, summary
}

func (h *harness) randomWorker() *workerProc { return h.workers[rand.IntN(len(h.workers))] }

// busyWorker is a worker that is running an activity right now (one whose
// plain step recorded its execution and whose job is still running with
// that attempt), so that a fault lands mid-activity; else a random one.
func (h *harness) busyWorker(ctx context.Context) *workerProc {
	return h.busyWorkerWhere(ctx, "")
}

// busyFollower is a busy worker that is not River's leader (which runs the
// lease reaper), so that its leases expire and its jobs move on while it is
// frozen; else a random one.
func (h *harness) busyFollower(ctx context.Context) *workerProc {
	return h.busyWorkerWhere(ctx, " AND j.attempted_by[array_upper(j.attempted_by, 1)] NOT IN (SELECT leader_id FROM "+
		dbschema.Qualify(chaosSchema, "river_leader")+")")
}

// busyWorkerWhere looks for a busy worker matching where for up to
// busyWorkerWait, so that a fault between two activities still lands on
// one; it falls back to a random worker.
func (h *harness) busyWorkerWhere(ctx context.Context, where string) *workerProc {
	deadline := time.Now().Add(busyWorkerWait)
	for {
		if p := h.busyWorkerNow(ctx, where); p != nil {
			return p
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 10*time.Millisecond) {
			return h.randomWorker()
		}
	}
}

// busyWorkerWait is how long busyWorkerWhere looks for a busy worker.
const busyWorkerWait = time.Second

// busyWorkerNow is a worker running an activity matching where, or nil.
func (h *harness) busyWorkerNow(ctx context.Context, where string) *workerProc {
	var name string
	err := h.pool.QueryRow(ctx, "SELECT x.worker FROM "+h.tables.Exec+" x JOIN "+h.names().RiverJob+" j ON j.id = x.job_id AND j.attempt = x.attempt"+
		" WHERE j.state = 'running'"+where+" ORDER BY random() LIMIT 1").Scan(&name)
	if err != nil {
		return nil
	}
	var slot, pid int
	if _, err := fmt.Sscanf(name, "w%d/%d", &slot, &pid); err != nil || slot >= len(h.workers) {
		return nil
	}
	p := h.workers[slot]
	p.mu.Lock()
	same := p.cmd.Process.Pid == pid
	p.mu.Unlock()
	if !same {
		return nil
	}
	return p
}

// sleepCtx waits d, the length of a fault, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// --- faults; each returns false once ctx ended ---

// killOne SIGKILLs a random worker and starts its slot again after pause.
func (h *harness) killOne(ctx context.Context, restartAfter time.Duration) bool {
	p := h.busyWorker(ctx)
	p.faulting.Lock()
	defer p.faulting.Unlock()
	if err := p.kill(ctx); err != nil {
		return false
	}
	h.fault("kill")
	sleepCtx(ctx, restartAfter)
	p.start(h.t, h)
	return ctx.Err() == nil
}

// pauseOne SIGSTOPs a random worker past its lease, so the reaper gives its
// jobs to others, then SIGCONTs it: it wakes up holding stale attempts and
// tries to finish them.
func (h *harness) pauseOne(ctx context.Context) bool {
	return h.pause(ctx, h.busyFollower(ctx))
}

// pauseAny is pauseOne of any worker, the leader included (leader failover).
func (h *harness) pauseAny(ctx context.Context) bool { return h.pause(ctx, h.randomWorker()) }

func (h *harness) pause(ctx context.Context, p *workerProc) bool {
	p.faulting.Lock()
	defer p.faulting.Unlock()
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return false
	}
	h.fault("pause")
	ok := sleepCtx(ctx, 2*h.leaseTTL+h.leaseTTL/2)
	_ = p.signal(syscall.SIGCONT)
	return ok
}

// cutOne cuts a random worker off from Postgres past its lease, then
// reconnects it.
func (h *harness) cutOne(ctx context.Context) bool {
	p := h.busyWorker(ctx)
	p.proxy.Cut()
	h.fault("cut")
	ok := sleepCtx(ctx, 2*h.leaseTTL)
	p.proxy.Restore()
	return ok
}

// slowOne adds latency between a random worker and Postgres for a while.
func (h *harness) slowOne(ctx context.Context) bool {
	p := h.randomWorker()
	p.proxy.SetLatency(time.Duration(20+rand.IntN(60)) * time.Millisecond)
	h.fault("latency")
	ok := sleepCtx(ctx, 2*h.leaseTTL)
	p.proxy.SetLatency(0)
	return ok
}

// restartPostgres crashes the server (immediate shutdown: crash recovery on
// start) and starts it again.
func (h *harness) restartPostgres(ctx context.Context) bool {
	if err := h.server.Crash(context.WithoutCancel(ctx)); err != nil {
		h.t.Errorf("crashing postgres: %v", err)
		return false
	}
	h.fault("pg-restart")
	sleepCtx(ctx, 200*time.Millisecond)
	if err := h.server.Start(context.WithoutCancel(ctx)); err != nil {
		h.t.Errorf("starting postgres: %v", err)
		return false
	}
	return ctx.Err() == nil
}

// crashBackend kills one client backend of the server with SIGKILL, as the
// kernel's out-of-memory killer would: the postmaster ends every session
// and recovers from the crash in place, its start time unchanged.
func (h *harness) crashBackend(ctx context.Context) bool {
	var pid int
	err := h.pool.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'"+
		" AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1").Scan(&pid)
	if err != nil {
		// The server is restarting, or no other session is open: try later.
		return ctx.Err() == nil
	}
	if err := h.server.CrashBackend(context.WithoutCancel(ctx), pid); err != nil {
		if errors.Is(err, pgcluster.ErrNotServerProcess) {
			return ctx.Err() == nil // the session ended meanwhile: try later
		}
		h.t.Errorf("crashing a postgres backend: %v", err)
		return false
	}
	h.fault("pg-backend-crash")
	return ctx.Err() == nil
}

// pausePostgres freezes the whole server past the lease TTL: every lease
// looks expired by wall clock when it wakes up.
func (h *harness) pausePostgres(ctx context.Context) bool {
	if err := h.server.Pause(); err != nil {
		h.t.Errorf("pausing postgres: %v", err)
		return false
	}
	h.fault("pg-pause")
	ok := sleepCtx(ctx, h.leaseTTL+h.leaseTTL/2)
	if err := h.server.Resume(); err != nil {
		h.t.Errorf("resuming postgres: %v", err)
		return false
	}
	return ok
}

// --- workload ---

func workflowID(i int) string { return fmt.Sprint("chaos-", i) }

// startAll starts the workflows with a few concurrent callers. A start that
// fails (Postgres restarting, a connection cut) is retried with the same
// request ID: idempotent, so a retry after a lost reply cannot start twice.
func (h *harness) startAll(ctx context.Context, n int, args func(i int) chaos.WorkflowArgs) {
	h.t.Helper()
	var wg sync.WaitGroup
	next := atomic.Int64{}
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				h.pace(ctx, i)
				if err := h.startRetrying(ctx, i, args(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(h.t, err)
	}
}

// pace waits until workflow i is due: starts are spread at h.rate per
// second, so that faults land on a fleet with work at every stage.
func (h *harness) pace(ctx context.Context, i int) {
	due := h.began.Add(time.Duration(float64(i) / h.rate * float64(time.Second)))
	sleepCtx(ctx, time.Until(due))
}

func (h *harness) startRetrying(ctx context.Context, i int, args chaos.WorkflowArgs) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := h.client.Start(ctx, args, &client.StartOpts{EagerStart: h.eager, WorkflowID: workflowID(i), RequestID: fmt.Sprint("req-", i)})
		if err == nil {
			return nil
		}
		if errors.Is(err, client.ErrWorkflowAlreadyStarted) || errors.Is(err, client.ErrRequestConflict) || time.Now().After(deadline) {
			return fmt.Errorf("starting workflow %d: %w", i, err)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// signalAll sends each workflow its Bonus signals, 1 to h.signals, paced
// like the starts. A signal that fails (a fault) is retried with the same
// request ID: a retry after a lost reply must not deliver it twice.
func (h *harness) signalAll(ctx context.Context, n int) error {
	var wg sync.WaitGroup
	var next atomic.Int64
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				h.pace(ctx, i)
				for k := 1; k <= h.signals; k++ {
					if err := h.signalRetrying(ctx, i, k); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func (h *harness) signalRetrying(ctx context.Context, i, k int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := h.client.Signal(ctx, workflowID(i), uuid.Nil, chaos.Bonus{N: k}, &client.SignalOpts{RequestID: fmt.Sprint("sig-", i, "-", k)})
		if err == nil {
			return nil
		}
		if errors.Is(err, client.ErrRunNotFound) && time.Now().Before(deadline) {
			// Not started yet (the start is paced the same way, or a
			// storm is still deciding): try again.
			sleepCtx(ctx, 50*time.Millisecond)
			continue
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("signal %d to workflow %d: %w", k, i, err)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// scenarioLogs prepares the scenario's log directory under WEIR_CHAOS_LOGS
// (one per test, emptied first) and returns it with the writer for the
// in-process worker's warnings; without WEIR_CHAOS_LOGS, "" and io.Discard.
// Postgres's log is copied there when the test ends, before the server's
// directory goes.
func scenarioLogs(t *testing.T, server *pgcluster.Cluster) (string, io.Writer) {
	t.Helper()
	root := os.Getenv(envLogs)
	if root == "" {
		return "", io.Discard
	}
	dir := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	f, err := os.Create(filepath.Join(dir, "in-process.log"))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = f.Close()
		data, err := os.ReadFile(server.LogPath())
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "postgres.log"), data, 0o644)
		}
		if err != nil {
			t.Errorf("keeping Postgres's log: %v", err)
		}
		t.Logf("logs kept in %s", dir)
	})
	return dir, lockedWriter{new(sync.Mutex), f}
}
