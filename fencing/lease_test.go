package fencing_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestLeaseRecovery covers F4: expired leases are recovered within the
// bound, live ones never are, and renewal stops at River's deadline.
func TestLeaseRecovery(t *testing.T) {
	t.Parallel()

	const (
		leaseTTL       = 1 * time.Second
		heartbeat      = 150 * time.Millisecond
		reaperInterval = 100 * time.Millisecond
		pollInterval   = 50 * time.Millisecond // testConfig's FetchPollInterval
		// slack covers scheduling noise on a loaded 2-core CI machine.
		slack = 2 * time.Second
		// dbMargin covers, in database time, the reaper's and the fetching
		// producer's scheduling delays and round trips on a loaded 2-core
		// machine under -race (.ci/run runs packages side by side). A
		// rescue with River's retry backoff is caught by scheduled_at, not
		// by this margin.
		dbMargin = 2 * time.Second
	)
	shortConfig := func() *fencing.Config {
		return &fencing.Config{HeartbeatInterval: heartbeat, LeaseTTL: leaseTTL, ReaperInterval: reaperInterval}
	}

	t.Run("DiscardedPastMaxAttempts", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		sink := newEventSink()
		driver := newDriver(t, pool, sink, shortConfig())
		worker := newBlockWorker(t)
		client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, worker: worker})

		inserted, err := client.Insert(ctx, blockArgs{}, &river.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		attempt := recv(t, worker.started)
		driver.StopHeartbeats()

		row := waitForState(ctx, t, pool, schema, inserted.Job.ID, "discarded")
		require.Equal(t, 1, row.Errors)
		require.False(t, row.LeaseToken.Valid)
		// The reaper reports what it reaped once its transaction committed,
		// so possibly just after the job is seen discarded.
		sink.waitFor(t, fencing.EventLeaseExpired, inserted.Job.ID, 1)
		require.GreaterOrEqual(t, driver.Stats().LeasesExpired, int64(1))

		attempt.release <- complete
		sink.waitFor(t, fencing.EventStaleWriteRejected, inserted.Job.ID, 1)
		require.Equal(t, "discarded", getJob(ctx, t, pool, schema, inserted.Job.ID).State)
	})

	t.Run("HeartbeatingJobWithoutTimeoutKeepsLease", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		sink := newEventSink()
		const (
			ttl        = time.Second
			jobTimeout = 300 * time.Millisecond // the client's
			stuck      = 200 * time.Millisecond
		)
		driver := newDriver(t, pool, sink, &fencing.Config{
			HeartbeatInterval: 200 * time.Millisecond, LeaseTTL: ttl, ReaperInterval: 50 * time.Millisecond,
		})
		worker := newBlockWorker(t)
		worker.timeout = -1 // no River timeout: River's rescuer would never take it either
		// The worker heartbeats first thing in Work, which tells the keeper it
		// has no deadline; the client's short JobTimeout and stuck threshold
		// no longer apply to it.
		client := startClientWorker(ctx, t, schema,
			&clientOpts{driver: driver, jobTimeout: jobTimeout, stuck: stuck}, worker,
			func(ctx context.Context) error { return fencing.Heartbeat(ctx, map[string]int{"progress": 1}) })

		inserted, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		jobID := inserted.Job.ID
		attempt := recv(t, worker.started)
		// A second fenced client with free slots, ready to steal the job if
		// its lease ever lapsed.
		startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), worker: worker})

		// Wait until the lease was renewed at least 4 TTLs (8 River deadlines)
		// after the attempt started, by database time: the renewals went on
		// past the client's JobTimeout + JobStuckThreshold, and the lease
		// never lapsed (the job stayed with attempt 1 throughout).
		const renewedPast = 4 * ttl
		table := pgx.Identifier{schema, "river_job"}.Sanitize()
		var (
			attemptedAt time.Time
			expiresAt   pgtype.Timestamptz
		)
		waitUntil(t, "the lease was renewed 4 TTLs after the attempt started", func() bool {
			var (
				state   string
				attempt int
			)
			require.NoError(t, pool.QueryRow(ctx, `SELECT state::text, attempt, attempted_at, lease_expires_at FROM `+table+` WHERE id = $1`,
				jobID).Scan(&state, &attempt, &attemptedAt, &expiresAt))
			require.Equal(t, "running", state, "the job left running: its lease lapsed")
			require.Equal(t, 1, attempt)
			require.True(t, expiresAt.Valid)
			return expiresAt.Time.Sub(attemptedAt) >= renewedPast+ttl
		})
		t.Logf("lease renewed until %s after the attempt started (client JobTimeout %s, stuck %s)",
			expiresAt.Time.Sub(attemptedAt), jobTimeout, stuck)

		require.Zero(t, sink.count(fencing.EventLeaseExpired, 0))
		require.Zero(t, sink.count(fencing.EventLeaseLost, 0))
		require.NoError(t, attempt.ctx.Err())
		lease, ok := fencing.LeaseFromContext(attempt.ctx)
		require.True(t, ok)
		require.JSONEq(t, `{"progress": 1}`, string(lease.Details))
		select {
		case other := <-worker.started:
			t.Fatalf("job was fetched again as attempt %d while its lease was renewed", other.job.Attempt)
		default:
		}

		attempt.release <- complete
		final := waitForState(ctx, t, pool, schema, jobID, "completed")
		require.Equal(t, 1, final.Attempt)
		require.Zero(t, final.Errors)
	})

	// An attempt that never calls LeaseFromContext or Heartbeat (nor
	// CompleteTx) is renewed until the client's JobTimeout plus
	// JobStuckThreshold, measured from its attempted_at (plugin.go's
	// newAttempt), whatever its Worker.Timeout: then it is recovered.
	for name, workerTimeout := range map[string]time.Duration{"WorkerDefaultTimeout": 0, "WorkerNoTimeout": -1} {
		t.Run("SilentAttemptRenewedUntilClientDeadline/"+name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := dbtest.Pool(ctx, t)
			schema := dbtest.TestSchema(ctx, t)
			const (
				jobTimeout = 300 * time.Millisecond // the client's
				stuck      = 200 * time.Millisecond // the client's; River's default is 10s
			)
			worker := newBlockWorker(t)
			worker.timeout = workerTimeout
			client := startClient(ctx, t, pool, schema, &clientOpts{
				driver: newDriver(t, pool, nil, shortConfig()), jobTimeout: jobTimeout, stuck: stuck, worker: worker,
			})
			inserted, err := client.Insert(ctx, blockArgs{}, nil)
			require.NoError(t, err)
			jobID := inserted.Job.ID
			attempt1 := recv(t, worker.started)
			attemptedAt := *attempt1.job.AttemptedAt
			startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, shortConfig()), worker: worker})

			attempt2 := recv(t, worker.started)
			require.Equal(t, 2, attempt2.job.Attempt)
			// The lease that expired was renewed last before the client's
			// deadline (database times, from the reaper's error entry).
			expiredAt := reapedLease(ctx, t, pool, schema, jobID).expiredAt
			deadline := attemptedAt.Add(jobTimeout + stuck)
			t.Logf("lease expired %s after the attempt started (client deadline %s, LeaseTTL %s)",
				expiredAt.Sub(attemptedAt), jobTimeout+stuck, leaseTTL)
			require.True(t, expiredAt.Before(deadline.Add(leaseTTL)),
				"lease expired at %s, renewed past the client's deadline %s", expiredAt, deadline)

			attempt1.release <- complete
			attempt2.release <- complete
			final := waitForState(ctx, t, pool, schema, jobID, "completed")
			require.Equal(t, 2, final.Attempt)
		})
	}

	t.Run("PartitionedWorkerIsRecoveredAndFenced", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		sinkA := newEventSink()
		driverA := newDriver(t, pool, sinkA, shortConfig())
		worker := newBlockWorker(t)
		clientA := startClient(ctx, t, pool, schema, &clientOpts{driver: driverA, worker: worker})

		inserted, err := clientA.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		jobID := inserted.Job.ID
		attempt1 := recv(t, worker.started)
		startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, shortConfig()), worker: worker})

		// Worker A is partitioned: it keeps running but stops renewing.
		driverA.StopHeartbeats()

		attempt2 := recv(t, worker.started)
		require.Equal(t, 2, attempt2.job.Attempt)

		row := getJob(ctx, t, pool, schema, jobID)
		require.Equal(t, "running", row.State)
		require.Equal(t, 1, row.Errors, "the recovery records an error entry")

		// F4 in database time: the last renewal set the lease's expiry; the
		// reaper took the job after it, at its next run, with no backoff,
		// and its notification had the new attempt fetch the job at once.
		reaped := reapedLease(ctx, t, pool, schema, jobID)
		require.Contains(t, reaped.message, "lease")
		require.Contains(t, reaped.message, "expired")
		require.True(t, reaped.at.After(reaped.expiredAt), "reaped at %s, before the lease expired at %s", reaped.at, reaped.expiredAt)
		require.False(t, reaped.scheduledAt.After(reaped.at), "made available at once, without backoff")
		require.Equal(t, attempt2.job.AttemptedAt.UnixMicro(), reaped.attemptedAt.UnixMicro())
		latency := reaped.attemptedAt.Sub(reaped.expiredAt)
		t.Logf("reaped %s and fetched again %s after the lease expired (ReaperInterval %s, poll %s)",
			reaped.at.Sub(reaped.expiredAt), latency, reaperInterval, pollInterval)
		require.LessOrEqual(t, latency, reaperInterval+pollInterval+dbMargin,
			"F4: fetched again %s after the lease expired", latency)

		// The partitioned worker's late completion is rejected.
		attempt1.release <- complete
		sinkA.waitFor(t, fencing.EventStaleWriteRejected, jobID, 1)
		require.Equal(t, "running", getJob(ctx, t, pool, schema, jobID).State)

		attempt2.release <- complete
		final := waitForState(ctx, t, pool, schema, jobID, "completed")
		require.Equal(t, 2, final.Attempt)
	})

	t.Run("ReaperWakesFetchers", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		driverA := newDriver(t, pool, nil, shortConfig())
		worker := newBlockWorker(t)
		clientA := startClient(ctx, t, pool, schema, &clientOpts{driver: driverA, worker: worker})
		inserted, err := clientA.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		attempt1 := recv(t, worker.started)
		// B polls once a minute: only the reaper's notification can make it
		// fetch the recovered job within the bound.
		startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, shortConfig()), poll: time.Minute, worker: worker})

		driverA.StopHeartbeats()
		partitioned := time.Now()
		attempt2 := recv(t, worker.started)
		require.Equal(t, inserted.Job.ID, attempt2.job.ID)
		require.Less(t, time.Since(partitioned), leaseTTL+reaperInterval+slack)
		attempt1.release <- complete
		attempt2.release <- complete
		waitForState(ctx, t, pool, schema, inserted.Job.ID, "completed")
	})

	t.Run("KeeperRenewsOnlyDueLeases", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		table := pgx.Identifier{schema, "river_job"}.Sanitize()
		sink := newEventSink()
		// Renewals are due at half a HeartbeatInterval: 5 s, longer than
		// this test takes, so that only the leases aged below are due.
		driver := newDriver(t, pool, sink, &fencing.Config{HeartbeatInterval: 10 * time.Second, LeaseTTL: time.Minute, ReaperInterval: reaperInterval})
		worker := newBlockWorker(t)
		client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, maxWorkers: 4, worker: worker})
		start := func() (int64, *startedAttempt) {
			inserted, err := client.Insert(ctx, blockArgs{}, nil)
			require.NoError(t, err)
			return inserted.Job.ID, recv(t, worker.started)
		}
		ageInDatabase := func(id int64) {
			_, err := pool.Exec(ctx, `UPDATE `+table+` SET lease_expires_at = now() + interval '54 seconds' WHERE id = $1`, id)
			require.NoError(t, err)
		}
		young, youngAttempt := start()     // young in the database, taken for old here
		aged, _ := start()                 // old in both
		youngHere, _ := start()            // old in the database, young here
		limited, limitedAttempt := start() // young, but outlasting its attempt's limit
		driver.StopHeartbeats()

		driver.AgeLease(young, 6*time.Second)
		driver.AgeLease(aged, 6*time.Second)
		ageInDatabase(aged)
		ageInDatabase(youngHere)
		// The keeper's next tick (not LimitAttempt at once: the limit is
		// more than a HeartbeatInterval away) must cut this lease back.
		require.NoError(t, fencing.LimitAttempt(limitedAttempt.ctx, fencing.AttemptLimits{Timeout: 30 * time.Second}))
		before := map[int64]time.Time{}
		for _, id := range []int64{young, aged, youngHere, limited} {
			before[id] = getJob(ctx, t, pool, schema, id).LeaseExpiresAt.Time
		}
		renewed := driver.Stats().LeasesRenewed

		require.NoError(t, driver.RenewDue(ctx))
		expires := func(id int64) time.Time { return getJob(ctx, t, pool, schema, id).LeaseExpiresAt.Time }
		require.True(t, expires(young).Equal(before[young]), "a lease the database holds young is not renewed")
		require.True(t, expires(youngHere).Equal(before[youngHere]), "a lease granted less than half a HeartbeatInterval ago is not renewed")
		require.True(t, expires(aged).After(before[aged].Add(5*time.Second)), "a lease older than half a HeartbeatInterval is renewed")
		require.True(t, expires(limited).Before(before[limited].Add(-20*time.Second)),
			"a young lease past its attempt's limit is cut back to it (%s, was %s)", expires(limited), before[limited])
		require.Equal(t, 1, sink.count(fencing.EventLeaseRenewed, aged))
		require.Zero(t, sink.count(fencing.EventLeaseRenewed, young))
		require.Equal(t, renewed+2, driver.Stats().LeasesRenewed)
		require.NoError(t, youngAttempt.ctx.Err(), "an attempt whose lease was not due keeps running")

		// RenewNow renews every lease, whatever its age.
		require.NoError(t, driver.RenewNow(ctx))
		require.True(t, expires(young).After(before[young]))
		require.True(t, expires(youngHere).After(before[youngHere]))
	})

	t.Run("RenewalRefusedCancelsAttempt", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		sink := newEventSink()
		driver := newDriver(t, pool, sink, shortConfig())
		worker := newBlockWorker(t)
		client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, worker: worker})

		inserted, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		jobID := inserted.Job.ID
		attempt := recv(t, worker.started)
		// From here on the keeper renews only when the test says (RenewNow).
		driver.StopHeartbeats()

		renewed := driver.Stats().LeasesRenewed
		renewedEvents := sink.count(fencing.EventLeaseRenewed, jobID)
		require.NoError(t, driver.RenewNow(ctx))
		require.Equal(t, renewed+1, driver.Stats().LeasesRenewed, "a renewal is counted")
		require.Equal(t, renewedEvents+1, sink.count(fencing.EventLeaseRenewed, jobID))
		require.NoError(t, attempt.ctx.Err())

		// Another attempt takes the job; nothing has told attempt 1 yet.
		rescue(ctx, t, pool, schema, jobID)
		startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), worker: worker})
		attempt2 := recv(t, worker.started)
		require.Equal(t, 2, attempt2.job.Attempt)
		require.NoError(t, attempt.ctx.Err())
		require.Zero(t, driver.Stats().LeasesLost)

		// The keeper's next renewal is refused, and the attempt's context
		// is cancelled by the time the renewal returns.
		require.NoError(t, driver.RenewNow(ctx))
		select {
		case <-attempt.ctx.Done():
		default:
			t.Fatal("a refused renewal did not cancel the attempt's context")
		}
		require.ErrorIs(t, context.Cause(attempt.ctx), fencing.ErrLeaseLost)
		var lost *fencing.LeaseLostError
		require.ErrorAs(t, context.Cause(attempt.ctx), &lost)
		require.Equal(t, jobID, lost.JobID)
		require.Equal(t, 1, lost.Attempt)
		require.Equal(t, "renew", lost.Op)
		require.Equal(t, 1, sink.count(fencing.EventLeaseLost, jobID))
		stats := driver.Stats()
		require.Equal(t, int64(1), stats.LeasesLost)
		require.Equal(t, renewed+1, stats.LeasesRenewed, "a refused renewal is not counted as one")
		require.NoError(t, attempt2.ctx.Err())

		// A heartbeat by the stale attempt is refused too.
		require.ErrorIs(t, fencing.Heartbeat(attempt.ctx, nil), fencing.ErrLeaseLost)
		attempt.release <- func(ctx context.Context, _ *river.Job[blockArgs]) error { return context.Cause(ctx) }
		attempt2.release <- complete
		final := waitForState(ctx, t, pool, schema, jobID, "completed")
		require.Equal(t, 2, final.Attempt)
	})

	t.Run("RenewalStopsPastRiverDeadline", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		sink := newEventSink()
		driver := newDriver(t, pool, sink, shortConfig())
		worker := newBlockWorker(t)
		worker.timeout = 300 * time.Millisecond
		const stuck = 100 * time.Millisecond
		client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, worker: worker, stuck: stuck})

		inserted, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		attempt := recv(t, worker.started)
		lease, ok := fencing.LeaseFromContext(attempt.ctx) // teaches the keeper Worker.Timeout
		require.True(t, ok)
		require.NotEmpty(t, lease.Token)
		startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, shortConfig()), worker: worker})

		// The attempt ignores its cancelled context (it is stuck). Renewals
		// stop at its deadline and the job is recovered one lease later.
		attempt2 := recv(t, worker.started)
		// Attempt 2 has the same short deadline: released late (a loaded
		// machine), it is recovered in turn, and the attempt after it
		// completes the job.
		attempt2.release <- complete
		go func() {
			for {
				select {
				case later := <-worker.started:
					later.release <- complete
				case <-worker.done:
					return
				}
			}
		}()
		require.Equal(t, 2, attempt2.job.Attempt)
		require.Less(t, time.Since(lease.AttemptedAt), worker.timeout+stuck+leaseTTL+reaperInterval+pollInterval+slack)
		row := getJob(ctx, t, pool, schema, inserted.Job.ID)
		require.GreaterOrEqual(t, row.Errors, 1, "recovered by lease expiry, with an error entry")
		require.LessOrEqual(t, row.Errors, row.Attempt, "one error entry a recovery")

		attempt.release <- complete
		waitForState(ctx, t, pool, schema, inserted.Job.ID, "completed")
	})
}

