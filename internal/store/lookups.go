package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
)

type lookupSQL struct {
	latest, owned, next, get, payloads, generations string
	countByKind, countByState, events               string
}

func newLookupSQL(n *dbschema.Names) lookupSQL {
	return lookupSQL{
		latest: "SELECT run_id FROM " + n.Run + " WHERE namespace = $1 AND workflow_id = $2 ORDER BY generation DESC LIMIT 1",
		owned:  "SELECT run_id FROM " + n.Run + " WHERE namespace = $1 AND workflow_id = $2 AND run_id = $3",
		next:   "SELECT run_id FROM " + n.Run + " WHERE previous_run_id = $1",
		get: "SELECT r.namespace, r.workflow_id, r.generation, r.kind, r.state, r.result, r.failure," +
			" (SELECT n.run_id FROM " + n.Run + " n WHERE n.previous_run_id = r.run_id) FROM " + n.Run + " r WHERE r.run_id = $1",
		payloads: "SELECT namespace, workflow_id, args, result FROM " + n.Run + " WHERE run_id = $1",
		generations: "SELECT generation, run_id, state, created_at, closed_at FROM " + n.Run +
			" WHERE namespace = $1 AND workflow_id = $2 ORDER BY generation DESC LIMIT $3",
		countByKind:  "SELECT namespace, kind, state, count(*) FROM " + n.Run + " GROUP BY namespace, kind, state",
		countByState: "SELECT '', '', state, count(*) FROM " + n.Run + " GROUP BY state",
		events: "SELECT event_id, type, attributes, created_at, boundary FROM " + n.Event +
			" WHERE run_id = $1 AND event_id > $2 ORDER BY event_id LIMIT $3",
	}
}

// RunKey names a run of a workflow in a namespace; a zero RunID names the
// workflow's latest run.
type RunKey struct {
	Namespace, WorkflowID string
	RunID                 uuid.UUID
}

// ResolveRun returns the run p names, checked to be the workflow's in the
// namespace; pgx.ErrNoRows when it is not.
func (s *Store) ResolveRun(ctx context.Context, db DBTX, p RunKey) (id uuid.UUID, err error) {
	if p.RunID == uuid.Nil {
		return id, db.QueryRow(ctx, s.lookups.latest, p.Namespace, p.WorkflowID).Scan(&id)
	}
	return id, db.QueryRow(ctx, s.lookups.owned, p.Namespace, p.WorkflowID, p.RunID).Scan(&id)
}

// NextRun returns the run that continued run previous as new; pgx.ErrNoRows
// when none did.
func (s *Store) NextRun(ctx context.Context, db DBTX, previous uuid.UUID) (id uuid.UUID, err error) {
	return id, db.QueryRow(ctx, s.lookups.next, previous).Scan(&id)
}

// Run is what GetRun reads of a weir_run row.
type Run struct {
	Namespace, WorkflowID string
	Generation            int64
	Kind, State           string
	Result, Failure       []byte
	// Next is the run that continued this one as new, if any.
	Next *uuid.UUID
}

// GetRun reads a run; pgx.ErrNoRows when there is none.
func (s *Store) GetRun(ctx context.Context, db DBTX, runID uuid.UUID) (*Run, error) {
	var r Run
	return &r, db.QueryRow(ctx, s.lookups.get, runID).Scan(&r.Namespace, &r.WorkflowID, &r.Generation, &r.Kind, &r.State,
		&r.Result, &r.Failure, &r.Next)
}

// RunPayloads are a run's args and result as stored.
type RunPayloads struct {
	Namespace, WorkflowID string
	Args, Result          []byte
}

// GetRunPayloads reads a run's payloads; pgx.ErrNoRows when there is none.
func (s *Store) GetRunPayloads(ctx context.Context, db DBTX, runID uuid.UUID) (*RunPayloads, error) {
	var r RunPayloads
	return &r, db.QueryRow(ctx, s.lookups.payloads, runID).Scan(&r.Namespace, &r.WorkflowID, &r.Args, &r.Result)
}

// Generation is one run of a workflow ID.
type Generation struct {
	Generation int64
	RunID      uuid.UUID
	State      string
	CreatedAt  time.Time
	ClosedAt   *time.Time
}

// Generations reads up to limit of the newest runs of p's workflow, newest
// first.
func (s *Store) Generations(ctx context.Context, db DBTX, p RunKey, limit int) ([]*Generation, error) {
	return collectRows(ctx, db, pgx.RowToAddrOfStructByPos[Generation], s.lookups.generations, p.Namespace, p.WorkflowID, limit)
}

// RunCount counts the runs of a state (with CountRuns' ByKind, of a
// namespace and kind too; else those are empty).
type RunCount struct {
	Namespace, Kind, State string
	N                      int64
}

// CountRuns counts the runs by state, and by namespace and kind if byKind.
func (s *Store) CountRuns(ctx context.Context, db DBTX, byKind bool) ([]RunCount, error) {
	query := s.lookups.countByState
	if byKind {
		query = s.lookups.countByKind
	}
	return collectRows(ctx, db, pgx.RowToStructByPos[RunCount], query)
}
