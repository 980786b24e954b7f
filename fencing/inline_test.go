package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/fencingclaim"
	"github.com/weirhq/weir/migrations"
)

// TestInlineStatementsMatchRiver (F7): on a fenced schema the Pilot fetches and
// writes job states with its own statements (River's SQL plus the lease
// work). On the same jobs they must return exactly what River's own
// statements return, and leave the jobs exactly as River's leave them, apart
// from the lease columns; and they must do the lease work the trigger would
// have done: a token and an expiry per fetched job, the lease revoked and the
// attempt logged once per write that applies.
func TestInlineStatementsMatchRiver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, singly := range []bool{false, true} {
		t.Run(fmt.Sprintf("singly=%v", singly), func(t *testing.T) {
			t.Parallel()
			pool := dbtest.Pool(ctx, t)

			plain := dbtest.EmptySchema(ctx, t) // River's schema only, River's statements
			migrator, err := migrations.New(pool, &migrations.Config{Schema: plain})
			require.NoError(t, err)
			_, err = migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineMain})
			require.NoError(t, err)
			fenced := dbtest.TestSchema(ctx, t) // every line, the fencing Pilot

			now := time.Now().UTC().Truncate(time.Microsecond)
			for _, schema := range []string{plain, fenced} {
				_, err := pool.Exec(ctx, `
		INSERT INTO `+pgx.Identifier{schema, "river_job"}.Sanitize()+`
		    (id, args, kind, max_attempts, metadata, priority, queue, state, scheduled_at, created_at, tags, errors)
		SELECT i, jsonb_build_object('n', i), 'inline', 5,
		    CASE WHEN i = 4 THEN jsonb_build_object('cancel_attempted_at', $1::timestamptz) ELSE '{"m": 1}' END,
		    1, 'default', 'available', $1::timestamptz - interval '1 hour' + i * interval '1 second',
		    $1::timestamptz - interval '2 hours', ARRAY['t' || i],
		    CASE WHEN i = 2 THEN ARRAY['{"at": "2024-01-01T00:00:00Z", "attempt": 0, "error": "before", "trace": ""}'::jsonb] ELSE '{}' END
		FROM generate_series(1, 8) i`, now)
				require.NoError(t, err)
			}

			riverExec := riverpgxv5.New(pool).GetExecutor()
			driver := newDriver(t, pool, nil, nil)
			pilot := driver.PluginPilot()

			fetchParams := func(schema string) *riverdriver.JobGetAvailableParams {
				return &riverdriver.JobGetAvailableParams{
					ClientID: "inline-client", MaxAttemptedBy: 100, MaxToLock: 7, Now: &now, Queue: "default", Schema: schema,
				}
			}
			want, err := riverExec.JobGetAvailable(ctx, fetchParams(plain))
			require.NoError(t, err)
			got, err := pilot.JobGetAvailable(ctx, driver.GetExecutor(), nil, fetchParams(fenced))
			require.NoError(t, err)
			byID := func(a, b *rivertype.JobRow) int { return int(a.ID - b.ID) }
			slices.SortFunc(want.Jobs, byID)
			slices.SortFunc(got.Jobs, byID)
			require.Len(t, got.Jobs, 7)
			require.Equal(t, want, got)

			type lease struct {
				ID        int64
				Token     *string
				Expires   *time.Time
				LastToken *string
			}
			leases := func() []lease {
				rows, err := pool.Query(ctx, `SELECT id, lease_token::text, lease_expires_at, lease_last_token::text
		FROM `+pgx.Identifier{fenced, "river_job"}.Sanitize()+` ORDER BY id`)
				require.NoError(t, err)
				out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[lease])
				require.NoError(t, err)
				return out
			}
			fetched := leases()
			tokens := map[int64]string{}
			for _, l := range fetched[:7] {
				require.NotNil(t, l.Token, "job %d got a token", l.ID)
				require.NotNil(t, l.Expires, "job %d got a lease", l.ID)
				require.WithinDuration(t, time.Now(), *l.Expires, time.Minute)
				tokens[l.ID] = *l.Token
			}
			require.Nil(t, fetched[7].Token, "job 8 was not fetched")

			at := now.Add(time.Second)
			later := now.Add(time.Minute)
			errData := []byte(`{"at": "2024-01-01T00:00:01Z", "attempt": 1, "error": "boom", "trace": ""}`)
			setParams := func(schema string) *riverdriver.JobSetStateIfRunningManyParams {
				return &riverdriver.JobSetStateIfRunningManyParams{
					ID:              []int64{1, 2, 3, 4, 5, 6, 7, 999},
					Attempt:         []*int{nil, nil, new(0), nil, nil, nil, nil, nil},
					ErrData:         [][]byte{nil, errData, nil, errData, errData, errData, nil, nil},
					FinalizedAt:     []*time.Time{&at, nil, nil, nil, &at, &at, &at, &at},
					MetadataDoMerge: []bool{false, false, true, false, false, false, true, false},
					MetadataUpdates: [][]byte{nil, nil, []byte(`{"snoozes": 1}`), nil, nil, nil, []byte(`{"output": {"ok": true}}`), nil},
					Now:             &at,
					ScheduledAt:     []*time.Time{nil, &later, &later, &later, nil, nil, nil, nil},
					Schema:          schema,
					State: []rivertype.JobState{
						rivertype.JobStateCompleted, rivertype.JobStateRetryable, rivertype.JobStateAvailable,
						rivertype.JobStateRetryable, rivertype.JobStateDiscarded, rivertype.JobStateCancelled,
						rivertype.JobStateCompleted, rivertype.JobStateCompleted,
					},
				}
			}
			// The writes in one batch (the unnest statement), or one at a time
			// (the single-write statement), for River's statement and the Pilot's.
			var wantRows, gotRows []*rivertype.JobRow
			for _, pair := range zipWrites(setParams(plain), setParams(fenced), singly) {
				want, err := riverExec.JobSetStateIfRunningMany(ctx, pair[0])
				require.NoError(t, err)
				got, err := pilot.JobSetStateIfRunningMany(ctx, driver.GetExecutor(), pair[1])
				require.NoError(t, err)
				wantRows, gotRows = append(wantRows, want...), append(gotRows, got...)
			}
			require.Len(t, gotRows, 7)
			require.Equal(t, wantRows, gotRows)
			require.Equal(t, rivertype.JobStateCancelled, gotRows[3].State, "cancel requested: River's rule applies")

			all := func(schema string) []*rivertype.JobRow {
				jobs, err := riverExec.JobGetByIDMany(ctx, &riverdriver.JobGetByIDManyParams{ID: []int64{1, 2, 3, 4, 5, 6, 7, 8}, Schema: schema})
				require.NoError(t, err)
				return jobs
			}
			require.Equal(t, all(plain), all(fenced))

			// Every lease revoked, its token kept as the last one, and each attempt
			// logged once with the state it left its job in.
			for _, l := range leases()[:7] {
				require.Nil(t, l.Token)
				require.Nil(t, l.Expires)
				require.NotNil(t, l.LastToken)
				require.Equal(t, tokens[l.ID], *l.LastToken)
			}
			type logged struct {
				JobID       int64
				Attempt     int
				Token       string
				AttemptedBy string
				StartedAt   time.Time
				Outcome     string
			}
			// An attempt that finalized its job stays on the job's row
			// (fencing 003); the others are in the log.
			logTable, jobTable := pgx.Identifier{fenced, "weir_job_attempt"}.Sanitize(), pgx.Identifier{fenced, "river_job"}.Sanitize()
			rows, err := pool.Query(ctx, `SELECT job_id, attempt, lease_token::text, attempted_by, started_at, outcome FROM `+logTable+`
		UNION ALL
		SELECT id, attempt, lease_last_token::text, attempted_by[array_upper(attempted_by, 1)], attempted_at, state::text FROM `+jobTable+`
		WHERE state IN ('completed', 'cancelled', 'discarded')
		ORDER BY job_id`)
			require.NoError(t, err)
			log, err := pgx.CollectRows(rows, pgx.RowToStructByPos[logged])
			require.NoError(t, err)
			require.Len(t, log, 7)
			var logRows, unfinished int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+logTable).Scan(&logRows))
			for _, row := range gotRows {
				if !slices.Contains([]rivertype.JobState{rivertype.JobStateCompleted, rivertype.JobStateCancelled, rivertype.JobStateDiscarded}, row.State) {
					unfinished++
				}
			}
			require.Equal(t, unfinished, logRows, "only the attempts that left their jobs unfinished are logged")
			for i, entry := range log {
				require.Equal(t, logged{
					JobID: int64(i + 1), Attempt: 1, Token: tokens[int64(i+1)], AttemptedBy: "inline-client",
					StartedAt: entry.StartedAt, Outcome: string(gotRows[i].State),
				}, entry)
				require.True(t, now.Equal(entry.StartedAt), "started at the attempt's attempted_at")
			}
		})
	}
}