// TestHeartbeatDetails: details stored by one attempt are read by the next.
func TestHeartbeatDetails(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	worker := newBlockWorker(t)
	// The keeper would first renew 4 minutes in: only Heartbeat renews the
	// lease during this test.
	client := startClient(ctx, t, pool, schema, &clientOpts{
		driver: newDriver(t, pool, nil, &fencing.Config{LeaseTTL: 10 * time.Minute, HeartbeatInterval: 4 * time.Minute}),
		worker: worker,
	})

	require.ErrorIs(t, fencing.Heartbeat(ctx, nil), fencing.ErrNoLease)
	_, ok := fencing.LeaseFromContext(ctx)
	require.False(t, ok)

	inserted, err := client.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	attempt1 := recv(t, worker.started)
	lease1, ok := fencing.LeaseFromContext(attempt1.ctx)
	require.True(t, ok)
	require.Nil(t, lease1.Details)
	require.Equal(t, inserted.Job.ID, lease1.JobID)
	require.Equal(t, 1, lease1.Attempt)
	before := lease1.ExpiresAt

	require.NoError(t, fencing.Heartbeat(attempt1.ctx, map[string]int{"step": 3}))
	lease1, _ = fencing.LeaseFromContext(attempt1.ctx)
	require.JSONEq(t, `{"step": 3}`, string(lease1.Details))
	require.True(t, lease1.ExpiresAt.After(before), "Heartbeat renews at once")
	row := getJob(ctx, t, pool, schema, inserted.Job.ID)
	require.True(t, row.LeaseExpiresAt.Time.Equal(lease1.ExpiresAt), "the database holds the renewed expiry")

	rescue(ctx, t, pool, schema, inserted.Job.ID)
	startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), worker: worker})
	attempt2 := recv(t, worker.started)
	lease2, ok := fencing.LeaseFromContext(attempt2.ctx)
	require.True(t, ok)
	require.Equal(t, 2, lease2.Attempt)
	require.NotEqual(t, lease1.Token, lease2.Token)
	var details map[string]int
	require.NoError(t, json.Unmarshal(lease2.Details, &details))
	require.Equal(t, map[string]int{"step": 3}, details)

	attempt1.release <- func(ctx context.Context, _ *river.Job[blockArgs]) error { return errors.New("stale") }
	attempt2.release <- complete
	waitForState(ctx, t, pool, schema, inserted.Job.ID, "completed")
}

