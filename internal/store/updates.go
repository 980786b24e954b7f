package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/history"
)

type updateSQL struct {
	request, get, answer string
	done                 string // channel
}

func newUpdateSQL(n *dbschema.Names) updateSQL {
	// done notifies the callers of the updates a statement's CTE "done"
	// answered, on channel $<channel>.
	done := func(channel string) string {
		return " SELECT count(pg_notify($" + channel + ", done.run_id::text || '/' || done.update_id)) FROM done"
	}
	return updateSQL{
		request: "INSERT INTO " + n.Update + " (run_id, update_id, kind) VALUES ($1, $2, $3) ON CONFLICT (run_id, update_id) DO NOTHING",
		get:     "SELECT state, result, failure FROM " + n.Update + " WHERE run_id = $1 AND update_id = $2",
		answer: "WITH done AS (UPDATE " + n.Update + " SET state = $3, result = $4, failure = $5, completed_at = now()" +
			" WHERE run_id = $1 AND update_id = $2 AND state = 'requested' RETURNING run_id, update_id)" + done("6"),
		done: dbschema.Channel(n.Schema, dbschema.UpdateDoneChannel),
	}
}

// UpdateKey names an update of a run.
type UpdateKey struct {
	RunID    uuid.UUID
	UpdateID string
}

// RequestUpdate records an update of kind as requested; false when it was
// requested before.
func (s *Store) RequestUpdate(ctx context.Context, db DBTX, p UpdateKey, kind string) (bool, error) {
	tag, err := db.Exec(ctx, s.updates.request, p.RunID, p.UpdateID, kind)
	return tag.RowsAffected() == 1, err
}

// Update is a weir_update row's answer: State is requested, rejected or
// completed.
type Update struct {
	State           string
	Result, Failure []byte
}

// GetUpdate reads an update's answer.
func (s *Store) GetUpdate(ctx context.Context, db DBTX, p UpdateKey) (*Update, error) {
	var u Update
	return &u, db.QueryRow(ctx, s.updates.get, p.RunID, p.UpdateID).Scan(&u.State, &u.Result, &u.Failure)
}

// AnswerUpdateParams answer an update: State is completed (with Result) or
// rejected (with Failure).
type AnswerUpdateParams struct {
	UpdateKey
	State   string
	Result  []byte
	Failure *history.Failure
}

// AnswerUpdate records an update's answer, unless it was answered already,
// and notifies its caller.
func (s *Store) AnswerUpdate(ctx context.Context, db DBTX, p AnswerUpdateParams) error {
	var failure []byte
	if p.Failure != nil {
		var err error
		if failure, err = json.Marshal(p.Failure); err != nil {
			return fmt.Errorf("encoding failure of update %s: %w", p.UpdateID, err)
		}
	}
	if _, err := db.Exec(ctx, s.updates.answer, p.RunID, p.UpdateID, p.State, p.Result, failure, s.updates.done); err != nil {
		return fmt.Errorf("answering update %s of run %s: %w", p.UpdateID, p.RunID, err)
	}
	return nil
}

// AbandonUpdates rejects every update of a run still waiting for an answer,
// because the run closed (reason says how), and notifies their callers.
func (s *Store) AbandonUpdates(ctx context.Context, db DBTX, runID uuid.UUID, reason string) error {
	failure, err := json.Marshal(&history.Failure{Message: reason, Type: "WorkflowClosed"})
	if err == nil {
		_, err = db.Exec(ctx, s.runs.abandon, runID, failure, s.updates.done)
	}
	if err != nil {
		return fmt.Errorf("abandoning updates of run %s: %w", runID, err)
	}
	return nil
}
