package worker

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/fencingclaim"
	"github.com/weirhq/weir/internal/lazytx"
)

// An applier is how a step's writes are applied, chosen by the caller that
// runs the step: alone (a task's job, completed by the caller after them),
// alone with the COMMIT in the last batch (an outcome continuing its run),
// in a group of outcomes (stepMember), or with the start that inserted the
// run (startLast).
type applier interface {
	// admit is asked, once the step decided and before anything of it is
	// written, whether it can be applied so; errRunsAlone if not.
	admit(ctx context.Context, st *engine.Step, own *ownJob) error
	// applyLast applies the step's last writes (run.step and run.writes);
	// final says they may carry the COMMIT: nothing is written after them
	// and the job's completion, if there is a job, rides in them.
	applyLast(ctx context.Context, tx pgx.Tx, w *Worker, run *runRow, result *taskResult, final bool) error
}

// alone applies a step's writes in its transaction: sent as they come,
// the caller going on with the transaction (a task's job completes after
// them); or, with commit, the last batch carries the COMMIT when it may
// (lazytx): the caller writes nothing more and commits, which then costs
// no round trip of its own.
type alone struct{ commit bool }

func (alone) admit(context.Context, *engine.Step, *ownJob) error { return nil }

func (a alone) applyLast(ctx context.Context, tx pgx.Tx, w *Worker, run *runRow, _ *taskResult, final bool) error {
	batch := w.takeWrites(run)
	if a.commit && final {
		lazytx.QueueCommit(tx, batch)
	}
	if batch.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("advancing run: %w", err)
	}
	return nil
}

// admit keeps in a group of outcomes only a step all of whose writes go in
// its last batch, on its own run and jobs (engine.Step.Alone), with its
// job's completion: a member whose completion cannot be queued leaves the
// group now, before anything of it is written.
func (m *stepMember) admit(ctx context.Context, st *engine.Step, own *ownJob) error {
	if st.Alone || own == nil || own.queue == nil {
		return errRunsAlone
	}
	if queued, err := own.queueIn(ctx, &pgx.Batch{}); err != nil || !queued {
		return errRunsAlone
	}
	return nil
}

// applyLast hands the member's last writes to its group, which sends them
// with every member's and one COMMIT.
func (m *stepMember) applyLast(_ context.Context, _ pgx.Tx, _ *Worker, run *runRow, result *taskResult, final bool) error {
	if !final {
		// admit said otherwise (the job's completion could not be queued
		// after all): fail the group, which undoes what this wrote.
		return fmt.Errorf("advancing run %s in a group: its last writes cannot go with the COMMIT", run.ID)
	}
	m.deferLast(run.step, run.writes, func() { result.eager = run.eager }) // its claims are read with the COMMIT
	m.firstTask = run.NextEventID == 1
	run.step, run.writes = &engine.StepWrites{RunID: run.ID}, &pgx.Batch{}
	return nil
}

// startLast applies a first task's last writes with the start that
// inserted its run: added to last, which the start sends with its COMMIT;
// after is set to what to do once they ran.
type startLast struct {
	last  *lastWrites
	after *func()
}

// admit declines a task that starts a child: the child's start lock is
// taken waiting, and a start must never wait for a lock while it holds its
// own.
func (s startLast) admit(_ context.Context, st *engine.Step, _ *ownJob) error {
	if st.StartsChild {
		return errRunsAlone
	}
	return nil
}

func (s startLast) applyLast(ctx context.Context, tx pgx.Tx, w *Worker, run *runRow, result *taskResult, final bool) error {
	if !final {
		return alone{}.applyLast(ctx, tx, w, run, result, final)
	}
	s.last.add(run.step, run.writes)
	*s.after = func() { result.eager = run.eager } // its claims are read with the COMMIT
	run.step, run.writes = &engine.StepWrites{RunID: run.ID}, &pgx.Batch{}
	return nil
}

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
// (fencingclaim's MergeQueuedCompletions, MergeQueuedClaims: a claim names its job by an
// ID the worker reserved, jobIDs). When anything merged, the batch asks
// for generic plans first, unless plansSet says its transaction asked
// already (dbschema.GenericPlansSQL lasts until the transaction ends).
func (w *Worker) queueLastWrites(batch *pgx.Batch, l *lastWrites, plansSet bool) {
	head := len(batch.QueuedQueries)
	merged := w.store.QueueSteps(batch, l.steps)
	batch.QueuedQueries = append(batch.QueuedQueries, l.rest...)
	claims := fencingclaim.For(w.driver)
	if claims.MergeQueuedCompletions(batch, w.config.Schema)+claims.MergeQueuedClaims(batch, w.config.Schema) > 0 || merged {
		if !plansSet {
			batch.QueuedQueries = append(batch.QueuedQueries[:head:head],
				append([]*pgx.QueuedQuery{{SQL: dbschema.GenericPlansSQL}}, batch.QueuedQueries[head:]...)...)
		}
	}
}