// TestStaleHeartbeatRejectedByDatabase: a heartbeat of an attempt that does
// not know it lost its job is judged by the database, not by the keeper's
// memory: it is refused and leaves the new attempt's lease alone.
func TestStaleHeartbeatRejectedByDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	sinkA := newEventSink()
	driverA := newDriver(t, pool, sinkA, &fencing.Config{
		HeartbeatInterval: 150 * time.Millisecond, LeaseTTL: time.Second, ReaperInterval: 100 * time.Millisecond,
	})
	worker := newBlockWorker(t)
	clientA := startClient(ctx, t, pool, schema, &clientOpts{driver: driverA, worker: worker})

	inserted, err := clientA.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	jobID := inserted.Job.ID
	attempt1 := recv(t, worker.started)
	// Attempt 1 stops renewing without noticing; its lease expires and the
	// job is reaped and fetched by client B as attempt 2.
	driverA.StopHeartbeats()
	// B's keeper would first renew 20s in, and its lease lasts a minute:
	// attempt 2's row changes only if attempt 1's heartbeat changes it.
	driverB := newDriver(t, pool, nil, &fencing.Config{HeartbeatInterval: 20 * time.Second, LeaseTTL: time.Minute})
	startClient(ctx, t, pool, schema, &clientOpts{driver: driverB, worker: worker})
	attempt2 := recv(t, worker.started)
	require.Equal(t, 2, attempt2.job.Attempt)
	driverB.StopHeartbeats()
	require.NoError(t, fencing.Heartbeat(attempt2.ctx, map[string]int{"attempt": 2}))
	require.NoError(t, attempt1.ctx.Err(), "attempt 1 does not know it lost the job")

	type leaseRow struct {
		Attempt   int
		Details   pgtype.Text
		ExpiresAt pgtype.Timestamptz
		State     string
		Token     pgtype.Text
	}
	read := func() leaseRow {
		var r leaseRow
		require.NoError(t, pool.QueryRow(ctx, `SELECT attempt, lease_details::text, lease_expires_at, state::text, lease_token::text
FROM `+pgx.Identifier{schema, "river_job"}.Sanitize()+` WHERE id = $1`, jobID).Scan(&r.Attempt, &r.Details, &r.ExpiresAt, &r.State, &r.Token))
		return r
	}
	before := read()
	require.Equal(t, 2, before.Attempt)
	require.True(t, before.Token.Valid)
	require.JSONEq(t, `{"attempt": 2}`, before.Details.String)

	err = fencing.Heartbeat(attempt1.ctx, map[string]int{"attempt": 1})
	require.ErrorIs(t, err, fencing.ErrLeaseLost)
	var lost *fencing.LeaseLostError
	require.ErrorAs(t, err, &lost)
	require.Equal(t, fencing.LeaseLostError{Attempt: 1, JobID: jobID, Op: "heartbeat"}, *lost)
	require.Equal(t, before, read(), "attempt 2's lease, token and details are unchanged")
	require.ErrorIs(t, context.Cause(attempt1.ctx), fencing.ErrLeaseLost, "the refusal cancels attempt 1")
	require.Equal(t, 1, sinkA.count(fencing.EventLeaseLost, jobID))
	require.NoError(t, attempt2.ctx.Err())

	attempt1.release <- func(ctx context.Context, _ *river.Job[blockArgs]) error { return context.Cause(ctx) }
	attempt2.release <- complete
	final := waitForState(ctx, t, pool, schema, jobID, "completed")
	require.Equal(t, 2, final.Attempt)
}

