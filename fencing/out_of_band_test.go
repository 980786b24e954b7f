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

// TestJobFinalizedOutOfBand: a job finalized by someone else while its
// attempt runs keeps that state, and the attempt's own later write is stale:
// it changes nothing, is counted, and gives subscribers no event. River emits
// an event for it (its test
// Test_Client_JobCompletion/JobThatIsAlreadyDiscardedIsNotAlteredByCompleter);
// docs/upgrading-from-river.md lists the difference.
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
	_, err = pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "river_job"}.Sanitize()+`
SET state = 'discarded', finalized_at = now() WHERE id = $1`, inserted.Job.ID)
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
