package fencing_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivershared/testfactory"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// sideEffects returns a function that records a side effect of job in tx,
// and one that counts the committed side effects, in a table of schema's.
func sideEffects(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) (write func(ctx context.Context, tx pgx.Tx, jobID int64) error, count func() int) {
	t.Helper()
	table := pgx.Identifier{schema, "repeat_side_effect"}.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+" (job_id bigint)")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "DELETE FROM "+table)
	require.NoError(t, err)
	write = func(ctx context.Context, tx pgx.Tx, jobID int64) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" (job_id) VALUES ($1)", jobID)
		return err
	}
	count = func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
	return write, count
}

// TestRepeatAfterCompletion (F2): after the attempt completed its job, the
// same attempt completing it again in a transaction of its own (a retry
// after an ambiguous COMMIT that did commit) is told so with a typed error,
// not ErrLeaseLost, and that transaction aborts: the attempt's work commits
// once. Asking, in its own transaction, for another outcome is a typed
// conflict and aborts too.
func TestRepeatAfterCompletion(t *testing.T) {
	t.Parallel()

	for _, name := range []string{"CompleteTx", "JobCompleteTx"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := dbtest.Pool(ctx, t)
			schema := dbtest.TestSchema(ctx, t)
			write, count := sideEffects(ctx, t, pool, schema)
			sink := newEventSink()
			driver := newDriver(t, pool, sink, nil)
			worker := newBlockWorker(t)
			client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, worker: worker})
			completedEvents, cancel := client.Subscribe(river.EventKindJobCompleted)
			t.Cleanup(cancel)
			inserted, err := client.Insert(ctx, blockArgs{}, nil)
			require.NoError(t, err)
			attempt := recv(t, worker.started)

			completeInTx := func(ctx context.Context, job *river.Job[blockArgs]) (completeErr, commitErr error) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err, nil
				}
				defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
				if err := write(ctx, tx, job.ID); err != nil {
					return err, nil
				}
				if name == "CompleteTx" {
					_, completeErr = fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
				} else {
					_, completeErr = river.JobCompleteTx[*fencing.Driver](ctx, tx, job)
				}
				return completeErr, tx.Commit(ctx)
			}
			type outcome struct{ completeErr, commitErr, conflictErr, conflictCommitErr error }
			results := make(chan [2]outcome, 1)
			attempt.release <- func(ctx context.Context, job *river.Job[blockArgs]) error {
				var res [2]outcome
				res[0].completeErr, res[0].commitErr = completeInTx(ctx, job)
				res[1].completeErr, res[1].commitErr = completeInTx(ctx, job) // the retry

				// Another outcome, asked by the attempt in its own
				// transaction, through the Pilot as River writes it.
				lease, _ := fencing.LeaseFromContext(ctx)
				proof := `{"weir:fencing:proof": "` + lease.Token + `/` + strconv.Itoa(lease.Attempt) + `/` +
					strconv.FormatInt(lease.AttemptedAt.UnixMicro(), 10) + `"}`
				params := riverdriver.JobSetStateErrorRetryable(job.ID, time.Now(), []byte(`{"error": "late"}`), []byte(proof))
				tx, err := pool.Begin(ctx)
				if err == nil {
					_, res[1].conflictErr = driver.PluginPilot().JobSetStateIfRunningMany(ctx, driver.UnwrapExecutor(tx), &riverdriver.JobSetStateIfRunningManyParams{
						ID: []int64{job.ID}, Attempt: []*int{params.Attempt}, ErrData: [][]byte{params.ErrData}, FinalizedAt: []*time.Time{params.FinalizedAt},
						MetadataDoMerge: []bool{true}, MetadataUpdates: [][]byte{params.MetadataUpdates}, ScheduledAt: []*time.Time{params.ScheduledAt},
						Schema: schema, State: []rivertype.JobState{params.State},
					})
					res[1].conflictCommitErr = tx.Commit(ctx)
				}
				results <- res
				return nil
			}
			res := recv(t, results)
			require.NoError(t, res[0].completeErr)
			require.NoError(t, res[0].commitErr)

			repeat := res[1].completeErr
			require.ErrorIs(t, repeat, fencing.ErrAlreadyCompleted)
			require.NotErrorIs(t, repeat, fencing.ErrLeaseLost, "no lease was lost: the attempt finished the job")
			var already *fencing.AlreadyCompletedError
			require.ErrorAs(t, repeat, &already)
			require.Equal(t, inserted.Job.ID, already.JobID)
			require.Equal(t, 1, already.Attempt)
			require.ErrorIs(t, res[1].commitErr, pgx.ErrTxCommitRollback, "the repeat's transaction is aborted")
			require.Equal(t, 1, count(), "the attempt's work committed once")

			conflict := res[1].conflictErr
			require.ErrorIs(t, conflict, fencing.ErrOutcomeConflict)
			require.ErrorIs(t, conflict, fencing.ErrAlreadyCompleted)
			require.NotErrorIs(t, conflict, fencing.ErrLeaseLost)
			var other *fencing.OutcomeConflictError
			require.ErrorAs(t, conflict, &other)
			require.Equal(t, "retryable", other.Requested)
			require.ErrorIs(t, res[1].conflictCommitErr, pgx.ErrTxCommitRollback)

			// River's completer then writes "completed" again: a harmless
			// repeat, with the completion's event.
			event := recv(t, completedEvents)
			require.Equal(t, inserted.Job.ID, event.Job.ID)
			row := waitForState(ctx, t, pool, schema, inserted.Job.ID, "completed")
			require.Zero(t, row.Errors)
			require.Zero(t, sink.count(fencing.EventStaleWriteRejected, 0))
		})
	}
}

