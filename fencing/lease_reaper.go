package fencing

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivershared/startstop"
)

// reapBatchMax caps how many jobs one reaper statement recovers.
const reapBatchMax = 1000

// leaseReaper returns running jobs whose lease expired to available (or
// discarded past max attempts, or cancelled if a cancel was requested), at
// once and with an error entry saying so, and notifies fetchers. River runs
// it on every client that works jobs (a plugin service), and in each schema
// it reaps only in the one process that holds the schema's reaper lock
// (reaperElection): whichever process leads River, plain or fenced, one
// fenced process reaps.
type leaseReaper struct {
	startstop.BaseStartStop

	driver   *Driver
	election reaperElection
	pilot    *pilot
	restart  restartWatch
}

// restartWatch tells from when the leases of a restarted Postgres server get
// their grace period. Workers cannot renew while the server is down nor
// while it recovers, so after a restart every lease lasts at least LeaseTTL
// past the grace's start. A restart is a change of the server's epoch
// (serverEpochSQL): a new postmaster, or a crash reset under the same one.
// The epoch itself is a poor start: crash recovery runs after it, and when
// recovery takes most of a LeaseTTL the workers have no time left to renew
// before the first reap takes back every running attempt. So when the
// reaper sees the epoch change between two of its passes, the grace starts
// at the first pass that saw the new one (database time), which is after
// the server accepted connections again. The watch lives as long as the
// driver, across terms of leadership: a process that led before the restart
// and leads again later grants the grace from its first pass then (at most
// one LeaseTTL late, once per restart). A process whose reaper never saw
// the server before knows no better than the epoch. River's rescuer,
// through the Pilot, counts an epoch the watch has not seen yet (a restart
// since the reaper's last pass) as in its grace until the reaper sees it.
type restartWatch struct {
	mu        sync.Mutex
	started   time.Time // the server's epoch at the latest pass
	graceFrom time.Time // zero: from the epoch
}

// observe records a pass's reading of the server's epoch and now().
func (w *restartWatch) observe(started, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started.IsZero() && !started.Equal(w.started) {
		w.graceFrom = now
	}
	w.started = started
}

// args are the arguments restartGraceSQL's from and seen stand for: when
// the grace starts (NULL: at the server's epoch), and the epoch the watch
// saw last (NULL: none).
func (w *restartWatch) args() (from, seen pgtype.Timestamptz) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return pgtype.Timestamptz{Time: w.graceFrom, Valid: !w.graceFrom.IsZero()},
		pgtype.Timestamptz{Time: w.started, Valid: !w.started.IsZero()}
}

// serverEpochSQL is when the server last began from fresh shared memory:
// its postmaster's start, or the crash reset since then. After a server
// process dies (an out-of-memory kill, a segfault) the postmaster ends
// every session and recovers from the crash without restarting
// (restart_after_crash, on by default), so pg_postmaster_start_time() does
// not change. On Postgres 15 and later, the recovery discards the
// cumulative statistics and stamps their reset time (when recovery
// begins), which is how a crash reset shows; a clean restart keeps the old
// reset time. An administrator's reset of those statistics
// (pg_stat_reset_shared('bgwriter'), or with no argument on Postgres 17)
// looks the same and costs one grace period. Postgres 14's statistics
// collector reports a reset time of now when it has no statistics file (it
// is disabled, or has not written one yet), which would restart the grace
// at every pass, so on Postgres 14 the epoch is the postmaster's start
// alone and a crash reset gets no grace. Each occurrence is a scalar
// subquery, evaluated once per statement.
const serverEpochSQL = "(SELECT greatest(pg_postmaster_start_time(), " +
	"CASE WHEN current_setting('server_version_num')::int >= 150000 THEN pg_stat_get_bgwriter_stat_reset_time() END))"

