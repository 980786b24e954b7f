package worker

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/fencingclaim"
	"github.com/weirhq/weir/internal/lazytx"
	"github.com/weirhq/weir/internal/store"
)

// An applier is how a step's writes are applied, chosen by the caller that
// runs the step: alone (a task's job, completed by the caller after them),
// alone with the COMMIT in the last batch (an outcome continuing its run),
// in a group of outcomes (groupMember), or with the start that inserted the
// run (startLast).
type applier interface {
	// admit is asked, once the step decided and before anything of it is
	// written, whether it can be applied so; errRunsAlone if not.
	admit(ctx context.Context, st engine.Step, own *ownJob) error
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

func (alone) admit(context.Context, engine.Step, *ownJob) error { return nil }

func (a alone) applyLast(ctx context.Context, tx pgx.Tx, w *Worker, run *runRow, result *taskResult, final bool) error {
	if result != nil && len(run.others.completions) > 0 {
		result.completed = run.others
	}
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
func (m *groupMember) admit(ctx context.Context, st engine.Step, own *ownJob) error {
	if st.Alone || own == nil || own.claims == nil {
		return errRunsAlone
	}
	if _, queued, err := own.completion(ctx); err != nil || !queued {
		return errRunsAlone
	}
	return nil
}

// applyLast hands the member's last writes to its group, which sends them
// with every member's and one COMMIT.
func (m *groupMember) applyLast(_ context.Context, _ pgx.Tx, _ *Worker, run *runRow, result *taskResult, final bool) error {
	switch {
	case !final:
		// admit said otherwise (the job's completion could not be queued
		// after all): fail the group, which undoes what this wrote.
		return fmt.Errorf("advancing run %s in a group: its last writes cannot go with the COMMIT", run.ID)
	case result != &m.cont:
		return fmt.Errorf("advancing run %s in a group: its result is not its member's", run.ID)
	}
	m.deferLast(run)
	m.in.firstTask = run.NextEventID == 1
	run.step, run.others = nil, nil
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
func (s startLast) admit(_ context.Context, st engine.Step, _ *ownJob) error {
	if st.StartsChild {
		return errRunsAlone
	}
	return nil
}

func (s startLast) applyLast(ctx context.Context, tx pgx.Tx, w *Worker, run *runRow, result *taskResult, final bool) error {
	if !final {
		return alone{}.applyLast(ctx, tx, w, run, result, final)
	}
	s.last.add(run.step, run.others)
	*s.after = func() { result.eager = run.eager } // its claims are read with the COMMIT
	run.step, run.others = nil, nil
	return nil
}

// otherWrites are what a step queues to go with its writes to its run
// (engine.StepWrites): the claims of the activities it schedules to run
// here (claimActivity) and its claimed job's fenced completion (ownJob),
// typed so that a group queues one statement per kind for all of its
// members, and checks read with them.
type otherWrites struct {
	claims      []fencingclaim.Request
	completions []fencingclaim.Completion
	checks      pgx.Batch
}

// queue queues o in batch: the claims, the completions, then the checks,
// claims and completions one statement per kind (fencingclaim's
// QueueClaims and QueueCompletions: a claim names its job by an ID the
// worker reserved, jobIDs). It reports whether a statement may be over
// arrays, which Postgres plans again on every call unless asked for a
// generic plan.
func (o *otherWrites) queue(batch *pgx.Batch, claims fencingclaim.Driver) (merged bool) {
	if len(o.claims) > 0 {
		claims.QueueClaims(batch, o.claims)
	}
	if len(o.completions) > 0 {
		claims.QueueCompletions(batch, o.completions)
	}
	batch.QueuedQueries = append(batch.QueuedQueries, o.checks.QueuedQueries...)
	return len(o.claims) > 1 || len(o.completions) > 1
}

// lastWrites are the last writes of the members of a group (of outcomes,
// groupCommitter, or of first tasks in a group of starts), gathered to go
// with one COMMIT: each member's typed writes to its run, which the group
// renders one statement per kind (store.QueueSteps) over arrays it keeps
// room for, and its other writes, which follow (otherWrites.queue).
type lastWrites struct {
	steps  []*engine.StepWrites
	arrays store.Arrays
	otherWrites
}

// grow makes room in l for members as newLastWrites sizes them.
func (l *lastWrites) grow(members int) {
	l.steps = slices.Grow(l.steps, members)
	l.claims, l.completions = slices.Grow(l.claims, members), slices.Grow(l.completions, members)
}

// reset empties l, keeping its room, which holds nothing after: its
// batch was sent, or dropped.
func (l *lastWrites) reset() {
	clear(l.steps)
	l.steps = l.steps[:0]
	l.arrays.Reset()
	l.otherWrites.reset()
}

// reset empties o, keeping its room, which holds nothing after.
func (o *otherWrites) reset() {
	clear(o.claims)
	clear(o.completions)
	clear(o.checks.QueuedQueries)
	o.claims, o.completions, o.checks.QueuedQueries = o.claims[:0], o.completions[:0], o.checks.QueuedQueries[:0]
}

// newLastWrites returns writes sized for members that each write one step,
// claim one activity and complete one job, the common case.
func newLastWrites(members int) lastWrites {
	return lastWrites{
		steps:       make([]*engine.StepWrites, 0, members),
		otherWrites: otherWrites{claims: make([]fencingclaim.Request, 0, members), completions: make([]fencingclaim.Completion, 0, members)},
	}
}

// add takes a member's last writes; step or others may be nil.
func (l *lastWrites) add(step *engine.StepWrites, others *otherWrites) {
	if step != nil {
		l.steps = append(l.steps, step)
	}
	if others != nil {
		l.claims, l.completions = append(l.claims, others.claims...), append(l.completions, others.completions...)
		l.checks.QueuedQueries = append(l.checks.QueuedQueries, others.checks.QueuedQueries...)
	}
}

func (l *lastWrites) empty() bool {
	return len(l.steps) == 0 && len(l.claims) == 0 && len(l.completions) == 0 && l.checks.Len() == 0
}

// queueLastWrites queues l in batch: the members' writes to their runs as
// the group's statements, then their other writes and checks. When a
// statement is over arrays, the writes go between dbschema.HashJoinsSQL and
// HashJoinsEndSQL, and the batch asks for generic plans first, unless
// plansSet says its transaction asked already (dbschema.GenericPlansSQL
// lasts until the transaction ends).
func (w *Worker) queueLastWrites(batch *pgx.Batch, l *lastWrites, plansSet bool) {
	head := len(batch.QueuedQueries)
	merged := w.store.QueueSteps(batch, l.steps, &l.arrays)
	if l.queue(batch, w.claims) || merged {
		hashJoined(batch, head, l.checks.Len())
		if !plansSet {
			batch.QueuedQueries = slices.Insert(batch.QueuedQueries, head, &pgx.QueuedQuery{SQL: dbschema.GenericPlansSQL})
		}
	}
}

// hashJoined puts the writes batch queued from head on, less its last
// checks queries, between dbschema.HashJoinsSQL and HashJoinsEndSQL. A
// statement that joins a batch must always run so, wherever it is sent:
// the plan its first execution on a connection makes is kept.
func hashJoined(batch *pgx.Batch, head, checks int) {
	end := len(batch.QueuedQueries) - checks
	batch.QueuedQueries = slices.Insert(batch.QueuedQueries, end, &pgx.QueuedQuery{SQL: dbschema.HashJoinsEndSQL})
	batch.QueuedQueries = slices.Insert(batch.QueuedQueries, head, &pgx.QueuedQuery{SQL: dbschema.HashJoinsSQL})
}
