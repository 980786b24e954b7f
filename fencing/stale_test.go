package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestStaleAttemptCannotFinalize (F1, F2): attempt 1 of a job runs on client
// A; the job is rescued and fetched again by client B (attempt 2). While
// attempt 2 still runs, attempt 1 finishes with every possible outcome. Its
// write must change nothing, and attempt 2 must then finish normally.
func TestStaleAttemptCannotFinalize(t *testing.T) {
	t.Parallel()

	type testCase struct {
		// interrupt stops client A (StopAndCancel) so that attempt 1 ends as
		// River's "interrupted" outcome.
		interrupt   bool
		maxAttempts int
		// out is attempt 1's outcome; it may report errors it saw on errs.
		out func(errs chan<- error, schema string) outcome
		// sideEffects means out writes a side-effect row that must not commit.
		sideEffects bool
	}

	sideEffectInTx := func(ctx context.Context, tx pgx.Tx, schema string, job *river.Job[blockArgs]) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "side_effect"}.Sanitize()+" (job_id, attempt) VALUES ($1, $2)",
			job.ID, job.Attempt)
		return err
	}

	cases := map[string]testCase{
		"Cancel": {out: func(chan<- error, string) outcome {
			return func(ctx context.Context, job *river.Job[blockArgs]) error {
				return river.JobCancel(errors.New("stale cancel"))
			}
		}},
		"CompleteTx": {sideEffects: true, out: func(errs chan<- error, schema string) outcome {
			return func(ctx context.Context, job *river.Job[blockArgs]) error {
				ctx = context.WithoutCancel(ctx) // a stale worker that ignores its cancelled context
				client := river.ClientFromContext[pgx.Tx](ctx)
				tx, err := client.Driver().GetExecutor().Begin(ctx)
				if err != nil {
					errs <- err
					return nil
				}
				pgxTx := client.Driver().UnwrapTx(tx)
				if err := sideEffectInTx(ctx, pgxTx, schema, job); err != nil {
					errs <- err
					return nil
				}
				_, completeErr := fencing.CompleteTx[*fencing.Driver](ctx, pgxTx, job)
				errs <- completeErr
				errs <- pgxTx.Commit(ctx) // the caller ignores the error and commits anyway
				return nil
			}
		}},
		"Complete": {out: func(chan<- error, string) outcome {
			return func(ctx context.Context, job *river.Job[blockArgs]) error {
				require.NoError(t, river.MetadataSet(ctx, "stale_key", "stale"))
				return nil
			}
		}},
		"Discard": {maxAttempts: 1, out: func(chan<- error, string) outcome {
			return func(ctx context.Context, job *river.Job[blockArgs]) error { return errors.New("stale failure") }
		}},
		"ErrorRetry": {out: func(chan<- error, string) outcome {
			return func(ctx context.Context, job *river.Job[blockArgs]) error { return errors.New("stale failure") }
		}},
		"Interrupt": {interrupt: true, out: func(chan<- error, string) outcome {
			return func(ctx context.Context, job *river.Job[blockArgs]) error { return ctx.Err() }
		}},
		"JobCompleteTx": {sideEffects: true, out: func(errs chan<- error, schema string) outcome {
			return func(ctx context.Context, job *river.Job[blockArgs]) error {
				ctx = context.WithoutCancel(ctx) // a stale worker that ignores its cancelled context
				pool := dbtest.Pool(ctx, t)
				tx, err := pool.Begin(ctx)
				if err != nil {
					errs <- err
					return nil
				}
				if err := sideEffectInTx(ctx, tx, schema, job); err != nil {
					errs <- err
					return nil
				}
				// River's own function, unchanged, on the fencing driver.
				_, completeErr := river.JobCompleteTx[*fencing.Driver](ctx, tx, job)
				errs <- completeErr
				errs <- tx.Commit(ctx) // the caller ignores the error and commits anyway
				return nil
			}
		}},
		"Snooze": {out: func(chan<- error, string) outcome {
			return func(ctx context.Context, job *river.Job[blockArgs]) error { return river.JobSnooze(time.Hour) }
		}},
	}

	for _, name := range []string{"Cancel", "Complete", "CompleteTx", "Discard", "ErrorRetry", "Interrupt", "JobCompleteTx", "Snooze"} {
		tc := cases[name]
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

			sinkA := newEventSink()
			worker := newBlockWorker(t)
			driverA := newDriver(t, pool, sinkA, nil)
			clientA := startClient(ctx, t, pool, schema, &clientOpts{driver: driverA, worker: worker})

			inserted, err := clientA.Insert(ctx, blockArgs{}, &river.InsertOpts{MaxAttempts: tc.maxAttempts})
			require.NoError(t, err)
			jobID := inserted.Job.ID
			attempt1 := recv(t, worker.started)
			require.Equal(t, 1, attempt1.job.Attempt)

			if tc.interrupt {
				// So that attempt 1's context is cancelled by the stop, not
				// by its lost lease.
				driverA.StopHeartbeats()
			}
			rescue(ctx, t, pool, schema, jobID)
			startClient(ctx, t, pool, schema, &clientOpts{driver: newDriver(t, pool, nil, nil), worker: worker})
			attempt2 := recv(t, worker.started)
			require.Equal(t, 2, attempt2.job.Attempt)
			lease2, ok := fencing.LeaseFromContext(attempt2.ctx)
			require.True(t, ok)
			before := getJob(ctx, t, pool, schema, jobID)
			require.Equal(t, "running", before.State)
			require.Equal(t, lease2.Token, before.LeaseToken.String)

			if tc.interrupt {
				stopped := make(chan error, 1)
				go func() { stopped <- clientA.StopAndCancel(context.WithoutCancel(ctx)) }()
				t.Cleanup(func() { require.NoError(t, recv(t, stopped)) })
				<-attempt1.ctx.Done()
			}

			// The stale write lands while attempt 2 is running.
			errs := make(chan error, 2)
			attempt1.release <- tc.out(errs, schema)
			if tc.sideEffects {
				require.ErrorIs(t, recv(t, errs), fencing.ErrLeaseLost)
				require.ErrorIs(t, recv(t, errs), pgx.ErrTxCommitRollback, "commit after a lost lease must fail")
			}
			sinkA.waitFor(t, fencing.EventStaleWriteRejected, jobID, 1)

			after := getJob(ctx, t, pool, schema, jobID)
			require.Equal(t, "running", after.State)
			require.Equal(t, 2, after.Attempt)
			require.Equal(t, before.LeaseToken, after.LeaseToken)
			require.Equal(t, before.Errors, after.Errors)
			require.Equal(t, before.Metadata, after.Metadata)
			require.NotContains(t, after.Metadata, "stale_key")

			var sideEffects int
			require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+sideEffectTable).Scan(&sideEffects))
			require.Zero(t, sideEffects, "the stale attempt's side effects must roll back")

			// Attempt 2 still owns the job and finishes it.
			attempt2.release <- complete
			final := waitForState(ctx, t, pool, schema, jobID, "completed")
			require.Equal(t, 2, final.Attempt)
			require.Equal(t, before.Errors, final.Errors)
			require.False(t, final.LeaseToken.Valid, "leaving running revokes the token")
			require.Equal(t, lease2.Token, final.LeaseLastToken.String)
		})
	}
}

