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
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/fencingclaim"
)

// knownRepeatFixture is a fenced client whose block worker's attempts
// complete their jobs as weir's worker does: queued (Completion,
// QueueCompletions) in a transaction of their own.
type knownRepeatFixture struct {
	pool   *pgxpool.Pool
	schema string
	sink   *eventSink
	driver *fencing.Driver
	worker *blockWorker
	client *river.Client[pgx.Tx]
	events <-chan *river.Event
}

func newKnownRepeatFixture(t *testing.T, maxWorkers int) *knownRepeatFixture {
	t.Helper()
	ctx := t.Context()
	f := &knownRepeatFixture{pool: dbtest.Pool(ctx, t), schema: dbtest.TestSchema(ctx, t), sink: newEventSink(), worker: newBlockWorker(t)}
	f.driver = newDriver(t, f.pool, f.sink, nil)
	f.client = startClient(ctx, t, f.pool, f.schema, &clientOpts{driver: f.driver, maxWorkers: maxWorkers, worker: f.worker})
	events, cancel := f.client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	t.Cleanup(cancel)
	f.events = events
	return f
}

// completeQueued completes the attempt's job (ctx is its work context) in a
// transaction of its own, which commits if commit is set, else rolls back,
// and returns the completion.
func (f *knownRepeatFixture) completeQueued(ctx context.Context, jobID int64, commit bool) (fencingclaim.Completion, error) {
	claims := fencingclaim.For(f.driver)
	c, err := claims.Completion(ctx, jobID, time.Now(), nil)
	if err != nil {
		return c, err
	}
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		return c, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	batch := &pgx.Batch{}
	claims.QueueCompletions(batch, []fencingclaim.Completion{c})
	if err := tx.SendBatch(ctx, batch).Close(); err != nil || !commit {
		return c, err
	}
	return c, tx.Commit(ctx)
}

// attemptsLogged counts the attempts of job jobID recorded ended (attemptLog).
func (f *knownRepeatFixture) attemptsLogged(t *testing.T, jobID int64) int {
	t.Helper()
	return len(attemptLog(t.Context(), t, f.pool, f.schema, jobID))
}

