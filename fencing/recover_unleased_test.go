package fencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// ageAttempt moves the start of job id's attempt back by d, as if it had
// been running that long.
func ageAttempt(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, id int64, d time.Duration) {
	t.Helper()
	tag, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" SET attempted_at = attempted_at - $2::interval WHERE id = $1 AND state = 'running'", id, d)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())
}

// TestRecoverUnleased: the operator's recovery takes the running jobs that a
// process without fencing left (no lease), once their attempt is older than
// asked: back to available, or discarded past max attempts. It leaves
// younger ones, and fenced jobs whatever their age; a dry run changes
// nothing.
func TestRecoverUnleased(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	driver := newDriver(t, pool, nil, nil)

	// A plain River client runs two jobs: running, without a lease. Its
	// attempts stay blocked: the process is as good as dead.
	plainWorker := newBlockWorker(t)
	plain := startClient(ctx, t, pool, schema, &clientOpts{maxWorkers: 2, noLeader: true, worker: plainWorker})
	retried, err := plain.Insert(ctx, blockArgs{Tag: "retried"}, nil)
	require.NoError(t, err)
	discarded, err := plain.Insert(ctx, blockArgs{Tag: "discarded"}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	recv(t, plainWorker.started)
	recv(t, plainWorker.started)

	// A fenced client runs one: it has a lease, whatever its age.
	fencedWorker := newBlockWorker(t)
	fenced := startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), noLeader: true, worker: fencedWorker})
	leased, err := fenced.Insert(ctx, blockArgs{Tag: "leased"}, nil)
	require.NoError(t, err)
	recv(t, fencedWorker.started)
	require.True(t, getJob(ctx, t, pool, schema, leased.Job.ID).LeaseExpiresAt.Valid)
	require.False(t, getJob(ctx, t, pool, schema, retried.Job.ID).LeaseExpiresAt.Valid)

	opts := &fencing.RecoverUnleasedOpts{OlderThan: time.Hour, Schema: schema}
	res, err := driver.RecoverUnleased(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, &fencing.RecoverUnleasedResult{Younger: 2}, res, "attempts younger than an hour are left alone")

	for _, id := range []int64{retried.Job.ID, discarded.Job.ID, leased.Job.ID} {
		ageAttempt(ctx, t, pool, schema, id, 2*time.Hour)
	}
	want := &fencing.RecoverUnleasedResult{Available: 1, Discarded: 1, JobIDs: []int64{retried.Job.ID, discarded.Job.ID}}
	dry, err := driver.RecoverUnleased(ctx, &fencing.RecoverUnleasedOpts{DryRun: true, OlderThan: time.Hour, Schema: schema})
	require.NoError(t, err)
	require.Equal(t, want, dry)
	for _, id := range []int64{retried.Job.ID, discarded.Job.ID, leased.Job.ID} {
		require.Equal(t, "running", getJob(ctx, t, pool, schema, id).State, "a dry run changes nothing")
	}

	res, err = driver.RecoverUnleased(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, want, res)
	row := getJob(ctx, t, pool, schema, retried.Job.ID)
	require.Equal(t, 1, row.Errors, "an error entry says what happened")
	require.True(t, row.State == "available" || row.Attempt == 2, "available again (or fetched since): %s, attempt %d", row.State, row.Attempt)
	require.Equal(t, "discarded", getJob(ctx, t, pool, schema, discarded.Job.ID).State)
	row = getJob(ctx, t, pool, schema, leased.Job.ID)
	require.Equal(t, "running", row.State, "a fenced job is the reaper's")
	require.Zero(t, row.Errors)

	res, err = driver.RecoverUnleased(ctx, opts)
	require.NoError(t, err)
	require.Equal(t, &fencing.RecoverUnleasedResult{}, res, "nothing left")
}

// TestRecoverUnleasedRefuses: no age limit, or a schema without fencing
// (where every running job is without a lease), is refused.
func TestRecoverUnleasedRefuses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	driver := newDriver(t, pool, nil, nil)

	schema := dbtest.TestSchema(ctx, t)
	_, err := driver.RecoverUnleased(ctx, &fencing.RecoverUnleasedOpts{Schema: schema})
	require.ErrorIs(t, err, fencing.ErrRecoverRefused)
	var refused *fencing.RecoverRefusedError
	require.True(t, errors.As(err, &refused))
	require.Equal(t, schema, refused.Schema)
	require.Contains(t, err.Error(), "OlderThan (0s) must be positive")

	plainSchema, _ := mainOnlySchema(ctx, t, pool)
	_, err = driver.RecoverUnleased(ctx, &fencing.RecoverUnleasedOpts{OlderThan: time.Hour, Schema: plainSchema})
	require.ErrorIs(t, err, fencing.ErrRecoverRefused)
	require.Contains(t, err.Error(), "fencing migration is not installed")
}