// zipWrites pairs River's writes with the Pilot's: all in one, or one pair
// per write when singly.
func zipWrites(river, pilot *riverdriver.JobSetStateIfRunningManyParams, singly bool) [][2]*riverdriver.JobSetStateIfRunningManyParams {
	if !singly {
		return [][2]*riverdriver.JobSetStateIfRunningManyParams{{river, pilot}}
	}
	one := func(p *riverdriver.JobSetStateIfRunningManyParams, i int) *riverdriver.JobSetStateIfRunningManyParams {
		return &riverdriver.JobSetStateIfRunningManyParams{
			ID: p.ID[i : i+1], Attempt: p.Attempt[i : i+1], ErrData: p.ErrData[i : i+1], FinalizedAt: p.FinalizedAt[i : i+1],
			MetadataDoMerge: p.MetadataDoMerge[i : i+1], MetadataUpdates: p.MetadataUpdates[i : i+1], Now: p.Now,
			ScheduledAt: p.ScheduledAt[i : i+1], Schema: p.Schema, State: p.State[i : i+1],
		}
	}
	pairs := make([][2]*riverdriver.JobSetStateIfRunningManyParams, len(river.ID))
	for i := range river.ID {
		pairs[i] = [2]*riverdriver.JobSetStateIfRunningManyParams{one(river, i), one(pilot, i)}
	}
	return pairs
}

