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
// their grace period: the first pass of this driver's reaper that saw the
// server's new epoch (serverEpochSQL), or the epoch itself for a server the
// reaper never saw before (decision 0007). It lives as long as the driver.
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
// its postmaster's start or, on Postgres 15 and later, the crash reset since
// then, which shows as the reset time of the cumulative statistics (decision
// 0007). Each occurrence is a scalar subquery, evaluated once per statement.
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
	watched := false
	return r.eachFencedSchema(ctx, func(schema string) (int, error) {
		if !watched {
			if err := r.watchRestarts(ctx, r.driver.pool); err != nil {
				return 0, err
			}
			watched = true
		}
		conn, err := r.election.hold(ctx, r.driver, schema)
		if err != nil || conn == nil { // nil: another process reaps schema
			return 0, err
		}
		n, err := r.reapSchema(ctx, conn, schema)
		if err != nil {
			r.election.lost(ctx, r.driver, err)
		}
		return n, err
	})
}

// eachFencedSchema calls reap for every fenced schema River has used with
// this client, until one fails, and returns the jobs they reaped.
func (r *leaseReaper) eachFencedSchema(ctx context.Context, reap func(schema string) (int, error)) (int, error) {
	total := 0
	for _, schema := range r.pilot.knownSchemas() {
		fenced, err := r.driver.Fenced(ctx, schema)
		if err != nil {
			return total, err
		}
		if !fenced {
			continue
		}
		n, err := reap(schema)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// watchRestarts reads the server's epoch for the restart watch, through q,
// in every fenced process, reaping or not: River's rescuer may run in a
// process that does not reap (River's leader is elected apart), and it takes
// its grace after a restart from this process's watch (Pilot.JobGetStuck).
func (r *leaseReaper) watchRestarts(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) error {
	var started, now time.Time
	if err := q.QueryRow(ctx, "SELECT "+serverEpochSQL+", now()").Scan(&started, &now); err != nil {
		return fmt.Errorf("reading the server's epoch: %w", err)
	}
	r.restart.observe(started, now)
	return nil
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
	reaped, err := r.driver.recoverJobs(ctx, db, schema, "reaped jobs", func(tx pgx.Tx) (pgx.Rows, error) {
		// On the connection that reaps: a pool in front of several servers
		// could answer a statement of its own from another one.
		if err := r.watchRestarts(ctx, tx); err != nil {
			return nil, err
		}
		from, seen := r.restart.args()
		return tx.Query(ctx, recoverJobsSQL(schema, `j.state = 'running'
        AND j.lease_expires_at IS NOT NULL
        AND greatest(j.lease_expires_at, `+restartGraceSQL("$1", "$3", "$4")+`) < now()`,
			"format('fencing: lease of attempt %s expired at %s without renewal; the job was recovered', j.attempt, j.lease_expires_at)"),
			r.driver.config.LeaseTTL, reapBatchMax, from, seen)
	})
	if err != nil {
		return 0, fmt.Errorf("reaping expired leases in schema %q: %w", schema, err)
	}
	for _, job := range reaped {
		r.driver.counters.emit(ctx, &Event{Attempt: job.Attempt, JobID: job.ID, Kind: EventLeaseExpired})
		r.driver.logger().WarnContext(ctx, "fencing: recovered a job whose lease expired",
			slog.Int64("job_id", job.ID), slog.Int("attempt", job.Attempt), slog.String("state", job.State))
	}
	return len(reaped), r.driver.notifyRecovered(ctx, schema, reaped)
}

// recoverJobsSQL takes running jobs of river_job j in schema that match
// where (at most $2, skipping locked ones) out of running, as the lease
// reaper recovers them: to available at once, discarded past their max
// attempts, cancelled if a cancel was requested, each with an error entry
// (errorMessage, an expression over j).
func recoverJobsSQL(schema, where, errorMessage string) string {
	table := tableName(schema, "river_job")
	return `
WITH recovered AS (
    SELECT j.id, ` + recoveredStateSQL + ` AS new_state
    FROM ` + table + ` j
    WHERE ` + where + `
    ORDER BY j.id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE ` + table + ` j
SET state = r.new_state::` + tableName(schema, "river_job_state") + `,
    finalized_at = CASE WHEN r.new_state = 'available' THEN NULL ELSE now() END,
    scheduled_at = CASE WHEN r.new_state = 'available' THEN now() ELSE j.scheduled_at END,
    errors = array_append(j.errors, jsonb_build_object('at', now(), 'attempt', j.attempt, 'error', ` + errorMessage + `, 'trace', ''))
FROM recovered r
WHERE j.id = r.id
RETURNING j.attempt, j.id, j.queue, j.state::text`
}

// recoveredStateSQL is the state a recovered job of river_job j takes.
const recoveredStateSQL = `CASE WHEN j.metadata ? 'cancel_attempted_at' THEN 'cancelled'
             WHEN j.attempt >= j.max_attempts THEN 'discarded'
             ELSE 'available' END`

// recoverJobs runs a recoverJobsSQL statement (query) in a transaction of
// db, with OnFinalized (naming the jobs what) for the jobs it ends, and
// returns the jobs it recovered.
func (d *Driver) recoverJobs(ctx context.Context, db txBeginner, schema, what string, query func(pgx.Tx) (pgx.Rows, error)) ([]reapedJob, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := query(tx)
	if err != nil {
		return nil, err
	}
	recovered, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reapedJob])
	if err != nil {
		return nil, err
	}
	var finalized []int64
	for _, job := range recovered {
		if job.State != "available" {
			finalized = append(finalized, job.ID)
		}
	}
	if err := d.onFinalized(ctx, tx, schema, finalized, what); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return recovered, nil
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
		payload, _ := json.Marshal(map[string]string{"queue": queue}) // a map of strings always encodes
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