// TestRenewalSkipsLockedRow: a job row locked by an open transaction neither
// stalls the batched renewal of the other attempts nor counts as lost; the
// attempt keeps running and is renewed once the lock is gone. Meanwhile
// Heartbeat reports the row as busy (ErrLeaseBusy), not the lease as lost.
func TestRenewalSkipsLockedRow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	sink := newEventSink()
	// Leases last a minute and the keeper would first renew 20s in: renewals
	// happen when the test calls RenewNow.
	driver := newDriver(t, pool, sink, &fencing.Config{HeartbeatInterval: 20 * time.Second, LeaseTTL: time.Minute})
	worker := newBlockWorker(t)
	client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, maxWorkers: 2, worker: worker})

	for range 2 {
		_, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
	}
	first, second := recv(t, worker.started), recv(t, worker.started)
	driver.StopHeartbeats()
	locked, free := first, second
	expiresAt := func(id int64) time.Time {
		var at time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT lease_expires_at FROM `+table+` WHERE id = $1`, id).Scan(&at))
		return at
	}
	lockedBefore, freeBefore := expiresAt(locked.job.ID), expiresAt(free.job.ID)
	lockedRenewals, freeRenewals := sink.count(fencing.EventLeaseRenewed, locked.job.ID), sink.count(fencing.EventLeaseRenewed, free.job.ID)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM `+table+` WHERE id = $1 FOR UPDATE`, locked.job.ID)
	require.NoError(t, err)

	// Waiting for the lock would block until renewCtx ends (and fail).
	renewCtx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	require.NoError(t, driver.RenewNow(renewCtx))
	require.True(t, expiresAt(free.job.ID).After(freeBefore), "the other attempt's lease is renewed")
	require.True(t, expiresAt(locked.job.ID).Equal(lockedBefore), "the locked row is skipped")
	require.NoError(t, locked.ctx.Err(), "a skipped row is not a lost lease")
	require.Zero(t, driver.Stats().LeasesLost)
	require.Equal(t, freeRenewals+1, sink.count(fencing.EventLeaseRenewed, free.job.ID))
	require.Equal(t, lockedRenewals, sink.count(fencing.EventLeaseRenewed, locked.job.ID))

	// Heartbeat tries for a while, then says the row is busy.
	err = fencing.Heartbeat(locked.ctx, map[string]int{"step": 1})
	require.ErrorIs(t, err, fencing.ErrLeaseBusy)
	require.NotErrorIs(t, err, fencing.ErrLeaseLost)
	var busy *fencing.LeaseBusyError
	require.ErrorAs(t, err, &busy)
	require.Equal(t, locked.job.ID, busy.JobID)
	require.Equal(t, 1, busy.Attempt)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "wraps the database's error")
	require.Equal(t, pgerrcode.LockNotAvailable, pgErr.Code)
	require.NoError(t, locked.ctx.Err(), "a busy row is not a lost lease")
	require.True(t, expiresAt(locked.job.ID).Equal(lockedBefore))
	require.Zero(t, driver.Stats().LeasesLost)

	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, driver.RenewNow(renewCtx))
	lockedAfter := expiresAt(locked.job.ID)
	require.True(t, lockedAfter.After(lockedBefore), "renewed once the lock is gone")
	require.Equal(t, lockedRenewals+1, sink.count(fencing.EventLeaseRenewed, locked.job.ID))
	require.NoError(t, fencing.Heartbeat(locked.ctx, map[string]int{"step": 2}))
	lease, _ := fencing.LeaseFromContext(locked.ctx)
	require.JSONEq(t, `{"step": 2}`, string(lease.Details))
	require.NoError(t, locked.ctx.Err())
	require.Zero(t, driver.Stats().LeasesLost)

	locked.release <- complete
	free.release <- complete
	waitForState(ctx, t, pool, schema, locked.job.ID, "completed")
	waitForState(ctx, t, pool, schema, free.job.ID, "completed")
}

