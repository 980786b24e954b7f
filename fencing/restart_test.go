package fencing_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
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

	require.NoError(t, server.Restart(ctx))
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
