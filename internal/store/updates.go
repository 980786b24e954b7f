package store

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
)

type updateSQL struct {
	request, get, answer, abandon, abandonMany string
	done                                       string // channel
}

func newUpdateSQL(n *dbschema.Names) updateSQL {
	// done notifies the callers of the updates a statement's CTE "done"
	// answered, on channel $<channel>.
	done := func(channel string) string {
		return " SELECT count(pg_notify($" + channel + ", done.run_id::text || '/' || done.update_id)) FROM done"
	}
	abandon := func(runs string) string {
		return "WITH done AS (UPDATE " + n.Update + " SET state = 'rejected', failure = $2, completed_at = now()" +
			" WHERE run_id " + runs + " AND state = 'requested' RETURNING run_id, update_id)" + done("3")
	}
	return updateSQL{
		request: "INSERT INTO " + n.Update + " (run_id, update_id, kind) VALUES ($1, $2, $3) ON CONFLICT (run_id, update_id) DO NOTHING",
		get:     "SELECT state, result, failure FROM " + n.Update + " WHERE run_id = $1 AND update_id = $2",
		answer: "WITH done AS (UPDATE " + n.Update + " SET state = $3, result = $4, failure = $5, completed_at = now()" +
			" WHERE run_id = $1 AND update_id = $2 AND state = 'requested' RETURNING run_id, update_id)" + done("6"),
		abandon:     abandon("= $1"),
		abandonMany: abandon("= ANY($1)"),
		done:        dbschema.Channel(n.Schema, dbschema.UpdateDoneChannel),
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

// AnswerUpdateParams answer an update: State is completed or rejected, with
// Result or Failure (JSON).
type AnswerUpdateParams struct {
	UpdateKey
	State           string
	Result, Failure []byte
}

// AnswerUpdate records an update's answer, unless it was answered already,
// and notifies its caller.
func (s *Store) AnswerUpdate(ctx context.Context, db DBTX, p AnswerUpdateParams) error {
	_, err := db.Exec(ctx, s.updates.answer, p.RunID, p.UpdateID, p.State, p.Result, p.Failure, s.updates.done)
	return err
}

// AbandonUpdatesSQL rejects the waiting updates of a run ($1; with many,
// of an array of runs) with failure $2 and notifies their callers ($3,
// UpdateDoneChannel).
func (s *Store) AbandonUpdatesSQL(many bool) string {
	if many {
		return s.updates.abandonMany
	}
	return s.updates.abandon
}

// QueueAbandonUpdates queues AbandonUpdatesSQL for one run in batch.
func (s *Store) QueueAbandonUpdates(batch *pgx.Batch, runID uuid.UUID, failure []byte) {
	batch.Queue(s.updates.abandon, runID, failure, s.updates.done)
}