// reapInfo is what the reaper recorded when it recovered a job, with the
// job's current schedule and attempt start (database times).
type reapInfo struct {
	at          time.Time // when the reaper took the job
	attemptedAt time.Time // the job's attempted_at now
	expiredAt   time.Time // the expiry of the lease the reaper found
	message     string
	scheduledAt time.Time
}

// reapedLease reads the reaper's error entry, the job's last one.
func reapedLease(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, id int64) reapInfo {
	t.Helper()
	var r reapInfo
	require.NoError(t, pool.QueryRow(ctx, `
SELECT e->>'error', (e->>'at')::timestamptz,
    substring(e->>'error' from 'expired at (.+) without renewal')::timestamptz,
    scheduled_at, attempted_at
FROM `+pgx.Identifier{schema, "river_job"}.Sanitize()+`, LATERAL (SELECT errors[cardinality(errors)] AS e) x
WHERE id = $1`, id).Scan(&r.message, &r.at, &r.expiredAt, &r.scheduledAt, &r.attemptedAt))
	return r
}

// firstWorker is a blockWorker whose Work first calls first (reporting its
// error), as a worker that heartbeats as soon as it starts.
type firstWorker struct {
	*blockWorker

	first func(context.Context) error
	t     *testing.T
}

func (w *firstWorker) Work(ctx context.Context, job *river.Job[blockArgs]) error {
	if err := w.first(ctx); err != nil {
		w.t.Errorf("job %d attempt %d: %v", job.ID, job.Attempt, err)
	}
	return w.blockWorker.Work(ctx, job)
}

// startClientWorker is startClient (opts.worker unset) with worker's Work
// preceded by first.
func startClientWorker(ctx context.Context, t *testing.T, schema string, opts *clientOpts,
	worker *blockWorker, first func(context.Context) error,
) *river.Client[pgx.Tx] {
	t.Helper()
	config := testConfig(schema, opts)
	river.AddWorker[blockArgs](config.Workers, &firstWorker{blockWorker: worker, first: first, t: t})
	client, err := river.NewClient[pgx.Tx](opts.driver, config)
	require.NoError(t, err)
	startFully(ctx, t, client, config)
	t.Cleanup(func() {
		worker.finish()
		stopClient(ctx, t, client)
	})
	return client
}