// TestKnownRepeat: once told that an attempt's own completion committed
// (Committed), the driver answers River's completer's "completed" for that
// attempt without a statement, with the job as the completion left it, and
// River emits its event. Every write it was not told of that way goes to
// the database, and is judged there as before.
func TestKnownRepeat(t *testing.T) {
	t.Parallel()

	t.Run("Told", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		f := newKnownRepeatFixture(t, 1)
		inserted, err := f.client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		attempt := recv(t, f.worker.started)
		errs := make(chan error, 1)
		var repeatErr, repeatCommitErr error
		attempt.release <- func(ctx context.Context, job *river.Job[blockArgs]) error {
			c, err := f.completeQueued(ctx, job.ID, true)
			if err != nil {
				errs <- err
				return err
			}
			fencingclaim.For(f.driver).Committed([]fencingclaim.Completion{c})
			// The attempt completing its job again in a transaction of
			// its own is still refused (F2): only River's completer, outside
			// any transaction of the caller's, is answered from memory.
			tx, err := f.pool.Begin(ctx)
			if err == nil {
				_, repeatErr = fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
				repeatCommitErr = tx.Commit(ctx)
			}
			errs <- err
			return nil
		}
		require.NoError(t, recv(t, errs))
		require.ErrorIs(t, repeatErr, fencing.ErrAlreadyCompleted)
		require.ErrorIs(t, repeatCommitErr, pgx.ErrTxCommitRollback)
		event := recv(t, f.events)
		require.Equal(t, river.EventKindJobCompleted, event.Kind)
		require.Equal(t, int64(1), f.driver.KnownRepeats())

		var finalizedAt time.Time
		require.NoError(t, f.pool.QueryRow(ctx, "SELECT finalized_at FROM "+pgx.Identifier{f.schema, "river_job"}.Sanitize()+
			" WHERE id = $1", inserted.Job.ID).Scan(&finalizedAt))
		job := event.Job
		require.Equal(t, inserted.Job.ID, job.ID)
		require.Equal(t, rivertype.JobStateCompleted, job.State)
		require.NotNil(t, job.FinalizedAt)
		require.Equal(t, finalizedAt.UTC(), *job.FinalizedAt, "the job as the completion left it")
		require.Equal(t, 1, job.Attempt)
		require.Equal(t, *attempt.job.AttemptedAt, *job.AttemptedAt)
		require.Equal(t, attempt.job.EncodedArgs, job.EncodedArgs)
		require.NotSame(t, attempt.job.JobRow, job, "the attempt's row is not written")
		require.Equal(t, rivertype.JobStateRunning, attempt.job.State)

		row := getJob(ctx, t, f.pool, f.schema, inserted.Job.ID)
		require.Equal(t, "completed", row.State)
		require.NotContains(t, row.Metadata, "weir:fencing:proof")
		require.Equal(t, 1, f.attemptsLogged(t, inserted.Job.ID))
		require.Zero(t, f.driver.Stats().StaleWritesRejected)
		waitUntil(t, "the attempt leaves the lease keeper", func() bool { return f.driver.KeeperAttempts() == 0 })
	})

	// Each of these writes must go to the database: it is not the repeat
	// of a completion the driver knows committed.
	for _, tc := range []struct {
		name string
		// finish ends the attempt after its completion was queued: commit
		// says whether its transaction commits; tell, which driver is told
		// (nil: none) and with which completion.
		commit bool
		tell   func(f *knownRepeatFixture, other *fencing.Driver, c fencingclaim.Completion) (fencingclaim.Driver, fencingclaim.Completion)
		// workErr is what Work returns after.
		workErr error
		// state is the job's, once River's completer wrote.
		state string
	}{
		{name: "NotTold", commit: true, state: "completed"}, // an ambiguous COMMIT, say
		{name: "RolledBack", state: "completed"},            // the completer's write completes it
		{
			name: "OtherProcess", commit: true, state: "completed",
			tell: func(_ *knownRepeatFixture, other *fencing.Driver, c fencingclaim.Completion) (fencingclaim.Driver, fencingclaim.Completion) {
				return fencingclaim.For(other), c
			},
		},
		{
			name: "OtherToken", commit: true, state: "completed",
			tell: func(f *knownRepeatFixture, _ *fencing.Driver, c fencingclaim.Completion) (fencingclaim.Driver, fencingclaim.Completion) {
				c.Token = "00000000-0000-4000-8000-000000000000"
				return fencingclaim.For(f.driver), c
			},
		},
		{
			name: "OtherAttempt", commit: true, state: "completed",
			tell: func(f *knownRepeatFixture, _ *fencing.Driver, c fencingclaim.Completion) (fencingclaim.Driver, fencingclaim.Completion) {
				c.Attempt++
				return fencingclaim.For(f.driver), c
			},
		},
		{
			name: "OtherState", commit: true, workErr: errors.New("failed after completing"), state: "completed",
			tell: func(f *knownRepeatFixture, _ *fencing.Driver, c fencingclaim.Completion) (fencingclaim.Driver, fencingclaim.Completion) {
				return fencingclaim.For(f.driver), c
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			f := newKnownRepeatFixture(t, 1)
			other := newDriver(t, f.pool, nil, nil)
			inserted, err := f.client.Insert(ctx, blockArgs{}, nil)
			require.NoError(t, err)
			attempt := recv(t, f.worker.started)
			errs := make(chan error, 1)
			attempt.release <- func(ctx context.Context, job *river.Job[blockArgs]) error {
				c, err := f.completeQueued(ctx, job.ID, tc.commit)
				if err == nil && tc.tell != nil {
					claims, told := tc.tell(f, other, c)
					claims.Committed([]fencingclaim.Completion{told})
				}
				errs <- err
				if err != nil {
					return err
				}
				return tc.workErr
			}
			require.NoError(t, recv(t, errs))
			event := recv(t, f.events)
			require.Equal(t, river.EventKindJobCompleted, event.Kind)
			require.Equal(t, inserted.Job.ID, event.Job.ID)
			require.Zero(t, f.driver.KnownRepeats(), "the write went to the database")
			require.Zero(t, other.KnownRepeats())
			row := getJob(ctx, t, f.pool, f.schema, inserted.Job.ID)
			require.Equal(t, tc.state, row.State)
			require.Zero(t, row.Errors)
			require.Equal(t, 1, f.attemptsLogged(t, inserted.Job.ID))
			require.Zero(t, f.driver.Stats().StaleWritesRejected)
		})
	}

	// In one batch with a write it must take to the database, a known
	// repeat is answered from memory and the other write is judged and
	// applied as ever.
	t.Run("Mixed", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		f := newKnownRepeatFixture(t, 2)
		var (
			ids    []int64
			proofs [][]byte
			done   = make(chan error, 2)
		)
		for i := range 2 {
			_, err := f.client.Insert(ctx, blockArgs{Tag: strconv.Itoa(i)}, nil)
			require.NoError(t, err)
			attempt := recv(t, f.worker.started)
			lease, ok := fencing.LeaseFromContext(attempt.ctx)
			require.True(t, ok)
			ids = append(ids, attempt.job.ID)
			proofs = append(proofs, []byte(`{"weir:fencing:proof": "`+lease.Token+`/`+strconv.Itoa(lease.Attempt)+`/`+
				strconv.FormatInt(lease.AttemptedAt.UnixMicro(), 10)+`"}`))
			if i == 0 { // completed and told; the other still runs
				attempt.release <- func(ctx context.Context, job *river.Job[blockArgs]) error {
					c, err := f.completeQueued(ctx, job.ID, true)
					if err == nil {
						fencingclaim.For(f.driver).Committed([]fencingclaim.Completion{c})
					}
					done <- err
					<-f.worker.done
					return err
				}
				require.NoError(t, recv(t, done))
			} else {
				t.Cleanup(func() { attempt.release <- complete })
			}
		}
		now := time.Now()
		rows, err := f.driver.PluginPilot().JobSetStateIfRunningMany(ctx, f.driver.GetExecutor(), &riverdriver.JobSetStateIfRunningManyParams{
			ID: ids, Attempt: make([]*int, 2), ErrData: make([][]byte, 2), FinalizedAt: []*time.Time{&now, &now},
			MetadataDoMerge: []bool{true, true}, MetadataUpdates: proofs, ScheduledAt: make([]*time.Time, 2),
			Schema: f.schema, State: []rivertype.JobState{rivertype.JobStateCompleted, rivertype.JobStateCompleted},
		})
		require.NoError(t, err)
		require.Equal(t, int64(1), f.driver.KnownRepeats())
		require.Len(t, rows, 2)
		for _, row := range rows {
			require.Contains(t, ids, row.ID)
			require.Equal(t, rivertype.JobStateCompleted, row.State)
		}
		second := getJob(ctx, t, f.pool, f.schema, ids[1])
		require.Equal(t, "completed", second.State, "the other write applied")
		require.NotContains(t, second.Metadata, "weir:fencing:proof")
		require.Zero(t, f.driver.Stats().StaleWritesRejected)
	})

	// A new attempt holds the job by the time the completed attempt's
	// write comes (the job was retried meanwhile): the write is stale, and
	// the database says so.
	t.Run("NewAttempt", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		f := newKnownRepeatFixture(t, 2)
		inserted, err := f.client.Insert(ctx, blockArgs{}, nil)
		require.NoError(t, err)
		first := recv(t, f.worker.started)
		errs := make(chan error, 1)
		var second *startedAttempt
		first.release <- func(ctx context.Context, job *river.Job[blockArgs]) error {
			c, err := f.completeQueued(ctx, job.ID, true)
			if err != nil {
				errs <- err
				return err
			}
			fencingclaim.For(f.driver).Committed([]fencingclaim.Completion{c})
			// Retried, as River's JobRetry does, and fetched again.
			if _, err = f.pool.Exec(ctx, "UPDATE "+pgx.Identifier{f.schema, "river_job"}.Sanitize()+
				" SET state = 'available', finalized_at = NULL, scheduled_at = now() WHERE id = $1", job.ID); err == nil {
				second = recv(t, f.worker.started)
			}
			errs <- err
			return err
		}
		require.NoError(t, recv(t, errs))
		f.sink.waitFor(t, fencing.EventStaleWriteRejected, inserted.Job.ID, 1)
		require.Zero(t, f.driver.KnownRepeats())
		row := getJob(ctx, t, f.pool, f.schema, inserted.Job.ID)
		require.Equal(t, "running", row.State, "the new attempt holds the job")
		require.Equal(t, 2, row.Attempt)
		second.release <- complete
		waitForState(ctx, t, f.pool, f.schema, inserted.Job.ID, "completed")
	})
}
