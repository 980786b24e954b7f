// Package inbox writes results that wait for a run's next workflow task:
// activity outcomes, and later timer fires, signals and cancel requests.
//
// No lost wake-ups: every writer locks the run row, and queues a workflow task
// in the same transaction unless one is already queued (weir_run.task_job_id).
// A task holds the same lock from its start to its commit, so an inbox row is
// either seen by the running task or finds it gone and queues the next one.
package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/task"
)

// Inserter inserts River jobs in a transaction; *river.Client[pgx.Tx] is one.
type Inserter interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// ErrRunClosed means the run is no longer running, so nothing waits for the
// item: it was dropped.
var ErrRunClosed = errors.New("inbox: run is closed")

// Item is one inbox row.
type Item struct {
	// Attributes are the event attributes, JSON.
	Attributes []byte

	// DedupKey makes a repeated write of the same item a no-op, e.g.
	// "activity:17" for the outcome of the activity scheduled by event 17.
	DedupKey string

	// Type is the history event type the item becomes.
	Type string
}

// Deliver writes item to run's inbox in tx and makes sure a workflow task
// will read it. It returns ErrRunClosed, writing nothing, when the run is
// not running, and a *RunNotFoundError-like error when it does not exist.
// It reports whether the item was new (false: a duplicate of its DedupKey).
func Deliver(ctx context.Context, tx pgx.Tx, st *store.Store, inserter Inserter, runID uuid.UUID, item *Item) (bool, error) {
	run, state, taskJobID, err := st.LockRunForTask(ctx, tx, runID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, fmt.Errorf("delivering %s to run %s: %w", item.Type, runID, ErrRunClosed)
	case err != nil:
		return false, fmt.Errorf("locking run %s: %w", runID, err)
	case state != "running":
		return false, fmt.Errorf("delivering %s to run %s (%s): %w", item.Type, runID, state, ErrRunClosed)
	}

	added, err := Add(ctx, tx, st, runID, item)
	if err != nil {
		return false, err
	}
	if taskJobID == nil {
		if err := QueueTask(ctx, tx, st, inserter, run); err != nil {
			return false, err
		}
	}
	return added, nil
}

// Add writes item to run's inbox in tx, for a caller that holds the run's
// lock and knows a task of the run is queued (else use Deliver). It reports
// whether the item was new (false: a duplicate of its DedupKey).
func Add(ctx context.Context, tx pgx.Tx, st *store.Store, runID uuid.UUID, item *Item) (bool, error) {
	added, err := st.AddInbox(ctx, tx, store.AddInboxParams{
		RunID: runID, Type: item.Type, Attributes: item.Attributes, DedupKey: item.DedupKey,
	})
	if err != nil {
		return false, fmt.Errorf("writing %s to inbox of run %s: %w", item.Type, runID, err)
	}
	return added, nil
}

// Run is what QueueTask needs to know of a run.
type Run = store.TaskRun

// QueueTask inserts a workflow task for run and records it as the task that
// will next read the inbox. The caller holds the run row's lock.
func QueueTask(ctx context.Context, tx pgx.Tx, st *store.Store, inserter Inserter, run *Run) error {
	inserted, err := inserter.InsertTx(ctx, tx, task.NewArgs(run.Namespace, run.Kind, run.ID, run.WorkflowID), task.InsertOpts(run.Queue))
	if err != nil {
		return fmt.Errorf("queueing a task of run %s: %w", run.ID, err)
	}
	if err := st.SetTaskJob(ctx, tx, run.ID, inserted.Job.ID); err != nil {
		return fmt.Errorf("recording the task of run %s: %w", run.ID, err)
	}
	return nil
}

// UpdateKey is the dedup key of update updateID.
func UpdateKey(updateID string) string { return "update:" + updateID }

// ActivityKey is the dedup key of the outcome of the activity scheduled by
// event scheduledEventID.
func ActivityKey(scheduledEventID int64) string {
	return fmt.Sprintf("activity:%d", scheduledEventID)
}
