package store

import (
	"context"

	"github.com/google/uuid"

	"github.com/weirhq/weir/internal/dbschema"
)

type inboxSQL struct {
	lockRun, add, setTask string
}

func newInboxSQL(n *dbschema.Names) inboxSQL {
	return inboxSQL{
		lockRun: "SELECT kind, namespace, queue, workflow_id, state, task_job_id FROM " + n.Run + " WHERE run_id = $1 FOR UPDATE",
		add: "INSERT INTO " + n.Inbox + " (run_id, type, attributes, dedup_key) VALUES ($1, $2, $3, $4)" +
			" ON CONFLICT (run_id, dedup_key) DO NOTHING",
		setTask: "UPDATE " + n.Run + " SET task_job_id = $2, updated_at = now() WHERE run_id = $1",
	}
}

// LockRunForTask locks a run and reads what queueing its workflow task
// needs, its state and its queued task's job; pgx.ErrNoRows when there is
// no such run.
func (s *Store) LockRunForTask(ctx context.Context, db DBTX, runID uuid.UUID) (run *TaskRun, state string, taskJobID *int64, err error) {
	run = &TaskRun{ID: runID}
	err = db.QueryRow(ctx, s.inbox.lockRun, runID).Scan(&run.Kind, &run.Namespace, &run.Queue, &run.WorkflowID, &state, &taskJobID)
	return run, state, taskJobID, err
}

// AddInboxParams are an inbox row: the event it becomes and its dedup key.
type AddInboxParams struct {
	RunID      uuid.UUID
	Type       string
	Attributes []byte
	DedupKey   string
}

// AddInbox writes an inbox row and reports whether it was new (false: a
// duplicate of its DedupKey).
func (s *Store) AddInbox(ctx context.Context, db DBTX, p AddInboxParams) (bool, error) {
	tag, err := db.Exec(ctx, s.inbox.add, p.RunID, p.Type, p.Attributes, p.DedupKey)
	return tag.RowsAffected() == 1, err
}

// SetTaskJob records the job of the workflow task that next reads a run's
// inbox.
func (s *Store) SetTaskJob(ctx context.Context, db DBTX, runID uuid.UUID, jobID int64) error {
	return exec(ctx, db, s.inbox.setTask, runID, jobID)
}
