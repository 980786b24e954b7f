package fencing_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/pgcluster"
	"github.com/weirhq/weir/migrations"
)

// TestRestartGrace: after a Postgres restart, leases that ran out while the
// server was down (no worker could renew them) get a LeaseTTL grace period
// instead of being reaped all at once.
func TestRestartGrace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	server := dbtest.Server(ctx, t, nil)
	const schema = "grace"

	newPool := func() *pgxpool.Pool {
		pool, err := pgxpool.New(ctx, server.URL("postgres"))
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
	pool := newPool()
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = migrator.Up(ctx, nil)
	require.NoError(t, err)

	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	var jobID int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+table+` (args, kind, state, attempt, attempted_at)
		VALUES ('{}', 'grace', 'running', 1, now()) RETURNING id`).Scan(&jobID))
	_, err = pool.Exec(ctx, `UPDATE `+table+` SET lease_expires_at = now() - interval '10 seconds' WHERE id = $1`, jobID)
	require.NoError(t, err)
	pool.Close()

	require.NoError(t, server.Stop(ctx))
	require.NoError(t, server.Start(ctx))
	pool = newPool()

	reap := func(ttl time.Duration) int {
		t.Helper()
		driver, err := fencing.NewDriver(pool, &fencing.Config{LeaseTTL: ttl})
		require.NoError(t, err)
		driver.NoteSchema(schema)
		reaped, err := driver.ReapNow(ctx)
		require.NoError(t, err)
		return reaped
	}

	require.Zero(t, reap(time.Minute), "within LeaseTTL of the restart, expired leases are not reaped")
	require.Equal(t, "running", getJob(ctx, t, pool, schema, jobID).State)

	const shortTTL = 300 * time.Millisecond
	waitPastRestartGrace(ctx, t, pool, shortTTL)
	require.Equal(t, 1, reap(shortTTL), "once the grace period is over they are")
	row := getJob(ctx, t, pool, schema, jobID)
	require.Equal(t, "available", row.State)
	require.Equal(t, 1, row.Errors)
}

// TestRestartGraceFromFirstPass: a reaper that saw the server before a
// restart starts the grace at its first pass after it, not at the server's
// start, because crash recovery (or a leader that comes back late) can take
// up most of a LeaseTTL after the start, leaving workers no time to renew.
// River's rescuer, through the Pilot, honours the same grace.
func TestRestartGraceFromFirstPass(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	server := dbtest.Server(ctx, t, nil)
	const ttl = time.Second
	pool, driver, jobID := seenServerExpiredLease(ctx, t, server, ttl, false)

	require.NoError(t, server.Crash(ctx))
	require.NoError(t, server.Start(ctx))
	pool.Reset() // drop the connections the crash broke

	// The reaper's first pass comes later than a LeaseTTL after the start,
	// as after a slow recovery: timed from the start, the grace is over.
	waitPastRestartGrace(ctx, t, pool, 2*ttl)
	requireGraceFromFirstPass(ctx, t, driver, pool, jobID, ttl, "restart")
}

// TestRestartGraceAfterABackendCrash: a server process that dies (SIGKILL,
// as an out-of-memory kill would end it) makes Postgres end every session
// and recover from the crash without a new postmaster, so
// pg_postmaster_start_time() does not change. Workers cannot renew through
// that either: leases get the grace they get after a restart, from the
// reaper's first pass after the crash, and River's rescuer honours it.
func TestRestartGraceAfterABackendCrash(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	server := dbtest.Server(ctx, t, nil)
	const ttl = time.Second
	// Past the grace of the server's start, so that any grace the job gets
	// comes from the crash.
	pool, driver, jobID := seenServerExpiredLease(ctx, t, server, ttl, true)

	var (
		startedBefore, startedAfter time.Time
		backend                     int
	)
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_postmaster_start_time(), pg_backend_pid()").Scan(&startedBefore, &backend))
	require.NoError(t, server.CrashBackend(ctx, backend))
	pool.Reset() // drop the connections the crash ended
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&startedAfter))
	require.True(t, startedAfter.Equal(startedBefore), "the postmaster kept running through the crash")

	requireGraceFromFirstPass(ctx, t, driver, pool, jobID, ttl, "crash")
}

