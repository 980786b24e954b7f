package fencing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivershared/riverpilot"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestCompleteTxCurrentAttempt (F2): the attempt that holds the job commits
// its side effects with its completion, and River's executor re-sending
// "completed" afterwards is a harmless repeat, not a stale write.
func TestCompleteTxCurrentAttempt(t *testing.T) {
	t.Parallel()

	for _, name := range []string{"CompleteTx", "JobCompleteTx"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := dbtest.Pool(ctx, t)
			schema := dbtest.TestSchema(ctx, t)
			sideEffectTable := pgx.Identifier{schema, "side_effect"}.Sanitize()
			_, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+sideEffectTable+" (job_id bigint, attempt int)")
			require.NoError(t, err)
			_, err = pool.Exec(ctx, "DELETE FROM "+sideEffectTable)
			require.NoError(t, err)

			sink := newEventSink()
			driver := newDriver(t, pool, sink, nil)
			worker := newBlockWorker(t)
			client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, worker: worker})
			completed, cancel := client.Subscribe(river.EventKindJobCompleted)
			t.Cleanup(cancel)

			inserted, err := client.Insert(ctx, blockArgs{}, nil)
			require.NoError(t, err)
			attempt := recv(t, worker.started)
			errs := make(chan error, 2)
			attempt.release <- func(ctx context.Context, job *river.Job[blockArgs]) error {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "INSERT INTO "+sideEffectTable+" (job_id, attempt) VALUES ($1, $2)", job.ID, job.Attempt); err != nil {
					return err
				}
				var updated *river.Job[blockArgs]
				if name == "CompleteTx" {
					updated, err = fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
				} else {
					updated, err = river.JobCompleteTx[*fencing.Driver](ctx, tx, job)
				}
				errs <- err
				if err == nil && updated.State != rivertype.JobStateCompleted {
					t.Errorf("state after completion: %s", updated.State)
				}
				errs <- tx.Commit(ctx)
				return nil
			}
			require.NoError(t, recv(t, errs))
			require.NoError(t, recv(t, errs))

			event := recv(t, completed)
			require.Equal(t, inserted.Job.ID, event.Job.ID)
			row := getJob(ctx, t, pool, schema, inserted.Job.ID)
			require.Equal(t, "completed", row.State)
			var sideEffects int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+sideEffectTable).Scan(&sideEffects))
			require.Equal(t, 1, sideEffects)
			require.Zero(t, sink.count(fencing.EventStaleWriteRejected, 0), "the executor's repeat is not stale")
		})
	}
}

