package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/inbox"
	"github.com/weirhq/weir/internal/lazytx"
)

// deliverOutcome gives an activity's outcome (an event of eventType with
// attrs) to its run in tx, the transaction that also completes (or fails)
// the activity's job, fenced; a run that closed or is gone takes nothing.
//
// With cont set, and when this worker runs the run's workflow and no task
// of the run is queued, the outcome continues the run: the run's next
// workflow task runs right here, under the run's lock, with the outcome as
// its input, fenced by the activity's lease (decision 0010). cont receives
// what interceptors are told and the history for the cache. Otherwise the
// outcome goes to the run's inbox and a task is queued for it unless one
// is (inbox.Deliver).
//
// With own set, the job's completion rides with the continuation's last
// writes when it can (a claimed job); completed reports whether it did, and
// the caller completes the job otherwise.
func (w *Worker) deliverOutcome(ctx context.Context, tx pgx.Tx, meta *activityMeta, eventType history.EventType, attrs any,
	cont *taskResult, own *ownJob,
) (completed bool, err error) {
	data, err := json.Marshal(attrs)
	if err != nil {
		return false, fmt.Errorf("encoding %s of activity %d: %w", eventType, meta.ScheduledEventID, err)
	}
	item := func() *inbox.Item { // for the run's inbox: not a continuation
		return &inbox.Item{Attributes: data, DedupKey: inbox.ActivityKey(meta.ScheduledEventID), Type: string(eventType)}
	}
	def := w.workflows[meta.WorkflowKind]
	if cont != nil && cont.step != nil && (def == nil || len(w.config.Interceptors) > 0) {
		return false, errRunsAlone
	}
	if cont == nil || def == nil || len(w.config.Interceptors) > 0 {
		// Interceptors see every workflow task as a River job of its own.
		_, err := inbox.Deliver(ctx, tx, w.store, w.riverClient, meta.RunID, item())
		return false, ignoreClosed(err)
	}
	run, now, _, locked, err := cont.step.takeLocked() // locked by its group
	if !locked {
		run, now, _, err = w.lockRun(ctx, tx, meta.RunID, false)
	}
	if locked && (err != nil || run.State != "running" || run.TaskJobID != nil) {
		// Not a continuation: what it writes instead (the inbox, the job's
		// completion on its own) goes in a transaction of its own.
		return false, errRunsAlone
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	case run.State != "running":
		return false, nil
	case run.TaskJobID != nil:
		// A task is queued (a signal came, say): the outcome waits for it.
		_, err := inbox.Add(ctx, tx, w.store, meta.RunID, item())
		return false, err
	}
	direct := history.Event{Type: eventType, Attributes: data, Time: now}
	// recordOutcome writes nothing after this and commits: the last batch may.
	// The continuation is the first attempt of a workflow task of its own,
	// whatever attempt of the activity brought the outcome.
	in := &setting{attempt: 1, apply: alone{commit: true}, own: own}
	if cont.step != nil {
		in.apply = cont.step // its last writes go with the group's COMMIT
	}
	err = w.advance(ctx, tx, def, run, now, []history.Event{direct}, in, cont)
	return in.completed, err
}

// recordOutcome runs record, the transaction that records an activity
// attempt's outcome and may continue its run: in a group with other runs'
// outcomes when the worker runs and alone is false (groupCommitter), else
// alone (outcomeTxAlone). Should that fail, it records the outcome once more without
// continuing the run (cont nil: the outcome goes to the run's inbox and a
// workflow task of its own runs the code): the continuation runs workflow
// code, whose panic, non-determinism or deadlock must fail a workflow task
// (retried with its backoff, shown by describe), never the activity's
// attempt, which River would retry by running the activity again.
func (w *Worker) recordOutcome(ctx context.Context, runID uuid.UUID, alone bool,
	record func(ctx context.Context, tx pgx.Tx, cont *taskResult) error,
) error {
	run := w.outcomeTxAlone
	if !alone && w.steps != nil {
		run = w.steps.commit
	}
	err := run(ctx, runID, record)
	if err == nil || ctx.Err() != nil {
		return err
	}
	w.config.Logger.WarnContext(ctx, "weir: continuing the run with an activity's outcome failed; the outcome goes to a workflow task",
		slog.String("run_id", runID.String()), slog.String("error", err.Error()))
	return w.outcomeTxAlone(ctx, runID, func(ctx context.Context, tx pgx.Tx, _ *taskResult) error {
		return record(ctx, tx, nil)
	})
}

// taskTx runs fn, the transaction of a workflow task of run runID fetched
// from queue (runTask): in a group with other runs' outcomes and tasks when
// the worker runs (groupCommitter), else alone.
func (w *Worker) taskTx(ctx context.Context, runID uuid.UUID, queue string, fn func(ctx context.Context, tx pgx.Tx, cont *taskResult) error) error {
	if w.steps != nil {
		return w.steps.do(&groupMember{ctx: ctx, runID: runID, task: true, queue: queue, fn: fn})
	}
	return w.outcomeTxOnce(ctx, fn)
}

// outcomeTxAlone runs fn, an outcome of run runID, in a transaction of its
// own, holding the run in the step committer meanwhile (see hold).
func (w *Worker) outcomeTxAlone(ctx context.Context, runID uuid.UUID, fn func(ctx context.Context, tx pgx.Tx, cont *taskResult) error) error {
	if w.steps != nil {
		w.steps.hold(runID)
		defer w.steps.release(runID)
	}
	return w.outcomeTxOnce(ctx, fn)
}

// outcomeTxOnce runs fn in a transaction of its own. Its BEGIN goes with
// its first statement (lazytx): one round trip less per workflow step.
func (w *Worker) outcomeTxOnce(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx, cont *taskResult) error) error {
	var cont taskResult
	err := lazytx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		cont = taskResult{}
		return fn(ctx, tx, &cont)
	})
	if errors.Is(err, lazytx.ErrCommittedDespiteCallback) {
		// The outcome committed with its last batch: it is recorded. What
		// the failed callback should have noted (a claimed activity to
		// start, say) is left to recovery (the claim's lease expires).
		w.config.Logger.WarnContext(ctx, "weir: an activity's outcome committed, but reading one of its results failed",
			slog.String("error", err.Error()))
		err = nil
	}
	if err == nil && cont.completed != nil {
		w.claims.Committed(cont.completed.completions)
	}
	w.settle(err, &cont)
	return err
}

// settle does what follows a task's (or continuation's) transaction: once
// it committed, cache the history it wrote (first: the activities it
// claimed may finish and continue the run from the cache), start those
// activities, send its notifications and, if it started a timer, let the
// timer waker look again; if it did not commit, free the claimed
// activities' slots.
func (w *Worker) settle(err error, result *taskResult) {
	if err == nil {
		// Before the claimed activities start: their outcomes may read it
		// (groupCommitter.fromCache).
		w.commitHistory(result)
	} else {
		result.dropCachedRun()
	}
	w.afterTx(err, result.eager, int(result.eagerSlots))
	if err != nil {
		return
	}
	for _, n := range result.notes {
		w.notifier.Notify(n.channel, n.payload)
	}
	if result.startedTimer && w.timers != nil {
		w.timers.poke()
	}
}
