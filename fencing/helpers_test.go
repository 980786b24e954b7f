package fencing_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// waitTimeout bounds every wait in these tests; nothing sleeps.
const waitTimeout = 20 * time.Second

// eventSink is an Observer that records events and wakes waiters.
type eventSink struct {
	mu     sync.Mutex
	events []fencing.Event
	wake   chan struct{}

	// hold, if set, is called with each event before it is recorded (a
	// slow observer, for tests).
	hold func(fencing.Event)
}

func newEventSink() *eventSink { return &eventSink{wake: make(chan struct{}, 1)} }

func (s *eventSink) FencingEvent(_ context.Context, event *fencing.Event) {
	if s.hold != nil {
		s.hold(*event)
	}
	s.mu.Lock()
	s.events = append(s.events, *event)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *eventSink) count(kind fencing.EventKind, jobID int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.events {
		if e.Kind == kind && (jobID == 0 || e.JobID == jobID) {
			n++
		}
	}
	return n
}

// waitFor waits until at least n events of kind for jobID (0: any job) were
// seen.
func (s *eventSink) waitFor(t *testing.T, kind fencing.EventKind, jobID int64, n int) {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	for s.count(kind, jobID) < n {
		select {
		case <-s.wake:
		case <-timer.C:
			t.Fatalf("timed out waiting for %d %s events of job %d (saw %d)", n, kind, jobID, s.count(kind, jobID))
		}
	}
}

// recv receives from ch or fails the test after waitTimeout.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting on channel")
		panic("unreachable")
	}
}

// waitUntil polls cond (a database read) until it holds or waitTimeout passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		<-ticker.C
	}
}

type blockArgs struct {
	Tag string `json:"tag"`
}

func (blockArgs) Kind() string { return "fencing_block" }

// outcome is what a blocked attempt does once released.
type outcome func(ctx context.Context, job *river.Job[blockArgs]) error

// startedAttempt is an attempt that reached Work and waits to be released.
type startedAttempt struct {
	ctx     context.Context
	job     *river.Job[blockArgs]
	release chan outcome
}

// blockWorker announces each attempt on started and blocks (ignoring its
// context, like a partitioned or stuck worker) until released or the test
// ends.
type blockWorker struct {
	river.WorkerDefaults[blockArgs]

	done       chan struct{}
	finishOnce sync.Once
	started    chan *startedAttempt
	timeout    time.Duration
}

func newBlockWorker(t *testing.T) *blockWorker {
	t.Helper()
	w := &blockWorker{done: make(chan struct{}), started: make(chan *startedAttempt, 10)}
	t.Cleanup(w.finish)
	return w
}

// finish releases every attempt still blocked, so that clients can stop.
func (w *blockWorker) finish() { w.finishOnce.Do(func() { close(w.done) }) }

func (w *blockWorker) Timeout(*river.Job[blockArgs]) time.Duration { return w.timeout }

func (w *blockWorker) Work(ctx context.Context, job *river.Job[blockArgs]) error {
	attempt := &startedAttempt{ctx: ctx, job: job, release: make(chan outcome, 1)}
	select {
	case w.started <- attempt:
	case <-w.done:
		return errors.New("test over")
	}
	select {
	case out := <-attempt.release:
		return out(ctx, job)
	case <-w.done:
		return errors.New("test over")
	}
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "fencing_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

type clientOpts struct {
	driver     *fencing.Driver // nil: plain riverpgxv5
	jobTimeout time.Duration
	logs       *logBuffer // nil: logs are discarded
	maxWorkers int
	noLeader   bool
	poll       time.Duration // FetchPollInterval; defaults to 50ms
	stuck      time.Duration
	worker     *blockWorker
}

func testConfig(schema string, opts *clientOpts) *river.Config {
	workers := river.NewWorkers()
	if opts.worker != nil {
		river.AddWorker(workers, opts.worker)
	}
	river.AddWorker(workers, &noopWorker{})
	config := &river.Config{
		FetchCooldown:          5 * time.Millisecond,
		FetchPollInterval:      cmp.Or(opts.poll, 50*time.Millisecond),
		JobStuckThreshold:      opts.stuck,
		JobTimeout:             opts.jobTimeout,
		LeaderElectionDisabled: opts.noLeader,
		Logger:                 slog.New(newStartedHandler(opts.logs.logger().Handler())),
		Queues:                 map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: max(opts.maxWorkers, 1)}},
		Schema:                 schema,
		TestOnly:               true,
		Workers:                workers,
	}
	if opts.driver != nil {
		config.Plugins = []rivertype.Plugin{opts.driver.Plugin()}
	}
	return config
}