// queuedClaimer returns a func that claims a job with params in a
// transaction of its own.
func queuedClaimer(ctx context.Context, t *testing.T, pool *pgxpool.Pool, driver *fencing.Driver, params *fencingclaim.Params) func() *fencingclaim.Claim {
	t.Helper()
	claim := func() *fencingclaim.Claim {
		var c *fencingclaim.Claim
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			c, err = claimAPI(driver).InsertClaimedTx(ctx, tx, params)
			return err
		}))
		return c
	}
	return claim
}

// TestClaimedCompletionMatchesRiver (F7): a claimed job's completion queued
// alone in its caller's batch (QueueCompletions) has a statement of its own,
// for one job. It must leave the job exactly as River's completion leaves
// the same running job, apart from the lease columns, and do the lease work:
// the lease revoked, its token kept as the last one, the attempt logged once.
func TestClaimedCompletionMatchesRiver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)

	plain := dbtest.EmptySchema(ctx, t)
	migrator, err := migrations.New(pool, &migrations.Config{Schema: plain})
	require.NoError(t, err)
	_, err = migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineMain})
	require.NoError(t, err)
	fenced := dbtest.TestSchema(ctx, t)
	driver := newDriver(t, pool, nil, nil)
	riverExec := riverpgxv5.New(pool).GetExecutor()

	claim := queuedClaimer(ctx, t, pool, driver, &fencingclaim.Params{
		Args: []byte(`{"n": 1}`), AttemptedBy: "claimer", Kind: "inline", MaxAttempts: 5, Metadata: []byte(`{"m": 1}`),
		Priority: 2, Queue: "default", Schema: fenced,
	})

	for _, updates := range [][]byte{nil, []byte(`{"output": {"ok": true}, "m": 2}`)} {
		c := claim()
		// The same running job in River's schema, for River's statement.
		var plainID int64
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+pgx.Identifier{plain, "river_job"}.Sanitize()+`
    (args, attempt, attempted_at, attempted_by, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)
SELECT args, attempt, attempted_at, attempted_by, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at, 'running', tags
FROM `+pgx.Identifier{fenced, "river_job"}.Sanitize()+` WHERE id = $1 RETURNING id`, c.ID).Scan(&plainID))

		at := time.Now().UTC().Truncate(time.Microsecond)
		riverParams := riverdriver.JobSetStateCompleted(plainID, at, updates)
		_, err := riverExec.JobSetStateIfRunningMany(ctx, &riverdriver.JobSetStateIfRunningManyParams{
			ID: []int64{plainID}, Attempt: []*int{riverParams.Attempt}, ErrData: [][]byte{riverParams.ErrData},
			FinalizedAt: []*time.Time{riverParams.FinalizedAt}, MetadataDoMerge: []bool{riverParams.MetadataDoMerge},
			MetadataUpdates: [][]byte{riverParams.MetadataUpdates}, ScheduledAt: []*time.Time{riverParams.ScheduledAt},
			Schema: plain, State: []rivertype.JobState{riverParams.State},
		})
		require.NoError(t, err)

		var token string
		require.NoError(t, claimAPI(driver).WorkClaimed(ctx, c, time.Time{}, func(ctx context.Context, _ context.CancelCauseFunc) error {
			lease, ok := fencing.LeaseFromContext(ctx)
			require.True(t, ok)
			token = lease.Token
			batch := &pgx.Batch{}
			require.NoError(t, queueCompletion(ctx, driver, batch, c.ID, at, updates))
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, batch).Close() })
		}))

		want, err := riverExec.JobGetByID(ctx, &riverdriver.JobGetByIDParams{ID: plainID, Schema: plain})
		require.NoError(t, err)
		got, err := riverExec.JobGetByID(ctx, &riverdriver.JobGetByIDParams{ID: c.ID, Schema: fenced})
		require.NoError(t, err)
		require.Equal(t, rivertype.JobStateCompleted, got.State)
		got.ID = want.ID
		require.Equal(t, want, got, "metadata updates %s", updates)

		row := getJob(ctx, t, pool, fenced, c.ID)
		require.False(t, row.LeaseToken.Valid, "the lease is revoked")
		require.False(t, row.LeaseExpiresAt.Valid)
		require.Equal(t, pgtype.Text{String: token, Valid: true}, row.LeaseLastToken)
		type logged struct {
			Attempt     int
			Token       string
			AttemptedBy string
			StartedAt   time.Time
			Outcome     string
		}
		require.Zero(t, loggedRows(ctx, t, pool, fenced, c.ID), "the attempt, which completed the job, stays on its row")
		// River's retry logs it as it ended.
		_, err = riverExec.JobRetry(ctx, &riverdriver.JobRetryParams{ID: c.ID, Now: nil, Schema: fenced})
		require.NoError(t, err)
		rows, err := pool.Query(ctx, `SELECT attempt, lease_token::text, attempted_by, started_at, outcome
FROM `+pgx.Identifier{fenced, "weir_job_attempt"}.Sanitize()+` WHERE job_id = $1`, c.ID)
		require.NoError(t, err)
		log, err := pgx.CollectRows(rows, pgx.RowToStructByPos[logged])
		require.NoError(t, err)
		require.Len(t, log, 1)
		require.Equal(t, []logged{{Attempt: 1, Token: token, AttemptedBy: "claimer", StartedAt: log[0].StartedAt, Outcome: "completed"}}, log)
		require.True(t, c.AttemptedAt.Equal(log[0].StartedAt), "started at the attempt's attempted_at")
	}
}

