package fencing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivershared/startstop"
)

// leaseKeeper renews the leases of the attempts its process runs once they
// are due (renewalAge): one batched statement per schema every renewalAge.
// It runs on every client (a River plugin service).
type leaseKeeper struct {
	startstop.BaseStartStop

	driver *Driver

	// attempts lists, by job ID, the attempts of the job that run here
	// (usually one), linked through attemptState.sameJob: registering an
	// attempt allocates nothing.
	attempts *shardedMap[*attemptState]

	// heartbeatLockWait, if set, replaces lockWait's default (tests).
	heartbeatLockWait time.Duration

	// onHeartbeatLocked, if set, is called each time a heartbeat finds its
	// job's row locked, before it waits to try again (tests).
	onHeartbeatLocked func()

	// connMu guards conn and serializes renewals (the keeper's loop and
	// RenewNow in tests).
	connMu sync.Mutex

	// conn is the keeper's own connection while the keeper runs, opened
	// like the pool's but outside it, so that renewals never wait behind
	// work for the pool's connections (decision 0006). Nil until first
	// needed, and again after it broke.
	conn *pgx.Conn

	// onPool is set while renewals go through the pool because the keeper
	// could not connect; connectFailed is when it last failed, connOpened
	// when conn was opened; dialing is the connection being opened, if any
	// (all guarded by connMu). loopCtx is the keeper's loop's context, which
	// ends the opening when the keeper stops.
	onPool        bool
	connectFailed time.Time
	connOpened    time.Time
	dialing       *keeperDial
	loopCtx       context.Context

	// poolConfig is the pool's configuration: the keeper's connection is
	// opened and closed as the pool's are.
	poolConfig *pgxpool.Config

	// connects counts the connections the keeper opened (tests).
	connects atomic.Int64

	// running is set while the keeper's loop runs; renewals outside it
	// (RenewNow after the keeper stopped) go through the pool.
	running atomic.Bool
}

const (
	// heartbeatLockWaitMax caps how long Heartbeat tries to renew a lease
	// whose job row another transaction holds locked.
	heartbeatLockWaitMax = time.Second

	// heartbeatRetryMax caps the pause between a heartbeat's tries.
	heartbeatRetryMax = 50 * time.Millisecond
)

// lockWait is how long a heartbeat tries again while its job's row is locked:
// a quarter of LeaseTTL, at most heartbeatLockWaitMax. Such locks are
// normally short (a renewal, the reaper, River's completer); one that lasts
// is often the attempt's own open transaction, which waiting cannot outlast.
func (k *leaseKeeper) lockWait() time.Duration {
	if k.heartbeatLockWait > 0 {
		return k.heartbeatLockWait
	}
	return min(k.driver.config.LeaseTTL/4, heartbeatLockWaitMax)
}

func newLeaseKeeper(driver *Driver) *leaseKeeper {
	k := &leaseKeeper{driver: driver, attempts: newShardedMap[*attemptState]()}
	if driver != nil && driver.pool != nil { // a keeper of its maps only in tests
		k.poolConfig = driver.pool.Config()
	}
	return k
}

func (k *leaseKeeper) add(st *attemptState) {
	k.attempts.update(st.jobID, func(m map[int64]*attemptState) {
		st.sameJob = m[st.jobID]
		m[st.jobID] = st
	})
}

func (k *leaseKeeper) remove(st *attemptState) {
	k.removeIf(st.jobID, func(link *attemptState) bool { return link == st })
}

// removeIf removes the first attempt of job jobID that match accepts.
func (k *leaseKeeper) removeIf(jobID int64, match func(*attemptState) bool) {
	k.attempts.update(jobID, func(m map[int64]*attemptState) {
		var prev *attemptState
		for link := m[jobID]; link != nil; prev, link = link, link.sameJob {
			if !match(link) {
				continue
			}
			switch {
			case prev != nil:
				prev.sameJob = link.sameJob
			case link.sameJob == nil:
				delete(m, jobID)
			default:
				m[jobID] = link.sameJob
			}
			return
		}
	})
}