// restartGraceSQL is the time until which every lease is alive after a
// restart: LeaseTTL ($ttl) past the latest of the server's epoch, the grace
// start the watch knows ($from), and now() when the server's epoch is not
// the one the watch saw last ($seen): a restart the reaper has not seen
// yet. greatest ignores NULLs.
func restartGraceSQL(ttl, from, seen string) string {
	return "greatest(" + serverEpochSQL + ", " + from + "::timestamptz, " +
		"CASE WHEN " + serverEpochSQL + " <> " + seen + "::timestamptz THEN now() END) + " + ttl + "::interval"
}

func newLeaseReaper(driver *Driver, p *pilot) *leaseReaper {
	return &leaseReaper{driver: driver, pilot: p}
}

func (r *leaseReaper) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := r.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		started()
		defer stopped()
		defer r.election.resign()
		if !r.election.eligible(ctx, r.pilot) {
			<-ctx.Done()
			return
		}
		ticker := time.NewTicker(r.driver.config.ReaperInterval)
		defer ticker.Stop()
		for {
			if _, err := r.pass(ctx); err != nil && ctx.Err() == nil {
				r.driver.logger().WarnContext(ctx, "fencing: reaping expired leases", slog.String("error", err.Error()))
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	return nil
}

// pass reaps every fenced schema River has used with this client whose
// reaper lock this process holds or takes now, on the connection that holds
// the lock: a process whose session ended (and with it its hold) reaps no
// more.
func (r *leaseReaper) pass(ctx context.Context) (int, error) {
	total, watched := 0, false
	for _, schema := range r.pilot.knownSchemas() {
		fenced, err := r.pilot.fencedPool(ctx, schema)
		if err != nil {
			return total, err
		}
		if !fenced {
			continue
		}
		if !watched {
			if err := r.watchRestarts(ctx); err != nil {
				return total, err
			}
			watched = true
		}
		conn, err := r.election.hold(ctx, r.driver, schema)
		if err != nil {
			return total, err
		}
		if conn == nil {
			continue // another process reaps schema
		}
		n, err := r.reapSchema(ctx, conn, schema)
		total += n
		if err != nil {
			r.election.lost(ctx, r.driver, err)
			return total, err
		}
	}
	return total, nil
}

// watchRestarts reads the server's epoch for the restart watch, in every
// fenced process, reaping or not: River's rescuer may run in a process that
// does not reap (River's leader is elected apart), and it takes its grace
// after a restart from this process's watch (Pilot.JobGetStuck).
func (r *leaseReaper) watchRestarts(ctx context.Context) error {
	var started, now time.Time
	if err := r.driver.pool.QueryRow(ctx, "SELECT "+serverEpochSQL+", now()").Scan(&started, &now); err != nil {
		return fmt.Errorf("reading the server's epoch: %w", err)
	}
	r.restart.observe(started, now)
	return nil
}

// reapAll reaps every fenced schema River has used with this client through
// the pool, whoever holds the reaper locks (tests).
func (r *leaseReaper) reapAll(ctx context.Context) (int, error) {
	total := 0
	for _, schema := range r.pilot.knownSchemas() {
		fenced, err := r.pilot.fencedPool(ctx, schema)
		if err != nil {
			return total, err
		}
		if !fenced {
			continue
		}
		n, err := r.reapSchema(ctx, r.driver.pool, schema)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// txBeginner is what pgx pools and connections offer for transactions.
type txBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// reapSchema reaps schema in batches until none is full.
func (r *leaseReaper) reapSchema(ctx context.Context, db txBeginner, schema string) (int, error) {
	total := 0
	for {
		n, err := r.reap(ctx, db, schema)
		total += n
		if err != nil || n < reapBatchMax {
			return total, err
		}
	}
}

type reapedJob struct {
	Attempt int
	ID      int64
	Queue   string
	State   string
}

func (r *leaseReaper) reap(ctx context.Context, db txBeginner, schema string) (int, error) {
	table := tableName(schema, "river_job")
	stateType := tableName(schema, "river_job_state")
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("reaping expired leases in schema %q: %w", schema, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// On the connection that reaps: a pool in front of several servers
	// could answer a statement of its own from another one.
	var started, now time.Time
	if err := tx.QueryRow(ctx, "SELECT "+serverEpochSQL+", now()").Scan(&started, &now); err != nil {
		return 0, fmt.Errorf("reaping expired leases in schema %q: reading the server's epoch: %w", schema, err)
	}
	r.restart.observe(started, now)
	from, seen := r.restart.args()
	rows, err := tx.Query(ctx, `
WITH expired AS (
    SELECT id FROM `+table+`
    WHERE state = 'running'
        AND lease_expires_at IS NOT NULL
        AND greatest(lease_expires_at, `+restartGraceSQL("$1", "$3", "$4")+`) < now()
    ORDER BY id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
decided AS (
    SELECT j.id,
        CASE WHEN j.metadata ? 'cancel_attempted_at' THEN 'cancelled'
             WHEN j.attempt >= j.max_attempts THEN 'discarded'
             ELSE 'available' END AS new_state
    FROM `+table+` j JOIN expired e ON e.id = j.id
)
UPDATE `+table+` j
SET state = d.new_state::`+stateType+`,
    finalized_at = CASE WHEN d.new_state = 'available' THEN NULL ELSE now() END,
    scheduled_at = CASE WHEN d.new_state = 'available' THEN now() ELSE j.scheduled_at END,
    errors = array_append(j.errors, jsonb_build_object(
        'at', now(),
        'attempt', j.attempt,
        'error', format('fencing: lease of attempt %s expired at %s without renewal; the job was recovered', j.attempt, j.lease_expires_at),
        'trace', ''))
FROM decided d
WHERE j.id = d.id
RETURNING j.attempt, j.id, j.queue, j.state::text`, r.driver.config.LeaseTTL, reapBatchMax, from, seen)
	if err != nil {
		return 0, fmt.Errorf("reaping expired leases in schema %q: %w", schema, err)
	}
	reaped, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reapedJob])
	if err != nil {
		return 0, fmt.Errorf("reaping expired leases in schema %q: %w", schema, err)
	}
	if hook := r.driver.config.OnFinalized; hook != nil {
		var finalized []int64
		for _, job := range reaped {
			if job.State != "available" {
				finalized = append(finalized, job.ID)
			}
		}
		if len(finalized) > 0 {
			if err := hook(ctx, tx, schema, finalized); err != nil {
				return 0, fmt.Errorf("fencing: OnFinalized for reaped jobs %v: %w", finalized, err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("reaping expired leases in schema %q: %w", schema, err)
	}
	for _, job := range reaped {
		r.driver.counters.emit(ctx, &Event{Attempt: job.Attempt, JobID: job.ID, Kind: EventLeaseExpired})
		r.driver.logger().WarnContext(ctx, "fencing: recovered a job whose lease expired",
			slog.Int64("job_id", job.ID), slog.Int("attempt", job.Attempt), slog.String("state", job.State))
	}
	return len(reaped), r.driver.notifyRecovered(ctx, schema, reaped)
}

// notifyRecovered wakes the fetchers of the queues where recovered jobs
// became available again.
func (d *Driver) notifyRecovered(ctx context.Context, schema string, recovered []reapedJob) error {
	var queues []string
	for _, job := range recovered {
		if job.State == "available" && !slices.Contains(queues, job.Queue) {
			queues = append(queues, job.Queue)
		}
	}
	if len(queues) == 0 || !d.SupportsListenNotify() {
		return nil
	}
	payloads := make([]string, len(queues))
	for i, queue := range queues {
		payload, err := json.Marshal(map[string]string{"queue": queue})
		if err != nil {
			return err
		}
		payloads[i] = string(payload)
	}
	// River's insert topic: producers of these queues fetch at once.
	if err := d.Driver.GetExecutor().NotifyMany(ctx, &riverdriver.NotifyManyParams{
		Payload: payloads, Schema: schema, Topic: "river_insert",
	}); err != nil {
		return fmt.Errorf("notifying fetchers: %w", err)
	}
	return nil
}