// TestFencedClientLogsEachAttemptOnce runs a fenced client on a schema
// with River's line and the fencing line alone: every attempt gets a lease,
// and is logged exactly once when it ends.
func TestFencedClientLogsEachAttemptOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := fencedOnlySchema(ctx, t, pool)

	worker := newBlockWorker(t)
	client := startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), worker: worker, maxWorkers: 2})
	first, err := client.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	second, err := client.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)

	attempts := map[int64]*startedAttempt{}
	for range 2 {
		attempt := recv(t, worker.started)
		attempts[attempt.job.ID] = attempt
	}
	for id, attempt := range attempts {
		lease, ok := fencing.LeaseFromContext(attempt.ctx)
		require.True(t, ok)
		require.NotEmpty(t, lease.Token, "job %d", id)
		require.False(t, lease.ExpiresAt.IsZero(), "job %d has a lease", id)
		row := getJob(ctx, t, pool, schema, id)
		require.Equal(t, lease.Token, row.LeaseToken.String)
	}
	attempts[first.Job.ID].release <- complete
	attempts[second.Job.ID].release <- func(context.Context, *river.Job[blockArgs]) error { return river.JobCancel(errors.New("boom")) }
	done := waitForState(ctx, t, pool, schema, first.Job.ID, "completed")
	require.False(t, done.LeaseToken.Valid)
	failed := waitForState(ctx, t, pool, schema, second.Job.ID, "cancelled")
	require.False(t, failed.LeaseToken.Valid)

	for id, outcome := range map[int64]string{first.Job.ID: "completed", second.Job.ID: "cancelled"} {
		require.Equal(t, []string{outcome}, attemptLog(ctx, t, pool, schema, id), "job %d logged once", id)
		require.Zero(t, loggedRows(ctx, t, pool, schema, id), "job %d: the final attempt stays on the job's row", id)
	}

	// River's retry of the finished job (River UI's, JobRetry) logs its
	// final attempt before the next one overwrites the row, once; the
	// next attempt then finalizes the job and stays on its row.
	for range 2 {
		_, err = client.JobRetry(ctx, first.Job.ID)
		require.NoError(t, err)
	}
	require.Equal(t, 1, loggedRows(ctx, t, pool, schema, first.Job.ID))
	require.Equal(t, []string{"completed"}, attemptLog(ctx, t, pool, schema, first.Job.ID))
	recv(t, worker.started).release <- complete
	waitForState(ctx, t, pool, schema, first.Job.ID, "completed")
	require.Equal(t, []string{"completed", "completed"}, attemptLog(ctx, t, pool, schema, first.Job.ID))
	require.Equal(t, 1, loggedRows(ctx, t, pool, schema, first.Job.ID))
}

