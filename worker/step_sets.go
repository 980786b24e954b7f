package worker

import (
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/engine"
)

// lastWrites are the last writes of the members of a group (of outcomes,
// stepCommitter, or of first tasks in a group of starts), gathered to go
// with one COMMIT: each member's typed writes to its run, which the group
// renders one statement per kind (store.QueueSteps), and what else it
// queued (claims, its job's completion, checks), which follow in turn.
type lastWrites struct {
	steps []*engine.StepWrites
	rest  []*pgx.QueuedQuery
}

// add takes a member's last writes; step or rest may be nil.
func (l *lastWrites) add(step *engine.StepWrites, rest *pgx.Batch) {
	if step != nil {
		l.steps = append(l.steps, step)
	}
	if rest != nil {
		l.rest = append(l.rest, rest.QueuedQueries...)
	}
}

func (l *lastWrites) empty() bool { return len(l.steps) == 0 && len(l.rest) == 0 }

// queueLastWrites queues l in batch: the members' writes to their runs as
// the group's statements, then the rest, with the claimed jobs'
// completions and the claims of the activities scheduled merged by fencing
// (MergeQueuedCompletions, MergeQueuedClaims: a claim names its job by an
// ID the worker reserved, jobIDs). When anything merged, the batch asks
// for generic plans first, unless plansSet says its transaction asked
// already (dbschema.GenericPlansSQL lasts until the transaction ends).
func (w *Worker) queueLastWrites(batch *pgx.Batch, l *lastWrites, plansSet bool) {
	head := len(batch.QueuedQueries)
	merged := w.store.QueueSteps(batch, l.steps)
	batch.QueuedQueries = append(batch.QueuedQueries, l.rest...)
	if fencing.MergeQueuedCompletions(batch, w.config.Schema)+fencing.MergeQueuedClaims(batch, w.config.Schema) > 0 || merged {
		if !plansSet {
			batch.QueuedQueries = append(batch.QueuedQueries[:head:head],
				append([]*pgx.QueuedQuery{{SQL: dbschema.GenericPlansSQL}}, batch.QueuedQueries[head:]...)...)
		}
	}
}