// TestCompleteTxChecksTheReturnedAttempt (F2, F6): CompleteTx's own check,
// which does not rely on River routing the write through the fencing Pilot.
// A plain River client (River's standard pilot, which completes any running
// row) runs attempt 1; underneath it, the row moves on (to a new attempt, or
// to a new start of the same attempt number), so River's write completes a
// row that is no longer attempt 1's and returns it as completed. CompleteTx
// must see that the row is another attempt's, return ErrLeaseLost for the
// job and abort the caller's transaction; with the row untouched it
// completes as River does.
func TestCompleteTxChecksTheReturnedAttempt(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		name       string
		underneath string // run on the job while attempt 1 works; "" for none
	}{
		{"SameAttempt", ""},
		{"NewAttempt", "UPDATE %s SET attempt = attempt + 1, attempted_at = now() WHERE id = $1"},
		{"SameAttemptNumberNewStart", "UPDATE %s SET attempted_at = attempted_at + interval '1 second' WHERE id = $1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := dbtest.Pool(ctx, t)
			schema := dbtest.TestSchema(ctx, t)
			table := pgx.Identifier{schema, "river_job"}.Sanitize()
			sideEffectTable := pgx.Identifier{schema, "side_effect"}.Sanitize()
			_, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+sideEffectTable+" (job_id bigint, attempt int)")
			require.NoError(t, err)
			_, err = pool.Exec(ctx, "DELETE FROM "+sideEffectTable)
			require.NoError(t, err)

			worker := newBlockWorker(t)
			client := startClient(ctx, t, pool, schema, &clientOpts{worker: worker}) // plain riverpgxv5
			// Attempt 1's Work waits on hold after its transaction, so that
			// River's completer writes nothing before the test reads the row.
			hold := make(chan struct{})
			t.Cleanup(func() { close(hold) })
			inserted, err := client.Insert(ctx, blockArgs{}, nil)
			require.NoError(t, err)
			jobID := inserted.Job.ID
			attempt := recv(t, worker.started)
			require.Equal(t, 1, attempt.job.Attempt)

			if tt.underneath != "" {
				_, err = pool.Exec(ctx, fmt.Sprintf(tt.underneath, table), jobID)
				require.NoError(t, err)
			}
			before := getJob(ctx, t, pool, schema, jobID)

			type result struct {
				commitErr, completeErr error
				updated                *river.Job[blockArgs]
			}
			results := make(chan result, 1)
			attempt.release <- func(ctx context.Context, job *river.Job[blockArgs]) error {
				var res result
				defer func() {
					results <- res
					<-hold
				}()
				tx, err := pool.Begin(ctx)
				if err != nil {
					res.completeErr = err
					return nil
				}
				defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
				if _, err := tx.Exec(ctx, "INSERT INTO "+sideEffectTable+" (job_id, attempt) VALUES ($1, $2)", job.ID, job.Attempt); err != nil {
					res.completeErr = err
					return nil
				}
				res.updated, res.completeErr = fencing.CompleteTx[*riverpgxv5.Driver](ctx, tx, job)
				res.commitErr = tx.Commit(ctx) // committed even after an error
				return nil
			}
			res := recv(t, results)
			row := getJob(ctx, t, pool, schema, jobID)
			var sideEffects int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+sideEffectTable).Scan(&sideEffects))

			if tt.underneath == "" {
				require.NoError(t, res.completeErr)
				require.NoError(t, res.commitErr)
				require.Equal(t, rivertype.JobStateCompleted, res.updated.State)
				require.Equal(t, "completed", row.State)
				require.Equal(t, 1, sideEffects)
				return
			}
			require.ErrorIs(t, res.completeErr, fencing.ErrLeaseLost)
			var lost *fencing.LeaseLostError
			require.ErrorAs(t, res.completeErr, &lost)
			require.Equal(t, jobID, lost.JobID)
			require.Equal(t, 1, lost.Attempt)
			require.Nil(t, res.updated)
			require.ErrorIs(t, res.commitErr, pgx.ErrTxCommitRollback, "the caller's transaction is aborted")
			require.Zero(t, sideEffects, "the stale attempt's side effects roll back")
			require.Equal(t, "running", row.State, "River's completion of the other attempt's row rolled back")
			require.Equal(t, before.Attempt, row.Attempt)
			require.Equal(t, before.LeaseToken, row.LeaseToken)
		})
	}
}