// writeExecutor is the executor a test's state write goes through: the
// driver's own (the Pilot's one-statement path), or, when judged, River's
// riverpgxv5 executor on the same pool, which the Pilot cannot run that
// statement on (its judged path: a check, then River's statement).
func writeExecutor(driver *fencing.Driver, pool *pgxpool.Pool, judged bool) riverdriver.Executor {
	if judged {
		return riverpgxv5.New(pool).GetExecutor()
	}
	return driver.GetExecutor()
}

// attemptLog returns the outcomes of job id's ended attempts that held a
// lease token, oldest first: its rows in the attempt log, then the attempt
// that finalized it, kept on the job's row unless logged (fencing 003).
func attemptLog(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, id int64) []string {
	t.Helper()
	log, job := pgx.Identifier{schema, "weir_job_attempt"}.Sanitize(), pgx.Identifier{schema, "river_job"}.Sanitize()
	rows, err := pool.Query(ctx, `SELECT outcome FROM (
    SELECT outcome, id FROM `+log+` WHERE job_id = $1 AND lease_token IS NOT NULL
    UNION ALL
    SELECT j.state::text, NULL FROM `+job+` j
    WHERE j.id = $1 AND j.state IN ('completed', 'cancelled', 'discarded') AND j.lease_last_token IS NOT NULL
        AND j.attempt > 0 AND j.attempted_at IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM `+log+` a WHERE a.job_id = j.id AND a.attempt = j.attempt AND a.started_at = j.attempted_at)
) a ORDER BY id NULLS LAST`, id)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// loggedRows counts the rows of job id in the attempt log itself.
func loggedRows(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, id int64) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "weir_job_attempt"}.Sanitize()+
		" WHERE job_id = $1", id).Scan(&n))
	return n
}

// fencedOnlySchema returns a new schema with River's line and the fencing
// line, without weir's.
func fencedOnlySchema(ctx context.Context, t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	schema := dbtest.EmptySchema(ctx, t)
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	require.NoError(t, err)
	_, err = migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineMain})
	require.NoError(t, err)
	_, err = migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineFencing})
	require.NoError(t, err)
	return schema
}

