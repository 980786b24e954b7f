package store

import (
	"context"

	"github.com/google/uuid"

	"github.com/weirhq/weir/internal/dbschema"
)

type updateSQL struct {
	request, get string
}

func newUpdateSQL(n *dbschema.Names) updateSQL {
	return updateSQL{
		request: "INSERT INTO " + n.Update + " (run_id, update_id, kind) VALUES ($1, $2, $3) ON CONFLICT (run_id, update_id) DO NOTHING",
		get:     "SELECT state, result, failure FROM " + n.Update + " WHERE run_id = $1 AND update_id = $2",
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