// outcomeWritten drops the attempts whose outcome a state write has just
// written (or refused as stale): each job's attempt holding the write's
// proof token, once its work returned. An attempt still working (a
// JobCompleteTx inside its work, whose transaction may yet roll back) stays.
func (k *leaseKeeper) outcomeWritten(jobIDs []int64, proofs []*proof) {
	for i, pr := range proofs {
		if pr == nil || pr.Token == "" {
			continue
		}
		k.removeIf(jobIDs[i], func(st *attemptState) bool {
			return st.token == pr.Token && !st.ended().IsZero()
		})
	}
}

// outcomeWait is how long after its work returned an attempt's lease is
// renewed at most while River's completer has not written its outcome.
func (k *leaseKeeper) outcomeWait() time.Duration {
	return max(outcomeWaitMin, 2*k.driver.config.LeaseTTL)
}

// outcomeWaitMin is the least outcomeWait.
const outcomeWaitMin = time.Minute

func (k *leaseKeeper) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := k.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		started()
		defer stopped()
		k.connMu.Lock()
		k.loopCtx = ctx
		k.connMu.Unlock()
		k.running.Store(true)
		defer k.closeConn()
		interval, tick := k.driver.config.HeartbeatInterval, k.renewalAge()
		timer := time.NewTimer(tick)
		defer timer.Stop()
		var (
			warned     time.Time // the last failure logged
			failures   int       // renewals failed in a row
			suppressed int       // failures not logged since the last one logged
		)
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			began := time.Now()
			renewed, err := k.renewAll(ctx, tick)
			if ctx.Err() != nil {
				return
			}
			// A failed renewal is tried again soon, backing off to the
			// tick; a run of failures is logged once per interval
			// (decision 0007).
			next := tick
			if err != nil {
				failures++
				next = max(tick>>max(4-failures, 0), keeperRetryMin)
				if time.Since(warned) >= interval {
					warned = time.Now()
					k.driver.logger().WarnContext(ctx, "fencing: renewing leases", slog.String("error", err.Error()),
						slog.Int("failures_in_a_row", failures), slog.Int("failures_not_logged", suppressed))
					suppressed = 0
				} else {
					suppressed++
				}
			}
			if err == nil {
				// With nothing to renew, nothing says the database answers
				// again: the run of failures just ends.
				if failures > 0 && renewed {
					k.driver.logger().InfoContext(ctx, "fencing: renewing leases again",
						slog.Int("failures_in_a_row", failures), slog.Int("failures_not_logged", suppressed))
				}
				failures, suppressed, warned = 0, 0, time.Time{}
			}
			timer.Reset(max(next-time.Since(began), 0))
		}
	}()
	return nil
}

// keeperRetryMin is the least pause before a failed renewal is tried again.
const keeperRetryMin = 10 * time.Millisecond

// renewalAge is both how often the keeper looks at its leases and how old a
// lease must be before it is renewed: half a HeartbeatInterval. A lease is
// thus renewed within one HeartbeatInterval of being granted, and an attempt
// that ends sooner has its lease neither renewed nor locked by the keeper
// (decision 0054).
func (k *leaseKeeper) renewalAge() time.Duration {
	return k.driver.config.HeartbeatInterval / 2
}

// renewAll renews every lease of this process at least minAge old (renewSQL;
// the keeper's tick passes renewalAge) in one statement per schema, skipping
// rows another transaction holds locked (SKIP LOCKED) until the next tick.
// Attempts whose job has moved on are cancelled with cause ErrLeaseLost, all
// before the observer hears of the renewal's events (once connMu is free, so
// that a slow observer holds up no renewal).
func (k *leaseKeeper) renewAll(ctx context.Context, minAge time.Duration) (renewed bool, err error) {
	var events []*Event
	defer func() {
		for _, event := range events {
			k.driver.counters.notify(ctx, event)
		}
	}()
	k.connMu.Lock()
	defer k.connMu.Unlock()
	bySchema := make(map[string][]*attemptState)
	k.attempts.each(func(_ int64, head *attemptState) {
		for st := head; st != nil; st = st.sameJob {
			bySchema[st.schema] = append(bySchema[st.schema], st)
		}
	})

	var errs []error
	for schema, attempts := range bySchema {
		sent, err := k.renewSchema(ctx, schema, attempts, minAge, &events)
		if err != nil {
			errs = append(errs, err)
		}
		renewed = renewed || sent && err == nil
	}
	return renewed, errors.Join(errs...)
}