// TestTokenMinting (F3): every transition into running mints a new token,
// leaving running revokes it and remembers it, each finished attempt is
// logged, and lease expiry is computed from database time.
func TestTokenMinting(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tx := dbtest.TestTx(ctx, t) // search_path is a migrated schema

	var id int64
	require.NoError(t, tx.QueryRow(ctx, `INSERT INTO river_job (args, kind, max_attempts) VALUES ('{}', 'mint', 5) RETURNING id`).Scan(&id))

	type lease struct {
		expires   *time.Time
		expected  *time.Time
		lastToken *string
		token     *string
	}
	read := func() lease {
		var l lease
		require.NoError(t, tx.QueryRow(ctx, `SELECT lease_token::text, lease_last_token::text, lease_expires_at, now() + interval '30 seconds'
			FROM river_job WHERE id = $1`, id).Scan(&l.token, &l.lastToken, &l.expires, &l.expected))
		return l
	}
	exec := func(sql string) {
		t.Helper()
		_, err := tx.Exec(ctx, sql, id)
		require.NoError(t, err)
	}

	require.Nil(t, read().token, "an available job has no token")

	// A fenced fetch asks for a lease: expiry is the database's now() + TTL.
	exec(`SELECT set_config('weir.fencing_lease_ttl', '30 seconds', true), $1::bigint`)
	exec(`UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = now(), attempted_by = '{a}' WHERE id = $1`)
	first := read()
	require.NotNil(t, first.token)
	require.NotNil(t, first.expires)
	require.Equal(t, *first.expected, *first.expires, "lease expiry is database time")

	// Heartbeat-like and metadata writes do not touch the token.
	exec(`UPDATE river_job SET metadata = metadata || '{"k": 1}', lease_expires_at = now() WHERE id = $1`)
	require.Equal(t, first.token, read().token)

	// A new attempt while running (rivertest, or any re-claim) is refused
	// while the lease is alive and the statement leaves it as it was
	// (the lease trigger): the row stays the holder's.
	exec(`SELECT set_config('weir.fencing_lease_ttl', '', true), $1::bigint`)
	exec(`UPDATE river_job SET attempt = attempt + 1, attempted_at = now(), attempted_by = attempted_by || '{b}' WHERE id = $1`)
	require.Equal(t, first.token, read().token)
	var attempt int
	require.NoError(t, tx.QueryRow(ctx, `SELECT attempt FROM river_job WHERE id = $1`, id).Scan(&attempt))
	require.Equal(t, 1, attempt)

	// Once the lease expired, a new attempt mints anew.
	exec(`UPDATE river_job SET lease_expires_at = now() - interval '1 second' WHERE id = $1`)
	exec(`UPDATE river_job SET attempt = attempt + 1, attempted_at = now(), attempted_by = attempted_by || '{b}' WHERE id = $1`)
	second := read()
	require.NotNil(t, second.token)
	require.NotEqual(t, *first.token, *second.token)
	require.Nil(t, second.expires, "no lease without a fenced fetch: River's rescue rules apply")

	exec(`UPDATE river_job SET state = 'available' WHERE id = $1`)
	out := read()
	require.Nil(t, out.token)
	require.Nil(t, out.expires)
	require.Equal(t, *second.token, *out.lastToken)

	exec(`UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = now() WHERE id = $1`)
	third := read()
	require.NotEqual(t, *second.token, *third.token)
	exec(`UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`)
	require.Equal(t, *third.token, *read().lastToken)

	// Rows inserted already running get a token too.
	var insertedToken *string
	require.NoError(t, tx.QueryRow(ctx, `INSERT INTO river_job (args, kind, state, attempt, attempted_at) VALUES ('{}', 'mint', 'running', 1, now())
		RETURNING lease_token::text`).Scan(&insertedToken))
	require.NotNil(t, insertedToken)

	type logged struct {
		Attempt     int
		Token       *string
		AttemptedBy *string
		Outcome     string
	}
	logOf := func() []logged {
		t.Helper()
		rows, err := tx.Query(ctx, `SELECT attempt, lease_token::text, attempted_by, outcome FROM weir_job_attempt WHERE job_id = $1 ORDER BY id`, id)
		require.NoError(t, err)
		log, err := pgx.CollectRows(rows, pgx.RowToStructByPos[logged])
		require.NoError(t, err)
		return log
	}
	ended := []logged{
		{Attempt: 1, Token: first.token, AttemptedBy: new("a"), Outcome: "superseded"},
		{Attempt: 2, Token: second.token, AttemptedBy: new("b"), Outcome: "available"},
	}
	require.Equal(t, ended, logOf(), "the attempt that completed the job stays on its row (fencing 003)")

	// Leaving the final state (River's JobRetry) logs the final attempt from
	// the row as it was, once.
	exec(`UPDATE river_job SET state = 'available', finalized_at = NULL WHERE id = $1`)
	exec(`UPDATE river_job SET state = 'scheduled' WHERE id = $1`)
	require.Equal(t, append(ended, logged{Attempt: 3, Token: third.token, AttemptedBy: new("b"), Outcome: "completed"}), logOf())
}