// TestCompletedThenError: a worker that completes its job in a transaction
// (river.JobCompleteTx), commits, then returns an error keeps the completion,
// as with River's own driver: River's completer's later "retryable" write
// for the attempt is a harmless repeat, subscribers get the "job completed"
// event, and no stale write is counted. River's
// Test_Client_JobCompletion/JobThatIsCompletedManuallyBeforeReturningErrIsNotTouchedByCompleter.
func TestCompletedThenError(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	sink := newEventSink()
	driver := newDriver(t, pool, sink, nil)
	worker := newBlockWorker(t)
	client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, worker: worker})
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	t.Cleanup(cancel)
	inserted, err := client.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	attempt := recv(t, worker.started)
	attempt.release <- func(ctx context.Context, job *river.Job[blockArgs]) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := river.JobCompleteTx[*fencing.Driver](ctx, tx, job); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		return errors.New("error after completion")
	}
	event := recv(t, events)
	require.Equal(t, river.EventKindJobCompleted, event.Kind)
	require.Equal(t, inserted.Job.ID, event.Job.ID)
	require.Equal(t, rivertype.JobStateCompleted, event.Job.State)
	row := getJob(ctx, t, pool, schema, inserted.Job.ID)
	require.Equal(t, "completed", row.State)
	require.Zero(t, row.Errors, "the late error is not recorded")
	require.Zero(t, driver.Stats().StaleWritesRejected)
	require.Zero(t, sink.count(fencing.EventStaleWriteRejected, 0))
}

type completeTxThenErrorWorker struct {
	river.WorkerDefaults[completeTxArgs]
	tx pgx.Tx
}

func (w *completeTxThenErrorWorker) Work(ctx context.Context, job *river.Job[completeTxArgs]) error {
	if _, err := river.JobCompleteTx[*fencing.Driver](ctx, w.tx, job); err != nil {
		return err
	}
	return errors.New("error after completion")
}

// TestRivertestWorkerCompleteTxThenError: rivertest's
// TestWorker_WorkJob/JobCompleteTxWithInsertedJobRowThenError on the fencing
// driver. River's completer writes in the caller's transaction there; its
// later write for the attempt keeps the completion and does not abort the
// user's transaction.
func TestRivertestWorkerCompleteTxThenError(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	driver := newDriver(t, dbtest.Pool(ctx, t), nil, nil)
	tx := dbtest.TestTx(ctx, t)
	worker := rivertest.NewWorker(t, driver, &river.Config{Plugins: []rivertype.Plugin{driver.Plugin()}}, &completeTxThenErrorWorker{tx: tx})
	res, err := worker.Work(ctx, t, tx, completeTxArgs{}, nil)
	require.EqualError(t, err, "error after completion")
	require.Equal(t, river.EventKindJobCompleted, res.EventKind)
	require.Equal(t, rivertype.JobStateCompleted, res.Job.State)
	_, err = tx.Exec(ctx, "SELECT 1")
	require.NoError(t, err, "the user's transaction is not aborted")
}

// TestRivertestRequireInsertedTx: rivertest's Require*InsertedTx take the
// driver as a type parameter and call its Unwrap* methods on the zero value,
// a nil *fencing.Driver, as they do on riverpgxv5's.
func TestRivertestRequireInsertedTx(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	driver := newDriver(t, dbtest.Pool(ctx, t), nil, nil)
	client, err := river.NewClient[pgx.Tx](driver, &river.Config{Plugins: []rivertype.Plugin{driver.Plugin()}})
	require.NoError(t, err)
	tx := dbtest.TestTx(ctx, t)
	_, err = client.InsertTx(ctx, tx, noopArgs{}, nil)
	require.NoError(t, err)

	job := rivertest.RequireInsertedTx[*fencing.Driver](ctx, t, tx, noopArgs{}, nil)
	require.Equal(t, noopArgs{}.Kind(), job.Kind)
	rivertest.RequireNotInsertedTx[*fencing.Driver](ctx, t, tx, blockArgs{}, nil)
	jobs := rivertest.RequireManyInsertedTx[*fencing.Driver](ctx, t, tx, []rivertest.ExpectedJob{{Args: noopArgs{}}})
	require.Len(t, jobs, 1)

	var zero *fencing.Driver
	require.Same(t, tx, zero.UnwrapTx(zero.UnwrapExecutor(tx)))
	require.Same(t, tx, zero.UnwrapTx(driver.UnwrapExecutor(tx)))
}