// renewSchema renews the leases at least minAge old of attempts, of jobs in
// schema, and appends to events what the observer is to hear of (counted
// already).
func (k *leaseKeeper) renewSchema(ctx context.Context, schema string, attempts []*attemptState, minAge time.Duration, events *[]*Event) (ran bool, err error) {
	// Two attempts of one job can run here at once (the older one lost the
	// job and does not know yet): results are matched to attempts by their
	// position in the input, and a renewal to the attempt whose token it
	// renewed.
	var (
		sent       = make([]*attemptState, 0, len(attempts))
		ids        = make([]int64, 0, len(attempts))
		tokens     = make([]string, 0, len(attempts))
		renewUntil = make([]*time.Time, 0, len(attempts))
		leaseEnds  = make([]*time.Time, 0, len(attempts))
	)
	for _, st := range attempts {
		st.mu.Lock()
		lost, until, end, ended := st.lost, st.renewUntil, st.leaseEnd(), st.workEnded
		young, expires := st.youngerThan(minAge), st.expiresAt
		st.mu.Unlock()
		if !ended.IsZero() {
			if time.Since(ended) > k.outcomeWait() {
				k.remove(st) // no outcome came: the job is left to the reaper
				continue
			}
			until, end = nil, nil // a timed-out work's outcome is kept too; outcomeWait caps it
		}
		if lost || st.token == "" || young && (end == nil || !expires.After(*end)) {
			continue // a young lease is not due, unless it outlasts its lease end
		}
		sent = append(sent, st)
		ids = append(ids, st.jobID)
		tokens = append(tokens, st.token)
		renewUntil = append(renewUntil, until)
		leaseEnds = append(leaseEnds, end)
	}
	if len(ids) == 0 {
		return false, nil
	}
	type result struct {
		expires  pgtype.Timestamptz
		finished bool
		ord      int64
		lost     bool
	}
	// A renewal that takes longer than a lease is of no use; the next
	// interval tries again.
	ctx, cancel := context.WithTimeout(ctx, k.driver.config.LeaseTTL)
	defer cancel()
	var results []result
	began := time.Now()
	err = k.withConn(ctx, func(q querier) error {
		rows, err := q.Query(ctx, renewSQL(schema), ids, tokens, renewUntil, k.driver.config.LeaseTTL, leaseEnds, minAge)
		if err != nil {
			return err
		}
		results, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (result, error) {
			var r result
			err := row.Scan(&r.ord, &r.expires, &r.lost, &r.finished)
			return r, err
		})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("renewing %d leases: %w", len(ids), err)
	}
	for _, r := range results {
		if r.ord < 1 || r.ord > int64(len(sent)) {
			return false, fmt.Errorf("renewing %d leases: result for input %d", len(ids), r.ord)
		}
		st := sent[r.ord-1]
		switch {
		case r.lost && !st.ended().IsZero():
			// Its work is over and the job moved on: its outcome was
			// written (the write's own removal is on its way), or the job
			// was recovered and the write will be refused. Nothing to
			// cancel, nothing lost by running work.
			k.remove(st)
		case r.lost && r.finished:
			// Its job ended with its token, committed: nothing to renew, and
			// nothing lost, so its context lives on (the attempt may still be
			// reading its COMMIT's reply); later heartbeats report the lease
			// as no longer held.
			st.mu.Lock()
			st.lost = true
			st.mu.Unlock()
		case r.lost:
			if _, event := st.lose("renew"); event != nil {
				*events = append(*events, event)
			}
		case r.expires.Valid:
			st.mu.Lock()
			st.extend(r.expires.Time, began)
			st.mu.Unlock()
			event := &Event{Attempt: st.attempt, JobID: st.jobID, Kind: EventLeaseRenewed}
			k.driver.counters.count(event)
			*events = append(*events, event)
		}
	}
	return true, nil
}