// keeperBundle is a fenced River client on a pool of its own (4
// connections, as configure leaves it) with a keeperTTL lease renewed every
// 100 ms, and the test's own pool to watch jobs through.
type keeperBundle struct {
	client  *river.Client[pgx.Tx]
	driver  *fencing.Driver
	logs    *logBuffer
	observe *pgxpool.Pool
	pool    *pgxpool.Pool
	schema  string
	worker  *blockWorker
}

const keeperTTL = 2 * time.Second

func newKeeperBundle(ctx context.Context, t *testing.T, configure func(config *pgxpool.Config, schema string)) *keeperBundle {
	t.Helper()
	return newKeeperBundleConfig(ctx, t, configure, &fencing.Config{LeaseTTL: keeperTTL, HeartbeatInterval: 100 * time.Millisecond, ReaperInterval: 100 * time.Millisecond})
}

// newKeeperBundleConfig is newKeeperBundle with its own fencing config.
func newKeeperBundleConfig(ctx context.Context, t *testing.T, configure func(config *pgxpool.Config, schema string), fencingConfig *fencing.Config) *keeperBundle {
	t.Helper()
	b := &keeperBundle{schema: dbtest.TestSchema(ctx, t), observe: dbtest.Pool(ctx, t), worker: newBlockWorker(t), logs: &logBuffer{}}
	config, err := pgxpool.ParseConfig(dbtest.URL(ctx, t))
	require.NoError(t, err)
	config.MaxConns = 4
	configure(config, b.schema)
	b.pool, err = pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(b.pool.Close)
	b.driver = newDriver(t, b.pool, nil, fencingConfig)
	b.client = startClient(ctx, t, b.pool, b.schema, &clientOpts{driver: b.driver, logs: b.logs, worker: b.worker})
	return b
}

// refusingTrigger installs on the bundle's river_job a BEFORE UPDATE
// trigger that fails every update matching when (SQL over OLD and NEW) while
// its flag is set (at first: on), and drops it when the test ends (test
// schemas are reused). refuse sets the flag; refused reports whether the
// trigger has refused an update yet.
func (b *keeperBundle) refusingTrigger(ctx context.Context, t *testing.T, name, when string, on bool) (refuse func(bool), refused func() bool) {
	t.Helper()
	flag := pgx.Identifier{b.schema, "test_refuse_" + name}.Sanitize()
	count := pgx.Identifier{b.schema, "test_refused_" + name}.Sanitize()
	fn := pgx.Identifier{b.schema, "test_refuse_" + name + "_fn"}.Sanitize()
	trigger := pgx.Identifier{"test_refuse_" + name}.Sanitize()
	table := pgx.Identifier{b.schema, "river_job"}.Sanitize()
	_, err := b.observe.Exec(ctx, `
CREATE TABLE `+flag+` (refuse bool NOT NULL);
INSERT INTO `+flag+` VALUES (`+strconv.FormatBool(on)+`);
CREATE SEQUENCE `+count+`;
CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF `+when+` AND (SELECT refuse FROM `+flag+`) THEN
        PERFORM nextval('`+count+`'); -- not rolled back with the statement
        RAISE EXCEPTION 'test: `+name+` refused';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER `+trigger+` BEFORE UPDATE ON `+table+` FOR EACH ROW EXECUTE FUNCTION `+fn+`();`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := b.observe.Exec(context.WithoutCancel(ctx), `DROP TRIGGER `+trigger+` ON `+table+
			`; DROP FUNCTION `+fn+`(); DROP TABLE `+flag+`; DROP SEQUENCE `+count)
		require.NoError(t, err)
	})
	refuse = func(on bool) {
		t.Helper()
		_, err := b.observe.Exec(ctx, `UPDATE `+flag+` SET refuse = $1`, on)
		require.NoError(t, err)
	}
	refused = func() bool {
		var called bool
		require.NoError(t, b.observe.QueryRow(ctx, `SELECT is_called FROM `+count).Scan(&called))
		return called
	}
	return refuse, refused
}

// start inserts a job and returns its attempt, once running.
func (b *keeperBundle) start(ctx context.Context, t *testing.T) *startedAttempt {
	t.Helper()
	_, err := b.client.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	return recv(t, b.worker.started)
}

// expires reads the lease expiry of job id.
func (b *keeperBundle) expires(ctx context.Context, t *testing.T, id int64) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, b.observe.QueryRow(ctx, `SELECT lease_expires_at FROM `+pgx.Identifier{b.schema, "river_job"}.Sanitize()+` WHERE id = $1`, id).Scan(&at))
	return at
}

// renewed waits until the lease of job id is renewed n times.
func (b *keeperBundle) renewed(ctx context.Context, t *testing.T, id int64, n int, what string) {
	t.Helper()
	for range n {
		before := b.expires(ctx, t, id)
		waitUntil(t, what, func() bool { return b.expires(ctx, t, id).After(before) })
	}
}