// TestWorkContextCompleteTx: river.JobCompleteTx and CompleteTx under
// rivertest.WorkContext (River's way to test Work directly: no attempt, no
// lease) complete a running job that no fenced attempt leases, as River
// does, and refuse a leased one saying that the write proves no attempt.
func TestWorkContextCompleteTx(t *testing.T) {
	t.Parallel()

	setup := func(ctx context.Context, t *testing.T, leased bool) (context.Context, pgx.Tx, *river.Job[noopArgs]) {
		t.Helper()
		driver := newDriver(t, dbtest.Pool(ctx, t), nil, nil)
		client, err := river.NewClient[pgx.Tx](driver, &river.Config{Plugins: []rivertype.Plugin{driver.Plugin()}})
		require.NoError(t, err)
		tx := dbtest.TestTx(ctx, t)
		row := testfactory.Job(ctx, t, driver.UnwrapExecutor(tx), &testfactory.JobOpts{
			Kind: new(noopArgs{}.Kind()), State: new(rivertype.JobStateRunning),
		})
		if leased {
			_, err := tx.Exec(ctx, "UPDATE river_job SET lease_expires_at = now() + interval '1 hour' WHERE id = $1", row.ID)
			require.NoError(t, err)
		}
		return rivertest.WorkContext(ctx, client), tx, &river.Job[noopArgs]{JobRow: row}
	}

	for _, name := range []string{"CompleteTx", "JobCompleteTx"} {
		complete := func(ctx context.Context, tx pgx.Tx, job *river.Job[noopArgs]) (*river.Job[noopArgs], error) {
			if name == "CompleteTx" {
				return fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
			}
			return river.JobCompleteTx[*fencing.Driver](ctx, tx, job)
		}

		t.Run(name+"/Unleased", func(t *testing.T) {
			t.Parallel()
			ctx, tx, job := setup(t.Context(), t, false)
			completed, err := complete(ctx, tx, job)
			require.NoError(t, err)
			require.Equal(t, rivertype.JobStateCompleted, completed.State)
			var state string
			require.NoError(t, tx.QueryRow(ctx, "SELECT state::text FROM river_job WHERE id = $1", job.ID).Scan(&state))
			require.Equal(t, "completed", state)
		})

		t.Run(name+"/Leased", func(t *testing.T) {
			t.Parallel()
			ctx, tx, job := setup(t.Context(), t, true)
			_, err := complete(ctx, tx, job)
			require.ErrorIs(t, err, fencing.ErrNoLease)
			require.NotErrorIs(t, err, fencing.ErrLeaseLost, "no newer attempt is blamed")
			var noLease *fencing.NoLeaseError
			require.ErrorAs(t, err, &noLease)
			require.Equal(t, job.ID, noLease.JobID)
			require.NotContains(t, err.Error(), "newer attempt")
			_, err = tx.Exec(ctx, "SELECT 1")
			require.Error(t, err, "the caller's transaction is aborted")
		})
	}
}

// TestCompleteTxRepeatOnRiversDriver: CompleteTx on River's own driver (a
// plain client, whose pilot completes any running row and returns a
// completed one as it is) tells a repeat by the attempt that completed the
// job apart too, and aborts its transaction.
func TestCompleteTxRepeatOnRiversDriver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	write, count := sideEffects(ctx, t, pool, schema)
	worker := newBlockWorker(t)
	client := startClient(ctx, t, pool, schema, &clientOpts{worker: worker}) // plain riverpgxv5
	_, err := client.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	attempt := recv(t, worker.started)
	type outcome struct{ completeErr, commitErr error }
	results := make(chan [2]outcome, 1)
	attempt.release <- func(ctx context.Context, job *river.Job[blockArgs]) error {
		var res [2]outcome
		for i := range res {
			tx, err := pool.Begin(ctx)
			if err != nil {
				res[i].completeErr = err
				continue
			}
			if err := write(ctx, tx, job.ID); err != nil {
				res[i].completeErr = err
			} else {
				_, res[i].completeErr = fencing.CompleteTx[*riverpgxv5.Driver](ctx, tx, job)
				res[i].commitErr = tx.Commit(ctx)
			}
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
		results <- res
		return nil
	}
	res := recv(t, results)
	require.NoError(t, res[0].completeErr)
	require.NoError(t, res[0].commitErr)
	require.ErrorIs(t, res[1].completeErr, fencing.ErrAlreadyCompleted)
	require.ErrorIs(t, res[1].commitErr, pgx.ErrTxCommitRollback)
	require.Equal(t, 1, count(), "the attempt's work committed once")
}
