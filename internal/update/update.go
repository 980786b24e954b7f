// Package update records the answers to workflow updates (weir_update) and
// notifies their callers: a task that accepts, rejects or completes an update,
// and anything that closes a run with updates still waiting, goes through it.
package update

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/history"
)

// Answer records that update updateID of run runID ended in state
// ("completed" or "rejected") with result or failure, unless it was answered
// already, and notifies its caller.
func Answer(ctx context.Context, tx pgx.Tx, names *dbschema.Names, runID uuid.UUID, updateID, state string, result []byte, failure *history.Failure) error {
	var failureJSON []byte
	if failure != nil {
		var err error
		if failureJSON, err = json.Marshal(failure); err != nil {
			return fmt.Errorf("encoding failure of update %s: %w", updateID, err)
		}
	}
	_, err := tx.Exec(ctx, "WITH done AS (UPDATE "+names.Update+
		" SET state = $3, result = $4, failure = $5, completed_at = now()"+
		" WHERE run_id = $1 AND update_id = $2 AND state = 'requested' RETURNING run_id, update_id)"+
		" SELECT count(pg_notify($6, done.run_id::text || '/' || done.update_id)) FROM done",
		runID, updateID, state, result, failureJSON, dbschema.Channel(names.Schema, dbschema.UpdateDoneChannel))
	if err != nil {
		return fmt.Errorf("answering update %s of run %s: %w", updateID, runID, err)
	}
	return nil
}

// AbandonPending rejects every update of run runID still waiting for an
// answer, because the run closed (reason says how), and notifies callers.
func AbandonPending(ctx context.Context, tx pgx.Tx, names *dbschema.Names, runID uuid.UUID, reason string) error {
	batch := &pgx.Batch{}
	if err := QueueAbandonPending(batch, names, runID, reason); err != nil {
		return err
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("abandoning updates of run %s: %w", runID, err)
	}
	return nil
}

// QueueAbandonPending queues AbandonPending's statement in batch, for a
// caller that sends its writes in one round trip.
func QueueAbandonPending(batch *pgx.Batch, names *dbschema.Names, runID uuid.UUID, reason string) error {
	failure, err := json.Marshal(&history.Failure{Message: reason, Type: "WorkflowClosed"})
	if err != nil {
		return err
	}
	batch.Queue(AbandonPendingSQL(names, false), runID, failure, dbschema.Channel(names.Schema, dbschema.UpdateDoneChannel))
	return nil
}

// AbandonPendingSQL is QueueAbandonPending's statement: $1 the run (with
// many, an array of runs: the same statement for each of them), $2 the
// failure, $3 the channel to notify.
func AbandonPendingSQL(names *dbschema.Names, many bool) string {
	runs := "run_id = $1"
	if many {
		runs = "run_id = ANY($1)"
	}
	return "WITH done AS (UPDATE " + names.Update +
		" SET state = 'rejected', failure = $2, completed_at = now()" +
		" WHERE " + runs + " AND state = 'requested' RETURNING run_id, update_id)" +
		" SELECT count(pg_notify($3, done.run_id::text || '/' || done.update_id)) FROM done"
}

// Key is the inbox dedup key of update updateID.
func Key(updateID string) string { return "update:" + updateID }