// liveFor checks every 100 ms for d that the lease of job id has not lapsed.
func (b *keeperBundle) liveFor(ctx context.Context, t *testing.T, id int64, d time.Duration, msg string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		var live bool
		require.NoError(t, b.observe.QueryRow(ctx, `SELECT lease_expires_at > now() FROM `+pgx.Identifier{b.schema, "river_job"}.Sanitize()+` WHERE id = $1`, id).Scan(&live))
		require.True(t, live, msg)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestLeaseRenewedWhileThePoolIsBusy: the keeper renews on a connection of
// its own, so that while attempts (or anything else of the process) hold
// every connection of the pool for several LeaseTTLs, a running attempt's
// lease never lapses. Renewing through the pool, the keeper waited behind
// them and every lease expired under work that still ran. When its
// connection breaks, the keeper connects again (with the pool's hooks).
func TestLeaseRenewedWhileThePoolIsBusy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var (
		appName      string
		afterConnect atomic.Int32
	)
	b := newKeeperBundle(ctx, t, func(config *pgxpool.Config, schema string) {
		appName = "fencing-test-" + schema
		config.ConnConfig.RuntimeParams["application_name"] = appName
		config.AfterConnect = func(context.Context, *pgx.Conn) error { afterConnect.Add(1); return nil }
	})
	attempt := b.start(ctx, t)
	id := attempt.job.ID
	first := b.expires(ctx, t, id)
	b.renewed(ctx, t, id, 1, "the keeper renews the lease")
	waitUntil(t, "the keeper holds a connection of its own", func() bool { own, _ := b.driver.KeeperConn(); return own })

	// Take every connection the pool will give, for three LeaseTTLs.
	var held []*pgxpool.Conn
	for {
		acquireCtx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := b.pool.Acquire(acquireCtx)
		cancel()
		if err != nil {
			break
		}
		held = append(held, conn)
	}
	var releaseOnce sync.Once
	release := func() {
		releaseOnce.Do(func() {
			for _, conn := range held {
				conn.Release()
			}
		})
	}
	t.Cleanup(release)
	require.NotEmpty(t, held)
	require.Equal(t, b.pool.Stat().MaxConns(), b.pool.Stat().AcquiredConns(), "the pool is taken")

	b.liveFor(ctx, t, id, 3*keeperTTL, "the lease lapsed while the pool was busy")
	require.True(t, b.expires(ctx, t, id).After(first.Add(2*keeperTTL)), "renewed all along")
	require.NoError(t, attempt.ctx.Err(), "the attempt still holds its job")
	require.Zero(t, b.driver.Stats().LeasesLost)
	own, opened := b.driver.KeeperConn()
	require.True(t, own, "the keeper renews on its own connection")
	require.Equal(t, b.pool.Stat().NewConnsCount()+opened, int64(afterConnect.Load()), "the keeper's connections ran the pool's AfterConnect too")
	release()

	// Every connection of the process breaks (a network cut, a restart):
	// the keeper connects again and renewals go on.
	_, connects := b.driver.KeeperConn()
	var terminated int
	require.NoError(t, b.observe.QueryRow(ctx, "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1) x", appName).Scan(&terminated))
	require.Positive(t, terminated)
	b.renewed(ctx, t, id, 1, "the keeper renews after its connection broke")
	waitUntil(t, "the keeper connected again", func() bool {
		_, reconnects := b.driver.KeeperConn()
		return reconnects > connects
	})
	b.liveFor(ctx, t, id, keeperTTL, "the lease lapsed after the connections broke")
	require.NoError(t, attempt.ctx.Err())
	require.Zero(t, b.driver.Stats().LeasesLost)

	attempt.release <- complete
	row := waitForState(ctx, t, b.observe, b.schema, id, "completed")
	require.Equal(t, 1, row.Attempt, "one attempt, never recovered")
}