// requireGraceFromFirstPass checks what follows a restart (or crash, what)
// that driver's reaper has not seen yet, for job jobID whose lease expired
// before it: River's rescuer leaves the job alone until the reaper's first
// pass, that pass and the rescuer leave it alone for LeaseTTL (ttl), and
// then the reaper recovers it.
func requireGraceFromFirstPass(ctx context.Context, t *testing.T, driver *fencing.Driver, pool *pgxpool.Pool, jobID int64, ttl time.Duration, what string) {
	t.Helper()
	const schema = graceSchema
	stuck, err := driver.StuckJobs(ctx, schema, time.Now().Add(-time.Minute))
	require.NoError(t, err)
	require.Empty(t, stuck, "River's rescuer does not take a job on a %s the reaper has not seen yet", what)
	var passBefore time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now()").Scan(&passBefore))
	reaped, err := driver.ReapNow(ctx)
	require.NoError(t, err)
	require.Zero(t, reaped, "the grace starts at the reaper's first pass after the %s", what)
	stuck, err = driver.StuckJobs(ctx, schema, time.Now().Add(-time.Minute))
	require.NoError(t, err)
	require.Empty(t, stuck, "River's rescuer does not take a job within the grace either")

	waitUntil(t, "the rescuer would take the job", func() bool {
		stuck, err := driver.StuckJobs(ctx, schema, time.Now().Add(-time.Minute))
		require.NoError(t, err)
		return len(stuck) == 1
	})
	reaped, err = driver.ReapNow(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, reaped)
	var reapedAt time.Time
	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	require.NoError(t, pool.QueryRow(ctx, `SELECT (errors[1]->>'at')::timestamptz FROM `+table+` WHERE id = $1`, jobID).Scan(&reapedAt))
	require.GreaterOrEqual(t, reapedAt.Sub(passBefore), ttl, "reaped no sooner than LeaseTTL after the first pass")
	require.Equal(t, "available", getJob(ctx, t, pool, schema, jobID).State)
}

// graceSchema is where the restart tests' jobs are.
const graceSchema = "grace"

// seenServerExpiredLease migrates server, makes a fenced driver (LeaseTTL
// ttl) whose reaper has seen the server (after the grace of its start when
// pastStart), and inserts a running job whose lease expired 10 s ago.
func seenServerExpiredLease(ctx context.Context, t *testing.T, server *pgcluster.Cluster, ttl time.Duration, pastStart bool) (*pgxpool.Pool, *fencing.Driver, int64) {
	t.Helper()
	pool, err := pgxpool.New(ctx, server.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	migrator, err := migrations.New(pool, &migrations.Config{Schema: graceSchema})
	require.NoError(t, err)
	_, err = migrator.Up(ctx, nil)
	require.NoError(t, err)
	if pastStart {
		waitPastRestartGrace(ctx, t, pool, ttl)
	}

	driver, err := fencing.NewDriver(pool, &fencing.Config{LeaseTTL: ttl})
	require.NoError(t, err)
	driver.NoteSchema(graceSchema)
	reaped, err := driver.ReapNow(ctx) // the reaper sees the server
	require.NoError(t, err)
	require.Zero(t, reaped)

	table := pgx.Identifier{graceSchema, "river_job"}.Sanitize()
	var jobID int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+table+` (args, kind, state, attempt, attempted_at)
		VALUES ('{}', 'grace', 'running', 1, now() - interval '1 hour') RETURNING id`).Scan(&jobID))
	_, err = pool.Exec(ctx, `UPDATE `+table+` SET lease_expires_at = now() - interval '10 seconds' WHERE id = $1`, jobID)
	require.NoError(t, err)
	return pool, driver, jobID
}