// TestStateWriteRechecksItsRow: a fenced state write judges the row as a
// concurrent writer that held it left it, not as it was when the write's
// statement began. On the Pilot's one-statement path the proof check is in
// River's UPDATE (which Postgres re-checks on the row's latest version) and
// a write not applied is classified on the row once locked; on its judged
// path (an executor it cannot run that statement on) the jobs are locked
// before they are judged. Either way: a job that a new attempt took meanwhile is not
// finalized by the old one (F1), a job whose lease was only renewed
// meanwhile is, and a write repeating the completion that the same attempt
// committed meanwhile is a harmless repeat, not a stale write.
func TestStateWriteRechecksItsRow(t *testing.T) {
	t.Parallel()
	type outcome int
	const (
		dropped outcome = iota
		applied
		repeated
	)
	for _, tt := range []struct {
		name string
		// meanwhile is what the concurrent transaction does to the job.
		meanwhile func(ctx context.Context, t *testing.T, tx pgx.Tx, table string, id int64, complete func(riverdriver.Executor) []*rivertype.JobRow)
		want      outcome
	}{
		{
			name: "NewAttemptCommitsFirst",
			meanwhile: func(ctx context.Context, t *testing.T, tx pgx.Tx, table string, id int64, _ func(riverdriver.Executor) []*rivertype.JobRow) {
				for _, sql := range []string{
					"UPDATE %s SET state = 'available', lease_expires_at = NULL WHERE id = $1",
					"UPDATE %s SET state = 'running', attempt = attempt + 1, attempted_at = now() WHERE id = $1",
				} {
					_, err := tx.Exec(ctx, fmt.Sprintf(sql, table), id)
					require.NoError(t, err)
				}
			},
			want: dropped,
		},
		{
			name: "RenewalCommitsFirst",
			meanwhile: func(ctx context.Context, t *testing.T, tx pgx.Tx, table string, id int64, _ func(riverdriver.Executor) []*rivertype.JobRow) {
				_, err := tx.Exec(ctx, "UPDATE "+table+" SET lease_expires_at = now() + interval '1 minute' WHERE id = $1", id)
				require.NoError(t, err)
			},
			want: applied,
		},
		{
			// JobCompleteTx in a transaction still open when River's executor
			// sends completed again.
			name: "SameAttemptsCompletionCommitsFirst",
			meanwhile: func(_ context.Context, t *testing.T, _ pgx.Tx, _ string, _ int64, complete func(riverdriver.Executor) []*rivertype.JobRow) {
				require.Len(t, complete(nil), 1)
			},
			want: repeated,
		},
	} {
		for _, judged := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/judged=%v", tt.name, judged), func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				pool := dbtest.Pool(ctx, t)
				schema := fencedOnlySchema(ctx, t, pool)
				table := pgx.Identifier{schema, "river_job"}.Sanitize()
				var id int64
				require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+table+` (args, kind, max_attempts, queue, state)
VALUES ('{}', 'recheck', 5, 'default', 'available') RETURNING id`).Scan(&id))
				sink := newEventSink()
				driver := newDriver(t, pool, sink, nil)
				pilot := driver.PluginPilot()
				fetched, err := pilot.JobGetAvailable(ctx, driver.GetExecutor(), nil, &riverdriver.JobGetAvailableParams{
					ClientID: "recheck", MaxAttemptedBy: 100, MaxToLock: 1, Queue: "default", Schema: schema,
				})
				require.NoError(t, err)
				require.Len(t, fetched.Jobs, 1)
				before := getJob(ctx, t, pool, schema, id)
				// Attempt 1's completion, with its proof as the plugin attaches it.
				proof := fmt.Sprintf(`{"weir:fencing:proof": "%s/%d/%d"}`, before.LeaseToken.String, before.Attempt, fetched.Jobs[0].AttemptedAt.UnixMicro())
				now := time.Now()
				complete := func(exec riverdriver.Executor) []*rivertype.JobRow {
					rows, err := pilot.JobSetStateIfRunningMany(ctx, exec, &riverdriver.JobSetStateIfRunningManyParams{
						ID: []int64{id}, Attempt: []*int{nil}, ErrData: [][]byte{nil}, FinalizedAt: []*time.Time{&now},
						MetadataDoMerge: []bool{true}, MetadataUpdates: [][]byte{[]byte(proof)}, ScheduledAt: []*time.Time{nil},
						Schema: schema, State: []rivertype.JobState{rivertype.JobStateCompleted},
					})
					require.NoError(t, err)
					return rows
				}

				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
				var txPID int
				require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&txPID))
				tt.meanwhile(ctx, t, tx, table, id, func(riverdriver.Executor) []*rivertype.JobRow {
					return complete(driver.UnwrapExecutor(tx))
				})

				// The write waits for the row, then finds what tx committed.
				done := make(chan []*rivertype.JobRow, 1)
				go func() { done <- complete(writeExecutor(driver, pool, judged)) }()
				waitUntil(t, "the write waits for the row", func() bool {
					var waiting bool
					require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
WHERE $1::int = ANY (pg_blocking_pids(pid)))`, txPID).Scan(&waiting))
					return waiting
				})
				require.NoError(t, tx.Commit(ctx))
				rows := recv(t, done)

				row := getJob(ctx, t, pool, schema, id)
				switch tt.want {
				case applied, repeated:
					require.Len(t, rows, 1)
					require.Equal(t, rivertype.JobStateCompleted, rows[0].State)
					require.Equal(t, "completed", row.State)
					require.Equal(t, before.LeaseToken, row.LeaseLastToken)
					require.Equal(t, []string{"completed"}, attemptLog(ctx, t, pool, schema, id), "the attempt is logged once")
					require.Zero(t, sink.count(fencing.EventStaleWriteRejected, id), "nothing was stale")
				case dropped:
					require.Empty(t, rows, "the stale write is dropped")
					require.Equal(t, 1, sink.count(fencing.EventStaleWriteRejected, id))
					require.Equal(t, "running", row.State)
					require.Equal(t, 2, row.Attempt)
					require.True(t, row.LeaseToken.Valid)
					require.NotEqual(t, before.LeaseToken, row.LeaseToken, "the new attempt keeps its own lease")
					require.Equal(t, []string{"available"}, attemptLog(ctx, t, pool, schema, id), "attempt 1 ended when it was taken away, and only then")
				}
			})
		}
	}
}

// TestClaimedCompletionRechecksItsRow: a claimed job's queued completion
// that waits for a concurrent writer of its job judges the row that writer
// committed, as the many-job statement does (TestStateWriteRechecksItsRow):
// after a new attempt took the job it is refused and its transaction's
// writes roll back; after a renewal it applies.
func TestClaimedCompletionRechecksItsRow(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		meanwhile []string // what the concurrent transaction does to the job
		applies   bool
	}{
		{"NewAttemptCommitsFirst", []string{
			"UPDATE %s SET state = 'available', lease_expires_at = NULL WHERE id = $1",
			"UPDATE %s SET state = 'running', attempt = attempt + 1, attempted_at = now() WHERE id = $1",
		}, false},
		{"RenewalCommitsFirst", []string{"UPDATE %s SET lease_expires_at = now() + interval '1 minute' WHERE id = $1"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := dbtest.Pool(ctx, t)
			schema := dbtest.TestSchema(ctx, t)
			table := pgx.Identifier{schema, "river_job"}.Sanitize()
			sideEffect := pgx.Identifier{schema, "recheck_side_effect"}.Sanitize()
			// Test schemas are reused: the table may be there, with rows.
			_, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+sideEffect+" (job_id bigint)")
			require.NoError(t, err)
			_, err = pool.Exec(ctx, "DELETE FROM "+sideEffect)
			require.NoError(t, err)
			sink := newEventSink()
			driver := newDriver(t, pool, sink, nil)
			c := queuedClaimer(ctx, t, pool, driver, &fencingclaim.Params{
				Args: []byte(`{}`), AttemptedBy: "recheck", Kind: "recheck", MaxAttempts: 5, Queue: "default", Schema: schema,
			})()
			before := getJob(ctx, t, pool, schema, c.ID)

			err = claimAPI(driver).WorkClaimed(ctx, c, time.Time{}, func(ctx context.Context, _ context.CancelCauseFunc) error {
				other, err := pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = other.Rollback(context.WithoutCancel(ctx)) }()
				var otherPID int
				require.NoError(t, other.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&otherPID))
				for _, sql := range tt.meanwhile {
					_, err := other.Exec(ctx, fmt.Sprintf(sql, table), c.ID)
					require.NoError(t, err)
				}

				// The completion waits for the row, then finds what other committed.
				done := make(chan error, 1)
				go func() {
					batch := &pgx.Batch{}
					batch.Queue("INSERT INTO "+sideEffect+" VALUES ($1)", c.ID)
					err := queueCompletion(ctx, driver, batch, c.ID, time.Now(), nil)
					if err == nil {
						err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, batch).Close() })
					}
					done <- err
				}()
				waitUntil(t, "the completion waits for the row", func() bool {
					var waiting bool
					require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
WHERE $1::int = ANY (pg_blocking_pids(pid)))`, otherPID).Scan(&waiting))
					return waiting
				})
				require.NoError(t, other.Commit(ctx))
				return recv(t, done)
			})

			row := getJob(ctx, t, pool, schema, c.ID)
			var sideEffects int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+sideEffect).Scan(&sideEffects))
			if tt.applies {
				require.NoError(t, err)
				require.Equal(t, "completed", row.State)
				require.Equal(t, before.LeaseToken, row.LeaseLastToken)
				require.Equal(t, []string{"completed"}, attemptLog(ctx, t, pool, schema, c.ID), "the attempt is logged once")
				require.Equal(t, 1, sideEffects)
				require.Zero(t, sink.count(fencing.EventStaleWriteRejected, c.ID))
				return
			}
			var lost *fencing.LeaseLostError
			require.ErrorAs(t, err, &lost)
			require.Equal(t, fencing.LeaseLostError{Attempt: 1, JobID: c.ID, Op: "set_state_completed"}, *lost)
			require.Equal(t, 1, sink.count(fencing.EventStaleWriteRejected, c.ID))
			require.Equal(t, "running", row.State)
			require.Equal(t, 2, row.Attempt)
			require.NotEqual(t, before.LeaseToken, row.LeaseToken, "the new attempt keeps its own lease")
			require.Zero(t, sideEffects, "the refused completion's transaction rolled back")
		})
	}
}