// logBuffer keeps what a River client (and so its fencing driver) logs, as
// JSON lines.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logger logs into b; a nil b discards.
func (b *logBuffer) logger() *slog.Logger {
	if b == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// startClient starts a River client on schema, stopped when the test ends.
func startClient(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, opts *clientOpts) *river.Client[pgx.Tx] {
	t.Helper()
	config := testConfig(schema, opts)
	var (
		client *river.Client[pgx.Tx]
		err    error
	)
	if opts.driver != nil {
		client, err = river.NewClient[pgx.Tx](opts.driver, config)
	} else {
		client, err = river.NewClient[pgx.Tx](riverpgxv5.New(pool), config)
	}
	require.NoError(t, err)
	startFully(ctx, t, client, config)
	t.Cleanup(func() {
		if opts.worker != nil {
			opts.worker.finish()
		}
		stopClient(ctx, t, client)
	})
	return client
}

// startFully starts client (made from config) and returns once every one of
// its services has started. River's Start returns before that, and its
// own wait for them reads each service's started channel only when it
// reaches it: a test that stopped a service meanwhile (StopHeartbeats)
// left it waiting on a fresh channel that nothing closes, and the client
// then never stopped. River says that its services started only by
// logging it, so config's logger is wrapped to hear that.
func startFully(ctx context.Context, t *testing.T, client *river.Client[pgx.Tx], config *river.Config) {
	t.Helper()
	require.NoError(t, client.Start(ctx))
	select {
	case <-config.Logger.Handler().(*startedHandler).started:
	case <-time.After(waitTimeout):
		require.FailNow(t, "River did not report the client started")
	}
}

// startedHandler passes records on to next and closes started when River
// logs that a client started (all of its services have).
type startedHandler struct {
	next    slog.Handler
	once    *sync.Once
	started chan struct{}
}

func newStartedHandler(next slog.Handler) *startedHandler {
	return &startedHandler{next: next, once: new(sync.Once), started: make(chan struct{})}
}

func (h *startedHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo || h.next.Enabled(ctx, level)
}

func (h *startedHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "River client started" {
		h.once.Do(func() { close(h.started) })
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *startedHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &startedHandler{next: h.next.WithAttrs(attrs), once: h.once, started: h.started}
}

func (h *startedHandler) WithGroup(name string) slog.Handler {
	return &startedHandler{next: h.next.WithGroup(name), once: h.once, started: h.started}
}

// stopClient stops client within 15 seconds; when it cannot, the test fails
// with every goroutine's stack, to show what the stop waited for.
func stopClient(ctx context.Context, t *testing.T, client *river.Client[pgx.Tx]) {
	t.Helper()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		var stacks strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 2)
		require.NoError(t, err, "the client did not stop; goroutines:\n%s", stacks.String())
	}
}

// newDriver returns a fencing driver with short, test-sized intervals.
func newDriver(t *testing.T, pool *pgxpool.Pool, sink *eventSink, config *fencing.Config) *fencing.Driver {
	t.Helper()
	if config == nil {
		config = &fencing.Config{LeaseTTL: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond, ReaperInterval: 100 * time.Millisecond}
	}
	if sink != nil {
		config.Observer = sink
	}
	driver, err := fencing.NewDriver(pool, config)
	require.NoError(t, err)
	return driver
}

// jobRow is river_job as these tests read it, lease columns included.
type jobRow struct {
	Attempt        int
	Errors         int
	LeaseExpiresAt pgtype.Timestamptz
	LeaseLastToken pgtype.Text
	LeaseToken     pgtype.Text
	Metadata       map[string]any
	State          string
}

func getJob(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, id int64) *jobRow {
	t.Helper()
	var row jobRow
	err := pool.QueryRow(ctx, `
SELECT attempt, coalesce(array_length(errors, 1), 0), lease_expires_at, lease_last_token::text,
    lease_token::text, metadata, state::text
FROM `+pgx.Identifier{schema, "river_job"}.Sanitize()+` WHERE id = $1`, id).Scan(
		&row.Attempt, &row.Errors, &row.LeaseExpiresAt, &row.LeaseLastToken, &row.LeaseToken, &row.Metadata, &row.State)
	require.NoError(t, err)
	return &row
}

// rescue takes a running job away from its attempt, as the lease reaper
// does once the lease expired (running → available), so that another client
// can fetch it while the old attempt still runs. It ends the attempt's lease
// in the same statement, as an operator must (the lease trigger refuses a
// statement that leaves a live lease as it was).
func rescue(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, id int64) {
	t.Helper()
	tag, err := pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "river_job"}.Sanitize()+`
SET state = 'available', scheduled_at = now(), lease_expires_at = NULL WHERE id = $1 AND state = 'running'`, id)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())
}

func waitForState(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, id int64, state string) *jobRow {
	t.Helper()
	var row *jobRow
	waitUntil(t, "job is "+state, func() bool {
		row = getJob(ctx, t, pool, schema, id)
		return row.State == state
	})
	return row
}

func complete(context.Context, *river.Job[blockArgs]) error { return nil }

func fmtType(v any) string { return fmt.Sprintf("%T", v) }

// waitPastRestartGrace waits until the server's epoch (its start, or its
// latest crash reset) is more than ttl ago: until then every lease gets a
// grace period (a freshly started test cluster looks like a restarted one).
func waitPastRestartGrace(ctx context.Context, t *testing.T, pool *pgxpool.Pool, ttl time.Duration) {
	t.Helper()
	waitUntil(t, "the server has been up longer than the lease TTL", func() bool {
		var past bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT "+fencing.ServerEpochSQL+" + $1::interval < now()", ttl).Scan(&past))
		return past
	})
}