// TestAttemptsGoWithTheirJob: a statement that deletes jobs (River's
// cleaner, an operator) deletes their attempts from the log too, and only
// theirs.
func TestAttemptsGoWithTheirJob(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tx := dbtest.TestTx(ctx, t) // search_path is a migrated schema

	// Each job runs two attempts, both logged by the trigger: the second is
	// rescued, as River's rescuer leaves a stuck job.
	ids := make([]int64, 4)
	for i := range ids {
		require.NoError(t, tx.QueryRow(ctx, `INSERT INTO river_job (args, kind, max_attempts) VALUES ('{}', 'gone', 5) RETURNING id`).Scan(&ids[i]))
		for _, sql := range []string{
			`UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`,
			`UPDATE river_job SET state = 'retryable', scheduled_at = now() WHERE id = $1`,
			`UPDATE river_job SET state = 'running', attempt = 2, attempted_at = now() WHERE id = $1`,
			`UPDATE river_job SET state = 'available', scheduled_at = now() WHERE id = $1`,
		} {
			_, err := tx.Exec(ctx, sql, ids[i])
			require.NoError(t, err)
		}
	}
	logged := func() map[int64]int {
		rows, err := tx.Query(ctx, `SELECT job_id, count(*)::int FROM weir_job_attempt WHERE job_id = ANY($1) GROUP BY job_id`, ids)
		require.NoError(t, err)
		counts := map[int64]int{}
		for rows.Next() {
			var id int64
			var n int
			require.NoError(t, rows.Scan(&id, &n))
			counts[id] = n
		}
		require.NoError(t, rows.Err())
		return counts
	}
	require.Equal(t, map[int64]int{ids[0]: 2, ids[1]: 2, ids[2]: 2, ids[3]: 2}, logged())

	del := func(sql string, args ...any) {
		t.Helper()
		_, err := tx.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	del(`DELETE FROM river_job WHERE id = $1`, ids[0])
	require.Equal(t, map[int64]int{ids[1]: 2, ids[2]: 2, ids[3]: 2}, logged())
	del(`DELETE FROM river_job WHERE id = ANY($1)`, ids[1:3]) // as River's cleaner, many at once
	require.Equal(t, map[int64]int{ids[3]: 2}, logged())
	del(`DELETE FROM river_job WHERE id = -1`) // deletes nothing
	require.Equal(t, map[int64]int{ids[3]: 2}, logged())
}

// TestFailClosed (F6): a write that proves no current attempt is rejected,
// never applied: no proof at all, or a proof of another attempt.
func TestFailClosed(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		attempt *startedAttempt
		jobID   int64
		pilot   riverpilot.Pilot
		pool    interface {
			Begin(ctx context.Context) (pgx.Tx, error)
		}
		schema   string
		sink     *eventSink
		stranger *fencing.Driver
	}
	setup := func(ctx context.Context, t *testing.T) *testBundle {
		t.Helper()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		worker := newBlockWorker(t)
		client := startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), worker: worker})
		inserted, err := client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		attempt := recv(t, worker.started)
		t.Cleanup(func() { attempt.release <- complete })
		// A driver whose pilot never fetched the job: it has no proof for it.
		sink := newEventSink()
		stranger := newDriver(t, pool, sink, nil)
		return &testBundle{attempt: attempt, jobID: inserted.Job.ID, pilot: stranger.PluginPilot(), pool: pool, schema: schema, sink: sink, stranger: stranger}
	}
	completedParams := func(bundle *testBundle, metadata []byte) *riverdriver.JobSetStateIfRunningManyParams {
		now := time.Now()
		return &riverdriver.JobSetStateIfRunningManyParams{
			ID: []int64{bundle.jobID}, Attempt: []*int{nil}, ErrData: [][]byte{nil}, FinalizedAt: []*time.Time{&now},
			MetadataDoMerge: []bool{metadata != nil}, MetadataUpdates: [][]byte{metadata}, ScheduledAt: []*time.Time{nil},
			Schema: bundle.schema, State: []rivertype.JobState{rivertype.JobStateCompleted},
		}
	}

	t.Run("NoProofInCallerTx", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)
		tx, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
		rows, err := bundle.pilot.JobSetStateIfRunningMany(ctx, bundle.stranger.UnwrapExecutor(tx), completedParams(bundle, nil))
		// The write proves no attempt, and says so: no newer attempt is
		// blamed.
		require.ErrorIs(t, err, fencing.ErrNoLease)
		var noLease *fencing.NoLeaseError
		require.ErrorAs(t, err, &noLease)
		require.Equal(t, bundle.jobID, noLease.JobID)
		require.Nil(t, rows)
		require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback)
		require.Equal(t, "running", getJob(ctx, t, dbtest.Pool(ctx, t), bundle.schema, bundle.jobID).State)
	})

	t.Run("NoProofIsDropped", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)
		rows, err := bundle.pilot.JobSetStateIfRunningMany(ctx, bundle.stranger.GetExecutor(), completedParams(bundle, nil))
		require.NoError(t, err)
		require.Empty(t, rows, "a dropped write returns no row, so River emits no event")
		require.Equal(t, 1, bundle.sink.count(fencing.EventStaleWriteRejected, bundle.jobID))
		require.Equal(t, "running", getJob(ctx, t, dbtest.Pool(ctx, t), bundle.schema, bundle.jobID).State)
	})

	t.Run("WrongAttemptIsDropped", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		bundle := setup(ctx, t)
		lease, ok := fencing.LeaseFromContext(bundle.attempt.ctx)
		require.True(t, ok)
		for _, proof := range []string{
			`{"weir:fencing:proof": "00000000-0000-4000-8000-000000000000/1/1577836800000000"}`,
			`{"weir:fencing:proof": "/7/` + strconv.FormatInt(lease.AttemptedAt.UnixMicro(), 10) + `"}`,
			// The attempt's token, with an attempt it was not minted for.
			`{"weir:fencing:proof": "` + lease.Token + `/2/` + strconv.FormatInt(lease.AttemptedAt.UnixMicro(), 10) + `"}`,
		} {
			rows, err := bundle.pilot.JobSetStateIfRunningMany(ctx, bundle.stranger.GetExecutor(), completedParams(bundle, []byte(proof)))
			require.NoError(t, err)
			require.Empty(t, rows)
		}
		require.Equal(t, 3, bundle.sink.count(fencing.EventStaleWriteRejected, bundle.jobID))
		row := getJob(ctx, t, dbtest.Pool(ctx, t), bundle.schema, bundle.jobID)
		require.Equal(t, "running", row.State)
		require.Equal(t, lease.Token, row.LeaseToken.String)

		// The right proof, shown by anyone, is accepted: proofs are not secrets.
		proof := `{"other": 1, "weir:fencing:proof": "` + lease.Token + `/1/` + strconv.FormatInt(lease.AttemptedAt.UnixMicro(), 10) + `"}`
		rows, err := bundle.pilot.JobSetStateIfRunningMany(ctx, bundle.stranger.GetExecutor(), completedParams(bundle, []byte(proof)))
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, rivertype.JobStateCompleted, rows[0].State)
		require.NotContains(t, string(rows[0].Metadata), "weir:fencing:proof", "the proof is never persisted")
		// The attempt's other metadata updates are merged, without the proof.
		var returned map[string]any
		require.NoError(t, json.Unmarshal(rows[0].Metadata, &returned))
		require.Equal(t, float64(1), returned["other"], "the returned row has the merged update")
		row = getJob(ctx, t, dbtest.Pool(ctx, t), bundle.schema, bundle.jobID)
		require.Equal(t, "completed", row.State)
		require.Equal(t, float64(1), row.Metadata["other"], "the update is merged into the stored metadata")
		require.NotContains(t, row.Metadata, "weir:fencing:proof", "the proof is not stored in the job's metadata")
		require.Equal(t, returned, row.Metadata, "River's returned row is the stored row")
	})
}