// TestStaleAndCurrentWriteInOneBatch (F1, F6): River's async completer
// writes the outcomes of many attempts in one JobSetStateIfRunningMany call.
// In a batch that holds a stale attempt's completion (its job was taken by a
// new attempt meanwhile) next to the current attempt's completion of another
// job, the current one is applied, the stale one changes nothing and is
// counted, on both of the Pilot's paths (judged: River's statement after a
// check; else one statement).
func TestStaleAndCurrentWriteInOneBatch(t *testing.T) {
	t.Parallel()
	for _, judged := range []bool{false, true} {
		t.Run(fmt.Sprintf("judged=%v", judged), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := dbtest.Pool(ctx, t)
			schema := fencedOnlySchema(ctx, t, pool)
			table := pgx.Identifier{schema, "river_job"}.Sanitize()
			var ids []int64
			require.NoError(t, pool.QueryRow(ctx, `WITH inserted AS (
    INSERT INTO `+table+` (args, kind, max_attempts, queue, state)
    SELECT '{}', 'mixed_batch', 5, 'default', 'available' FROM generate_series(1, 2)
    RETURNING id
) SELECT array_agg(id ORDER BY id) FROM inserted`).Scan(&ids))
			staleID, currentID := ids[0], ids[1]

			sink := newEventSink()
			driver := newDriver(t, pool, sink, nil)
			pilot := driver.PluginPilot()
			fetched, err := pilot.JobGetAvailable(ctx, driver.GetExecutor(), nil, &riverdriver.JobGetAvailableParams{
				ClientID: "mixed-batch", MaxAttemptedBy: 100, MaxToLock: 2, Queue: "default", Schema: schema,
			})
			require.NoError(t, err)
			require.Len(t, fetched.Jobs, 2)
			// Each attempt's completion, with its proof as the plugin attaches
			// it and a metadata update of its own.
			updates := map[int64][]byte{}
			for _, job := range fetched.Jobs {
				row := getJob(ctx, t, pool, schema, job.ID)
				require.True(t, row.LeaseToken.Valid)
				require.True(t, row.LeaseExpiresAt.Valid)
				updates[job.ID] = fmt.Appendf(nil, `{"weir:fencing:proof": "%s/%d/%d", "written_by": %d}`,
					row.LeaseToken.String, job.Attempt, job.AttemptedAt.UnixMicro(), job.ID)
			}

			// The first job is taken away from attempt 1 and started again.
			for _, sql := range []string{
				"UPDATE %s SET state = 'available', lease_expires_at = NULL WHERE id = $1",
				"UPDATE %s SET state = 'running', attempt = attempt + 1, attempted_at = now() WHERE id = $1",
			} {
				_, err := pool.Exec(ctx, fmt.Sprintf(sql, table), staleID)
				require.NoError(t, err)
			}
			snapshot := func(id int64) string {
				var s string
				require.NoError(t, pool.QueryRow(ctx, "SELECT to_jsonb(j)::text FROM "+table+" j WHERE id = $1", id).Scan(&s))
				return s
			}
			staleBefore := snapshot(staleID)
			staleLogBefore := attemptLog(ctx, t, pool, schema, staleID)
			currentBefore := getJob(ctx, t, pool, schema, currentID)

			now := time.Now()
			rows, err := pilot.JobSetStateIfRunningMany(ctx, writeExecutor(driver, pool, judged), &riverdriver.JobSetStateIfRunningManyParams{
				ID:              []int64{staleID, currentID},
				Attempt:         []*int{nil, nil},
				ErrData:         [][]byte{nil, nil},
				FinalizedAt:     []*time.Time{&now, &now},
				MetadataDoMerge: []bool{true, true},
				MetadataUpdates: [][]byte{updates[staleID], updates[currentID]},
				ScheduledAt:     []*time.Time{nil, nil},
				Schema:          schema,
				State:           []rivertype.JobState{rivertype.JobStateCompleted, rivertype.JobStateCompleted},
			})
			require.NoError(t, err, "a stale write does not fail the batch")

			// The current attempt's write is applied and returned...
			require.Len(t, rows, 1, "only the current write returns a row (River emits no event for the stale one)")
			require.Equal(t, currentID, rows[0].ID)
			require.Equal(t, rivertype.JobStateCompleted, rows[0].State)
			current := getJob(ctx, t, pool, schema, currentID)
			require.Equal(t, "completed", current.State)
			require.Equal(t, float64(currentID), current.Metadata["written_by"])
			require.NotContains(t, current.Metadata, "weir:fencing:proof")
			require.False(t, current.LeaseToken.Valid)
			require.Equal(t, currentBefore.LeaseToken, current.LeaseLastToken)
			require.Equal(t, []string{"completed"}, attemptLog(ctx, t, pool, schema, currentID))

			// ...the stale one leaves its row exactly as it was...
			require.Equal(t, staleBefore, snapshot(staleID), "the stale write changed nothing")
			stale := getJob(ctx, t, pool, schema, staleID)
			require.Equal(t, "running", stale.State)
			require.Equal(t, 2, stale.Attempt)
			require.NotContains(t, stale.Metadata, "written_by")
			require.Equal(t, staleLogBefore, attemptLog(ctx, t, pool, schema, staleID))

			// ...and is counted, once, as the only stale write.
			require.Equal(t, 1, sink.count(fencing.EventStaleWriteRejected, staleID))
			require.Zero(t, sink.count(fencing.EventStaleWriteRejected, currentID))
			require.Equal(t, int64(1), driver.Stats().StaleWritesRejected)
		})
	}
}