// withConn runs fn on the keeper's own connection, or on the pool while it
// has none (decision 0006). A connection that broke or answered with an
// error about the session (connUnfit) is dropped and fn tried once more; a
// renewal run twice only renews twice. A connection older than the pool's
// MaxConnLifetime is replaced. The caller holds connMu.
func (k *leaseKeeper) withConn(ctx context.Context, fn func(querier) error) error {
	if !k.running.Load() {
		return fn(k.driver.pool)
	}
	if lifetime := k.poolConfig.MaxConnLifetime; k.conn != nil && lifetime > 0 && time.Since(k.connOpened) >= lifetime {
		k.dropConn()
	}
	for try := 0; ; try++ {
		if k.conn == nil && !k.awaitConn(ctx) {
			return fn(k.driver.pool)
		}
		err := fn(k.conn)
		if err == nil {
			return nil
		}
		if !k.conn.IsClosed() && !connUnfit(err) {
			return err
		}
		k.dropConn()
		if try > 0 || ctx.Err() != nil {
			return err
		}
	}
}

// keeperDial is a connection of the keeper's being opened.
type keeperDial struct {
	began time.Time
	done  chan struct{} // closed once conn or err, and ended, are set
	conn  *pgx.Conn
	err   error
	ended time.Time
}

// awaitConn gives the keeper a connection of its own if it can within a
// quarter of LeaseTTL of starting to open it: it collects the one being
// opened, or starts opening one (not within the pause after a failure) and
// waits for it. False means fn goes to the pool this time. The caller holds
// connMu.
func (k *leaseKeeper) awaitConn(ctx context.Context) bool {
	if k.dialing == nil {
		if time.Since(k.connectFailed) < k.reconnectPause() {
			return false
		}
		k.dialing = &keeperDial{began: time.Now(), done: make(chan struct{})}
		go k.dial(k.loopCtx, k.dialing)
	}
	d := k.dialing
	wait := time.Until(d.began.Add(k.driver.config.LeaseTTL / 4))
	if wait <= 0 {
		select {
		case <-d.done:
		default:
			return false
		}
	} else {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-d.done:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	k.dialing = nil
	if d.err != nil {
		k.connectFailed = d.ended
		if !k.onPool {
			k.onPool = true
			k.driver.logger().WarnContext(ctx, "fencing: the lease keeper renews through the pool: it cannot open a connection of its own",
				slog.String("error", d.err.Error()))
		}
		return false
	}
	if k.onPool {
		k.onPool = false
		k.driver.logger().InfoContext(ctx, "fencing: the lease keeper renews on a connection of its own again")
	}
	k.conn, k.connOpened = d.conn, d.ended
	k.connects.Add(1)
	return true
}

// dial opens a connection for d, within keeperDialTimeout or LeaseTTL,
// whichever is longer (and the pool's ConnectTimeout), and ends when
// loopCtx, the keeper's loop's context, does.
func (k *leaseKeeper) dial(loopCtx context.Context, d *keeperDial) {
	defer close(d.done)
	ctx, cancel := context.WithTimeout(loopCtx, max(keeperDialTimeout, k.driver.config.LeaseTTL))
	defer cancel()
	d.conn, d.err = k.connect(ctx)
	d.ended = time.Now()
}

// reconnectPause is how long after a failed connect the keeper renews
// through the pool before it tries to connect again.
func (k *leaseKeeper) reconnectPause() time.Duration {
	return min(keeperReconnectPause, k.driver.config.HeartbeatInterval)
}

const (
	// keeperReconnectPause caps the pause after a failed connect.
	keeperReconnectPause = 5 * time.Second

	// keeperDialTimeout is the least time a connect of the keeper's gets.
	keeperDialTimeout = 5 * time.Second
)

// connUnfit reports whether err, from a statement on the keeper's
// connection, means the connection should be replaced: not a server's
// answer to the statement (the network, a protocol error), or a server's
// that concerns the session (connection exceptions, an administrator's
// shutdown, a read-only server after a failover).
func connUnfit(err error) bool {
	code := sqlState(err)
	if code == "" {
		return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	}
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P") || code == pgerrcode.ReadOnlySQLTransaction
}

// connect opens a connection as the pool opens its own: a copy of its
// connection config (with the pool's default ConnectTimeout), its
// BeforeConnect and AfterConnect hooks.
func (k *leaseKeeper) connect(ctx context.Context) (*pgx.Conn, error) {
	config := k.poolConfig
	connConfig := config.ConnConfig.Copy()
	if connConfig.ConnectTimeout <= 0 {
		connConfig.ConnectTimeout = 2 * time.Minute
	}
	if config.BeforeConnect != nil {
		if err := config.BeforeConnect(ctx, connConfig); err != nil {
			return nil, err
		}
	}
	conn, err := pgx.ConnectConfig(ctx, connConfig)
	if err != nil {
		return nil, err
	}
	if config.AfterConnect != nil {
		if err := config.AfterConnect(ctx, conn); err != nil {
			_ = conn.Close(ctx)
			return nil, err
		}
	}
	return conn, nil
}

// dropConn closes the keeper's own connection, through the pool's
// BeforeClose hook as the pool closes its own. The caller holds connMu.
func (k *leaseKeeper) dropConn() {
	if k.conn == nil {
		return
	}
	if beforeClose := k.poolConfig.BeforeClose; beforeClose != nil {
		beforeClose(k.conn)
	}
	closeSession(k.conn)
	k.conn = nil
}

// closeConn closes the keeper's own connection (the keeper stops).
func (k *leaseKeeper) closeConn() {
	k.connMu.Lock()
	defer k.connMu.Unlock()
	k.running.Store(false)
	k.dropConn()
	if d := k.dialing; d != nil { // the loop's context ended: it ends soon
		k.dialing = nil
		<-d.done
		if d.conn != nil {
			k.conn = d.conn
			k.dropConn()
		}
	}
}

// heartbeat renews one lease at once and stores details (nil keeps them).
// The statement does not wait for a row lock (NOWAIT); while the row is
// locked it is tried again, for up to lockWait, and then a *LeaseBusyError
// is returned.
func (k *leaseKeeper) heartbeat(ctx context.Context, st *attemptState, details []byte) error {
	st.mu.Lock()
	lost, until, end := st.lost, st.renewUntil, st.leaseEnd()
	st.mu.Unlock()
	if lost {
		return &LeaseLostError{Attempt: st.attempt, JobID: st.jobID, Op: "heartbeat"}
	}
	fenced, err := k.driver.Fenced(ctx, st.schema)
	if err != nil {
		return err
	}
	if !fenced {
		return nil
	}
	var token *string
	if st.token != "" {
		token = &st.token
	}
	var detailsArg any
	if details != nil {
		detailsArg = string(details)
	}
	var (
		expires pgtype.Timestamptz
		stored  pgtype.Text
		start   = time.Now()
		wait    = k.lockWait()
		pause   = 5 * time.Millisecond
	)
	for {
		err = k.driver.pool.QueryRow(ctx, heartbeatSQL(st.schema),
			st.jobID, token, st.attempt, st.attemptedAt, until, k.driver.config.LeaseTTL, detailsArg, end,
		).Scan(&expires, &stored)
		if sqlState(err) != pgerrcode.LockNotAvailable {
			break
		}
		if hook := k.onHeartbeatLocked; hook != nil {
			hook()
		}
		waited := time.Since(start)
		if waited >= wait {
			return &LeaseBusyError{Attempt: st.attempt, Err: err, JobID: st.jobID, Waited: waited}
		}
		timer := time.NewTimer(min(pause, wait-waited))
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("heartbeating job %d attempt %d: %w", st.jobID, st.attempt, context.Cause(ctx))
		case <-timer.C:
		}
		pause = min(2*pause, heartbeatRetryMax)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		lost, event := st.lose("heartbeat")
		if event != nil {
			k.driver.counters.notify(ctx, event)
		}
		return lost
	case err != nil:
		return fmt.Errorf("heartbeating job %d attempt %d: %w", st.jobID, st.attempt, err)
	}
	st.mu.Lock()
	if expires.Valid {
		st.extend(expires.Time, start)
	}
	if stored.Valid {
		st.details = []byte(stored.String)
	}
	st.mu.Unlock()
	if expires.Valid {
		k.driver.counters.emit(ctx, &Event{Attempt: st.attempt, JobID: st.jobID, Kind: EventLeaseRenewed})
	}
	return nil
}

