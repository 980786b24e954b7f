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
	"github.com/weirhq/weir/internal/store"
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
	err := store.For(names).AnswerUpdate(ctx, tx, store.AnswerUpdateParams{
		UpdateKey: store.UpdateKey{RunID: runID, UpdateID: updateID}, State: state, Result: result, Failure: failureJSON,
	})
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

// QueueAbandonPending queues, in batch, the rejection of every update of run
// runID still waiting for an answer, because the run closed (reason says
// how), and their callers' notification.
func QueueAbandonPending(batch *pgx.Batch, names *dbschema.Names, runID uuid.UUID, reason string) error {
	failure, err := json.Marshal(&history.Failure{Message: reason, Type: "WorkflowClosed"})
	if err != nil {
		return err
	}
	store.For(names).QueueAbandonUpdates(batch, runID, failure)
	return nil
}

// AbandonPendingSQL is QueueAbandonPending's statement: $1 the run (with
// many, an array of runs: the same statement for each of them), $2 the
// failure, $3 the channel to notify.
func AbandonPendingSQL(names *dbschema.Names, many bool) string {
	return store.For(names).AbandonUpdatesSQL(many)
}

// Key is the inbox dedup key of update updateID.
func Key(updateID string) string { return "update:" + updateID }
