package fencing

import (
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

// TestLeaseKeeperAttempts: the keeper lists every attempt registered for a
// job, however many of one job run here at once, until each is removed, in
// any order.
func TestLeaseKeeperAttempts(t *testing.T) {
	t.Parallel()
	listed := func(k *leaseKeeper) []int {
		var out []int
		k.attempts.each(func(_ int64, head *attemptState) {
			for st := head; st != nil; st = st.sameJob {
				out = append(out, st.attempt)
			}
		})
		slices.Sort(out)
		return out
	}
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {1, 2, 0}} {
		k := newLeaseKeeper(nil)
		attempts := []*attemptState{{jobID: 7, attempt: 1}, {jobID: 7, attempt: 2}, {jobID: 7, attempt: 3}}
		other := &attemptState{jobID: 7 + shardCount, attempt: 9} // same shard, another job
		for _, st := range attempts {
			k.add(st)
		}
		k.add(other)
		want := []int{1, 2, 3, 9}
		require.Equal(t, want, listed(k))
		for _, i := range order {
			k.remove(attempts[i])
			want = slices.DeleteFunc(want, func(a int) bool { return a == attempts[i].attempt })
			require.Equal(t, want, listed(k), "order %v, removed attempt %d", order, attempts[i].attempt)
		}
		k.remove(other)
		require.Empty(t, listed(k))
		require.Empty(t, k.attempts.shard(7).m, "no entry is left for a job without attempts")
	}
}

// TestLeaseKeeperRenewsEachAttempt: when two attempts of one job run here at
// once (the older lost the job to the newer and does not know yet), one
// renewal round renews the newer attempt's lease and tells the older one it
// lost its lease, whichever comes first in the round.
func TestLeaseKeeperRenewsEachAttempt(t *testing.T) {
	t.Parallel()
	for _, olderFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("older first %v", olderFirst), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := dbtest.Pool(ctx, t)
			schema := dbtest.TestSchema(ctx, t)
			table := pgx.Identifier{schema, "river_job"}.Sanitize()
			driver, err := NewDriver(pool, nil)
			require.NoError(t, err)

			var (
				id    int64
				token string
			)
			require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+table+` (args, kind, max_attempts, queue, state, attempt, attempted_at)
VALUES ('{}', 'renew', 5, 'default', 'running', 2, now()) RETURNING id, lease_token::text`).Scan(&id, &token))
			_, err = pool.Exec(ctx, `UPDATE `+table+` SET lease_expires_at = now() + interval '1 second' WHERE id = $1`, id)
			require.NoError(t, err)

			attempt := func(n int, token string) *attemptState {
				st := &attemptState{attempt: n, driver: driver, jobID: id, schema: schema, token: token}
				st.start(context.Background())
				return st
			}
			older := attempt(1, "00000000-0000-4000-8000-000000000001")
			newer := attempt(2, token)
			round := []*attemptState{older, newer}
			if !olderFirst {
				round = []*attemptState{newer, older}
			}
			var events []*Event
			_, err = driver.keeper.renewSchema(ctx, schema, round, 0, &events)
			require.NoError(t, err)
			require.Len(t, events, 2, "one lost, one renewed")

			require.ErrorIs(t, context.Cause(older), ErrLeaseLost, "the older attempt learns it lost the job")
			require.NoError(t, newer.Err(), "the newer attempt keeps running")
			var expires time.Time
			require.NoError(t, pool.QueryRow(ctx, `SELECT lease_expires_at FROM `+table+` WHERE id = $1`, id).Scan(&expires))
			require.True(t, expires.Equal(newer.expiresAt), "the newer attempt holds the renewed lease")
			require.Greater(t, time.Until(expires), 10*time.Second)
			require.True(t, older.expiresAt.IsZero())
		})
	}
}

