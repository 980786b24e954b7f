package fencing_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestJobFinalizedOutOfBand: while an attempt holds a live lease, a statement
// that moves its job out of running without ending the lease changes nothing
// (the lease trigger; River finalizes the job, its tests
// Test_Client_JobCompletion/JobThatIsAlready{Completed,Discarded}IsNotAlteredByCompleter).
// An operator who finalizes it deliberately, ending the lease in the same
// statement, wins: the job keeps that state, and the attempt's own later write
// is stale: it changes nothing, is counted, and gives subscribers no event.
// docs/upgrading-from-river.md lists both differences.
func TestJobFinalizedOutOfBand(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	sink := newEventSink()
	driver := newDriver(t, pool, sink, nil)
	worker := newBlockWorker(t)
	client := startClient(ctx, t, pool, schema, &clientOpts{driver: driver, worker: worker})
	events, cancelEvents := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	t.Cleanup(cancelEvents)

	inserted, err := client.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	attempt := recv(t, worker.started)
	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	tag, err := pool.Exec(ctx, `UPDATE `+table+`
SET state = 'discarded', finalized_at = now() WHERE id = $1`, inserted.Job.ID)
	require.NoError(t, err)
	require.Zero(t, tag.RowsAffected(), "a move out of running without the lease changed the row")
	require.Equal(t, "running", getJob(ctx, t, pool, schema, inserted.Job.ID).State)

	_, err = pool.Exec(ctx, `UPDATE `+table+`
SET state = 'discarded', finalized_at = now(), lease_expires_at = now() WHERE id = $1`, inserted.Job.ID)
	require.NoError(t, err)

	attempt.release <- func(context.Context, *river.Job[blockArgs]) error { return errors.New("oops") }
	sink.waitFor(t, fencing.EventStaleWriteRejected, inserted.Job.ID, 1)
	// Stopping the client flushes its completer: every event it would send
	// has been sent.
	stopClient(ctx, t, client)

	require.Equal(t, "discarded", getJob(ctx, t, pool, schema, inserted.Job.ID).State)
	require.Equal(t, int64(1), driver.Stats().StaleWritesRejected)
	for {
		select {
		case event, open := <-events:
			if !open {
				return // Stop closed the subscription with nothing in it
			}
			require.Failf(t, "a stale write gave an event", "%s for job %d", event.Kind, event.Job.ID)
		default:
			return
		}
	}
}