// heartbeatSQL renews one lease ($1 job ID, $2 token or NULL, $3 attempt,
// $4 attempted_at, $5 River deadline, $6 LeaseTTL, never past $8, the
// attempt's lease end or NULL) and stores details ($7, NULL keeps them),
// without waiting for a row lock, and returns the new expiry and details; no
// row if the attempt no longer holds the job.
func heartbeatSQL(schema string) string {
	table := tableName(schema, "river_job")
	return `
WITH l AS (
    SELECT id FROM ` + table + `
    WHERE id = $1 AND state = 'running'
        AND (lease_token = $2::text::uuid OR ($2::text IS NULL AND attempt = $3 AND attempted_at = $4))
    FOR UPDATE NOWAIT
)
UPDATE ` + table + ` j
SET lease_expires_at = CASE
        WHEN j.lease_expires_at IS NULL THEN NULL
        WHEN $5::timestamptz IS NOT NULL AND now() >= $5::timestamptz THEN least(j.lease_expires_at, $8::timestamptz)
        ELSE least(now() + $6::interval, $8::timestamptz) END,
    lease_details = coalesce($7::jsonb, j.lease_details)
FROM l
WHERE j.id = l.id
RETURNING j.lease_expires_at, j.lease_details::text`
}

// sqlState returns the SQLSTATE of err, a Postgres server's error, or "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// renewSQL renews the due leases of a batch of attempts ($1 job IDs, $2
// tokens, $3 River deadlines, $4 LeaseTTL, $5 lease ends: AttemptLimits, NULL
// for none, $6 the least age of a lease to renew), skipping jobs another writer holds locked, and
// tells, per attempt in input order, its new expiry (NULL if it was not
// renewed), whether its lease is lost, and whether the attempt finished the
// job itself. A lease is due once it is $6 old (it has at most LeaseTTL - $6
// left); a younger one is neither locked nor written. A
// lease never runs past its lease end: one that would is cut back to it,
// whatever its age.
func renewSQL(schema string) string {
	table := tableName(schema, "river_job")
	return `
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::timestamptz[], $5::timestamptz[])
        WITH ORDINALITY AS x(id, token, renew_until, lease_end, ord)
),
renewed AS (
    UPDATE ` + table + ` j
    -- least ignores a NULL lease_end (no limit).
    SET lease_expires_at = CASE WHEN l.renew THEN least(now() + $4::interval, l.lease_end) ELSE l.lease_end END
    FROM (
        SELECT j2.id, x.lease_end,
            (x.renew_until IS NULL OR now() < x.renew_until) AND (x.lease_end IS NULL OR now() < x.lease_end) AS renew
        FROM ` + table + ` j2
        JOIN input x ON x.id = j2.id
        -- By key, and a state test no index serves (decision 0004).
        WHERE j2.id = ANY($1::bigint[])
            AND (j2.state = 'running') IS TRUE
            AND j2.lease_token = x.token::uuid
            AND j2.lease_expires_at IS NOT NULL
            -- Renewed within its deadlines once due (at least $6 old, and
            -- short of its lease end), or cut back to its lease end.
            AND ((x.renew_until IS NULL OR now() < x.renew_until) AND (x.lease_end IS NULL OR now() < x.lease_end)
                    AND j2.lease_expires_at <= now() + $4::interval - $6::interval
                    AND (x.lease_end IS NULL OR j2.lease_expires_at < x.lease_end)
                OR j2.lease_expires_at > x.lease_end)
        FOR UPDATE OF j2 SKIP LOCKED
    ) l
    WHERE j.id = l.id
    RETURNING j.id, j.lease_token, j.lease_expires_at
)
-- lost: not renewed, and the job is not running with this attempt's token.
-- finished: completed with this attempt's token as the last one, i.e. the
-- attempt itself finished the job (JobCompleteTx inside Work); only the
-- attempt holding the lease can complete a job, recovery never does.
-- A join, not EXISTS subqueries (decision 0004).
SELECT x.ord, r.lease_expires_at,
    r.id IS NULL AND NOT coalesce(j3.state = 'running' AND j3.lease_token = x.token::uuid, false) AS lost,
    coalesce(j3.state = 'completed' AND j3.lease_last_token = x.token::uuid, false) AS finished
FROM input x
LEFT JOIN ` + table + ` j3 ON j3.id = x.id AND j3.id = ANY($1::bigint[]) -- implied; as above
LEFT JOIN renewed r ON r.id = x.id AND r.lease_token = x.token::uuid`
}