// TestHeartbeatLockedRow: a heartbeat that finds its job's row locked by
// another transaction tries again, and succeeds once the lock is released
// within lockWait; past lockWait it returns a *LeaseBusyError wrapping the
// database's error, and neither renews the lease nor judges it lost.
func TestHeartbeatLockedRow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	driver, err := NewDriver(pool, &Config{LeaseTTL: time.Minute})
	require.NoError(t, err)

	var (
		id          int64
		token       string
		attemptedAt time.Time
	)
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+table+` (args, kind, max_attempts, queue, state, attempt, attempted_at)
VALUES ('{}', 'heartbeat', 5, 'default', 'running', 1, now()) RETURNING id, lease_token::text, attempted_at`).Scan(&id, &token, &attemptedAt))
	_, err = pool.Exec(ctx, `UPDATE `+table+` SET lease_expires_at = now() + interval '1 minute' WHERE id = $1`, id)
	require.NoError(t, err)
	st := &attemptState{attempt: 1, attemptedAt: attemptedAt, driver: driver, jobID: id, schema: schema, token: token}
	st.start(context.Background())
	read := func() (expires time.Time, details *string) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT lease_expires_at, lease_details::text FROM `+table+` WHERE id = $1`, id).Scan(&expires, &details))
		return expires, details
	}
	lock := func() pgx.Tx {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
		_, err = tx.Exec(ctx, `SELECT 1 FROM `+table+` WHERE id = $1 FOR UPDATE`, id)
		require.NoError(t, err)
		return tx
	}

	t.Run("LockOutlastsWait", func(t *testing.T) {
		tx := lock()
		defer func() { require.NoError(t, tx.Rollback(ctx)) }()
		before, _ := read()
		tries := 0
		driver.keeper.onHeartbeatLocked = func() { tries++ }
		driver.keeper.heartbeatLockWait = 50 * time.Millisecond
		err := driver.keeper.heartbeat(ctx, st, []byte(`{"step": 1}`))
		require.ErrorIs(t, err, ErrLeaseBusy)
		require.NotErrorIs(t, err, ErrLeaseLost)
		var busy *LeaseBusyError
		require.ErrorAs(t, err, &busy)
		require.Equal(t, id, busy.JobID)
		require.Equal(t, 1, busy.Attempt)
		require.GreaterOrEqual(t, busy.Waited, 50*time.Millisecond)
		require.Positive(t, tries)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, pgerrcode.LockNotAvailable, pgErr.Code)
		require.Contains(t, err.Error(), fmt.Sprintf("job %d attempt 1", id))

		after, details := read()
		require.True(t, after.Equal(before), "not renewed")
		require.Nil(t, details)
		require.NoError(t, context.Cause(st), "not lost")
		require.False(t, st.lost)
		require.Zero(t, driver.Stats().LeasesLost)
	})

	t.Run("LockReleasedWhileWaiting", func(t *testing.T) {
		tx := lock()
		before, _ := read()
		tries := 0
		// The lock goes away after the first refused try; the heartbeat
		// waits long enough whatever the scheduler does.
		driver.keeper.onHeartbeatLocked = func() {
			tries++
			if tries == 1 {
				require.NoError(t, tx.Rollback(ctx))
			}
		}
		driver.keeper.heartbeatLockWait = time.Minute
		require.NoError(t, driver.keeper.heartbeat(ctx, st, []byte(`{"step": 2}`)))
		require.Equal(t, 1, tries, "the row was locked at the first try")
		after, details := read()
		require.True(t, after.After(before), "renewed")
		require.True(t, after.Equal(st.expiresAt))
		require.NotNil(t, details)
		require.JSONEq(t, `{"step": 2}`, *details)
		require.NoError(t, context.Cause(st))
	})
}

// TestConnUnfit: which errors make the keeper replace its connection.
func TestConnUnfit(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		&pgconn.PgError{Code: "08006"}:                          true, // connection failure
		&pgconn.PgError{Code: "57P01"}:                          true, // admin shutdown
		&pgconn.PgError{Code: pgerrcode.ReadOnlySQLTransaction}: true, // a demoted primary
		&pgconn.PgError{Code: pgerrcode.UniqueViolation}:        false,
		&pgconn.PgError{Code: pgerrcode.LockNotAvailable}:       false,
		io.ErrUnexpectedEOF:                                     true,
		fmt.Errorf("renewing: %w", context.DeadlineExceeded):    false,
		context.Canceled:                                        false,
	} {
		require.Equal(t, want, connUnfit(err), "%v", err)
	}
}