// TestFetchTokensAreFresh (F3): the inline fetch gives every job it moves to
// running a token of its own, also past the tokens the fetching process
// brings (MintedTokensMax; Postgres mints the rest), and tokens never repeat
// across fetches or attempts of the same job.
func TestFetchTokensAreFresh(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	n := fencing.MintedTokensMax + 40
	_, err := pool.Exec(ctx, `INSERT INTO `+table+` (args, kind, max_attempts, queue, state)
		SELECT '{}', 'tokens', 5, 'default', 'available' FROM generate_series(1, $1)`, 2*n)
	require.NoError(t, err)

	driver := newDriver(t, pool, nil, nil)
	pilot := driver.PluginPilot()
	seen := map[string]int64{}
	fetch := func(want int) {
		t.Helper()
		res, err := pilot.JobGetAvailable(ctx, driver.GetExecutor(), nil, &riverdriver.JobGetAvailableParams{
			ClientID: "tokens", MaxAttemptedBy: 100, MaxToLock: n, Queue: "default", Schema: schema,
		})
		require.NoError(t, err)
		require.Len(t, res.Jobs, want)
		ids := make([]int64, len(res.Jobs))
		for i, job := range res.Jobs {
			ids[i] = job.ID
		}
		rows, err := pool.Query(ctx, `SELECT id, lease_token::text FROM `+table+` WHERE id = ANY($1)`, ids)
		require.NoError(t, err)
		tokens, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			ID    int64
			Token *string
		}])
		require.NoError(t, err)
		require.Len(t, tokens, want)
		for _, row := range tokens {
			require.NotNil(t, row.Token, "job %d got a token", row.ID)
			other, dup := seen[*row.Token]
			require.False(t, dup, "job %d got job %d's token %s", row.ID, other, *row.Token)
			seen[*row.Token] = row.ID
			require.Equal(t, byte('4'), (*row.Token)[14], "a version 4 UUID: %s", *row.Token)
		}
	}
	fetch(n)
	fetch(n)

	// The same jobs again, as new attempts: new tokens.
	_, err = pool.Exec(ctx, `UPDATE `+table+` SET state = 'available', lease_expires_at = NULL WHERE state = 'running'`)
	require.NoError(t, err)
	fetch(n)
	require.Len(t, seen, 3*n)
}