// TestLeaseKeeperConnectsSlowly: a keeper whose connection takes longer to
// open than a renewal may wait (right after a Postgres restart the whole
// fleet reconnects at once) renews through the pool meanwhile and takes the
// connection once it is open. A renewal that spent half of LeaseTTL
// connecting and gave up on it would never give the keeper a connection of
// its own, and would leave no time for a slow pool.
func TestLeaseKeeperConnectsSlowly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const connectDelay = 3 * keeperTTL / 4
	var (
		slow      atomic.Bool
		connected atomic.Int32
	)
	b := newKeeperBundle(ctx, t, func(config *pgxpool.Config, _ string) {
		config.MinConns = 4
		config.HealthCheckPeriod = 50 * time.Millisecond // back to MinConns soon after each Hijack
		config.BeforeConnect = func(ctx context.Context, _ *pgx.ConnConfig) error {
			if !slow.Load() {
				return nil
			}
			select {
			case <-time.After(connectDelay):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		config.AfterConnect = func(context.Context, *pgx.Conn) error { connected.Add(1); return nil }
	})
	waitUntil(t, "the pool opened its connections", func() bool { return connected.Load() >= 4 })
	slow.Store(true)
	attempt := b.start(ctx, t)
	b.renewed(ctx, t, attempt.job.ID, 2, "the keeper renews through the pool while it connects")
	waitUntil(t, "the keeper holds a connection of its own", func() bool { own, _ := b.driver.KeeperConn(); return own })
	b.renewed(ctx, t, attempt.job.ID, 1, "the keeper renews on it")
	b.liveFor(ctx, t, attempt.job.ID, keeperTTL, "the lease lapsed")
	require.NoError(t, attempt.ctx.Err())
	require.Zero(t, b.driver.Stats().LeasesLost)
	attempt.release <- complete
	waitForState(ctx, t, b.observe, b.schema, attempt.job.ID, "completed")
}

// TestLeaseKeptUntilTheOutcomeIsWritten: once an attempt's work returns, River's
// completer writes its outcome; when that write fails for a while (Postgres
// restarting, here a trigger refusing it), the completer retries it, and the
// lease is renewed meanwhile. Were renewals to stop when the work
// returned, the reaper would recover the job one LeaseTTL later, its work
// would run again and the retried outcome be refused as stale.
func TestLeaseKeptUntilTheOutcomeIsWritten(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newKeeperBundle(ctx, t, func(*pgxpool.Config, string) {})
	refuse, _ := b.refusingTrigger(ctx, t, "completion", "NEW.state = 'completed'", true)

	attempt := b.start(ctx, t)
	id := attempt.job.ID
	attempt.release <- complete
	// The completer's write fails; the lease lives on for three LeaseTTLs.
	b.liveFor(ctx, t, id, 3*keeperTTL, "the lease lapsed while the outcome was being written")
	require.Equal(t, "running", getJob(ctx, t, b.observe, b.schema, id).State)
	refuse(false)

	row := waitForState(ctx, t, b.observe, b.schema, id, "completed")
	require.Equal(t, 1, row.Attempt, "one attempt, never recovered")
	stats := b.driver.Stats()
	require.Zero(t, stats.LeasesExpired)
	require.Zero(t, stats.LeasesLost)
	require.Zero(t, stats.StaleWritesRejected)
	waitUntil(t, "the attempt leaves the keeper", func() bool { return b.driver.KeeperAttempts() == 0 })
}

// TestLeaseRenewalRetriedSoonAfterAFailure: a renewal that fails (here a
// trigger refuses it; in production the server restarting) is tried again
// after an eighth of HeartbeatInterval, not a whole interval later, so that
// renewals resume soon after the server does: the grace after a restart is
// one LeaseTTL.
func TestLeaseRenewalRetriedSoonAfterAFailure(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const (
		interval = 4 * time.Second
		ttl      = 3 * interval
	)
	b := newKeeperBundleConfig(ctx, t, func(*pgxpool.Config, string) {},
		&fencing.Config{LeaseTTL: ttl, HeartbeatInterval: interval, ReaperInterval: time.Second})
	refuse, refused := b.refusingTrigger(ctx, t, "renewal",
		"OLD.state = 'running' AND NEW.state = 'running' AND NEW.lease_expires_at IS DISTINCT FROM OLD.lease_expires_at", false)

	attempt := b.start(ctx, t)
	id := attempt.job.ID
	started := b.expires(ctx, t, id)
	b.renewed(ctx, t, id, 1, "the keeper renews the lease")
	renewedAt := b.expires(ctx, t, id).Add(-ttl) // database time of the renewal

	refuse(true)
	waitUntil(t, "the next renewal is refused", refused)
	refuse(false)
	b.renewed(ctx, t, id, 1, "the keeper renews the lease again")
	again := b.expires(ctx, t, id).Add(-ttl)
	// The refused renewal came one interval after the first; the next
	// regular one would come another interval later.
	require.Less(t, again.Sub(renewedAt), interval+interval*5/8,
		"the renewal after the refused one waited for the next interval (first lease until %s)", started)
	require.NoError(t, attempt.ctx.Err())
	// The failure is logged with how many renewals failed in a row, and so
	// is the first renewal after it.
	againLogged := regexp.MustCompile(`"msg":"fencing: renewing leases again","failures_in_a_row":1,"failures_not_logged":0`)
	waitUntil(t, "the renewal after the failure is logged", func() bool { return againLogged.MatchString(b.logs.String()) })
	require.Regexp(t, `"msg":"fencing: renewing leases","error":"[^"]*test: renewal refused.*"failures_in_a_row":1,"failures_not_logged":0`, b.logs.String())
	attempt.release <- complete
	waitForState(ctx, t, b.observe, b.schema, id, "completed")
}

// TestLeaseKeeperFallsBackToThePool: a keeper that cannot open a connection
// of its own (here its BeforeConnect fails; in production the server's
// max_connections) renews through the pool, and takes a connection of its
// own once it can.
func TestLeaseKeeperFallsBackToThePool(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var (
		refuse             atomic.Bool
		connected, refused atomic.Int32
	)
	b := newKeeperBundle(ctx, t, func(config *pgxpool.Config, _ string) {
		config.MinConns = 4
		config.HealthCheckPeriod = 50 * time.Millisecond // back to MinConns soon after each Hijack
		config.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
			if refuse.Load() {
				refused.Add(1)
				return errors.New("test: no new connections")
			}
			return nil
		}
		config.AfterConnect = func(context.Context, *pgx.Conn) error { connected.Add(1); return nil }
	})
	// The keeper connects only once an attempt runs. River's listener and
	// the lease reaper (this process takes the schema's reaper lock) each
	// take one of the pool's connections out of it (Hijack), and the pool
	// opens another for MinConns each time: six in all before connections
	// are refused, or the pool, one short, would try to open one for
	// River's own work.
	waitUntil(t, "the pool opened its connections", func() bool { return connected.Load() >= 6 })
	waitUntil(t, "the reaper holds its lock", func() bool { return b.driver.ReaperHolds(b.schema) })
	refuse.Store(true)
	attempt := b.start(ctx, t)
	b.renewed(ctx, t, attempt.job.ID, 3, "the keeper renews through the pool")
	require.Positive(t, refused.Load())
	own, opened := b.driver.KeeperConn()
	require.False(t, own, "no connection of the keeper's own")
	require.Zero(t, opened)

	refuse.Store(false)
	// It tries again after a pause (keeperReconnectPause, 5 s, or a
	// HeartbeatInterval when shorter).
	waitUntil(t, "the keeper opens a connection of its own", func() bool { own, _ := b.driver.KeeperConn(); return own })
	b.renewed(ctx, t, attempt.job.ID, 1, "the keeper renews on it")
	require.NoError(t, attempt.ctx.Err())
	require.Zero(t, b.driver.Stats().LeasesLost)
	attempt.release <- complete
	waitForState(ctx, t, b.observe, b.schema, attempt.job.ID, "completed")
}

// TestSlowObserverDelaysNoCancel: every attempt that a renewal finds lost
// is cancelled before the observer hears of any of them, so an observer
// that blocks (against its contract) delays no cancellation.
func TestSlowObserverDelaysNoCancel(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	sink := newEventSink()
	sink.hold = func(e fencing.Event) {
		if e.Kind == fencing.EventLeaseLost {
			<-release
		}
	}
	driver := newDriver(t, pool, sink, nil)
	worker := newBlockWorker(t)
	client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, maxWorkers: 2, worker: worker})
	var first []*startedAttempt
	for range 2 {
		_, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		first = append(first, recv(t, worker.started))
	}
	// From here on the keeper renews only when the test says (RenewNow).
	driver.StopHeartbeats()
	for _, attempt := range first {
		rescue(ctx, t, pool, schema, attempt.job.ID)
	}
	startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), maxWorkers: 2, worker: worker})
	second := []*startedAttempt{recv(t, worker.started), recv(t, worker.started)}

	renewed := make(chan error, 1)
	go func() { renewed <- driver.RenewNow(ctx) }()
	for _, attempt := range first {
		select {
		case <-attempt.ctx.Done():
			require.ErrorIs(t, context.Cause(attempt.ctx), fencing.ErrLeaseLost)
		case <-time.After(waitTimeout):
			t.Fatalf("job %d's attempt 1 was not cancelled while the observer blocked", attempt.job.ID)
		}
	}
	require.Equal(t, int64(2), driver.Stats().LeasesLost, "counted before the observer hears of them")
	free()
	require.NoError(t, <-renewed)
	require.Equal(t, 2, sink.count(fencing.EventLeaseLost, 0))

	for _, attempt := range first {
		attempt.release <- func(ctx context.Context, _ *river.Job[blockArgs]) error { return context.Cause(ctx) }
	}
	for _, attempt := range second {
		attempt.release <- complete
		waitForState(ctx, t, pool, schema, attempt.job.ID, "completed")
	}
}
