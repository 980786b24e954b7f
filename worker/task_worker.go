package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/closing"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/inbox"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/task"
	"github.com/weirhq/weir/workflow"
)

// taskWorker is the River worker of one workflow kind's tasks.
type taskWorker struct {
	river.WorkerDefaults[task.Args]

	def *replay.Definition
	w   *Worker
}

// NextRetry retries a failing task with a backoff capped at
// task.RetryBackoffMax: a task never gives up, and resumes soon after its
// cause (a bug, a missing kind) is fixed.
func (t *taskWorker) NextRetry(job *river.Job[task.Args]) time.Time { return engineRetry(job.Attempt) }

// engineRetry is when the engine's own job (a workflow task, a timer) retries
// after attempt failed: 100 ms doubling per attempt, capped at
// task.RetryBackoffMax. River's default (attempt⁴ seconds) would leave a job
// that lost a few leases to worker or database faults waiting for minutes.
func engineRetry(attempt int) time.Time {
	backoff := time.Duration(1<<min(attempt, 10)) * 100 * time.Millisecond
	return time.Now().Add(min(backoff, task.RetryBackoffMax))
}

// Timeout is none for River's executor: Work bounds the task by
// Config.TaskTimeout itself. With a timeout, River's executor starts a
// goroutine per job to watch for it being stuck, which stays parked while
// the task waits for its group, and every GC cycle scans one per held slot.
func (t *taskWorker) Timeout(*river.Job[task.Args]) time.Duration { return -1 }

// Work runs one workflow task: in ONE transaction it locks the run, moves the
// inbox into history, replays the workflow, appends the new events with a
// compare-and-swap on the run's append point, schedules what the new events
// ask for, and completes its own job, fenced. A stale task (its lease was lost
// to a newer attempt) changes nothing: its completion aborts the transaction
// and nothing the task wrote commits.
//
// Tasks fetched together commit in groups, as activity outcomes do
// (groupCommitter): a task whose job holds a lease token completes it with
// the run's last writes, by the same fenced statement as a claimed job's.
func (t *taskWorker) Work(ctx context.Context, job *river.Job[task.Args]) error {
	// The task's deadline (Timeout), on the context before anything reads
	// the lease from it: the lease keeper stops renewing past it.
	ctx, cancelTask := fencing.WithAttemptDeadline(ctx, time.Now().Add(t.w.config.TaskTimeout))
	defer cancelTask()
	// A run new to the run cache waits for room there (historyCache.await)
	// for half the task's time; a task still without room goes back to its
	// queue, which costs it no attempt.
	release, err := t.w.histories.await(ctx, job.Args.RunID, t.w.config.TaskTimeout/2)
	if err != nil {
		return river.JobSnooze(0)
	}
	defer release()
	own := &ownJob{id: job.ID, complete: func(ctx context.Context, tx pgx.Tx) error {
		_, err := fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
		return err
	}}
	if lease, ok := fencing.LeaseFromContext(ctx); ok && lease.Token != "" {
		own.claims = t.w.claims
	}
	if len(t.w.config.Interceptors) > 0 {
		err = t.intercepted(ctx, job, own)
	} else {
		_, err = t.run(ctx, job, own)
	}
	if err != nil {
		err = withStack(fmt.Errorf("workflow task of run %s (job %d, attempt %d): %w", job.Args.RunID, job.ID, job.Attempt, err))
		t.w.config.Logger.WarnContext(ctx, "weir: workflow task failed; it will be retried",
			slog.String("run_id", job.Args.RunID.String()), slog.Int("attempt", job.Attempt), slog.String("error", err.Error()))
		return err
	}
	return nil
}

// intercepted runs the task through the worker's interceptors.
func (t *taskWorker) intercepted(ctx context.Context, job *river.Job[task.Args], own *ownJob) error {
	info := &TaskInfo{Attempt: job.Attempt, JobID: job.ID, Kind: t.def.Kind, RunID: job.Args.RunID, WorkflowID: job.Args.WorkflowID}
	t.w.readTaskInfo(ctx, info)
	return intercept(ctx, t.w.config.Interceptors, info, Interceptor.InterceptTask, func(ctx context.Context) error {
		result, err := t.run(ctx, job, own)
		if err == nil {
			info.Closed, info.ReplayDuration, info.SignalHeaders = result.closed, result.replayed, result.signalHeaders
		}
		return err
	})
}

// run runs the task in its transaction; it returns the try that committed,
// if one did.
func (t *taskWorker) run(ctx context.Context, job *river.Job[task.Args], own *ownJob) (*taskResult, error) {
	var result *taskResult
	err := t.w.taskTx(ctx, job.Args.RunID, job.Queue, func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
		result = cont
		return t.w.runTask(ctx, tx, t.def, job, own, cont)
	})
	return result, err
}

// readTaskInfo reads what interceptors are told of a task's run before it
// runs: its headers (trace context), generation, namespace and start time.
// A run that cannot be read leaves them unset; the task finds out why.
func (w *Worker) readTaskInfo(ctx context.Context, info *TaskInfo) {
	run, err := w.store.GetTaskRunInfo(ctx, w.pool, info.RunID)
	if err != nil {
		return
	}
	info.Generation, info.Namespace, info.CreatedAt, info.Headers = run.Generation, run.Namespace, run.CreatedAt, decodeHeaders(run.TraceContext)
}

// withStack puts the stack of a panic in workflow code in err's text:
// River keeps only the error's text, so the failing task shows where
// workflow code broke.
func withStack(err error) error {
	var panicErr *workflow.PanicError
	if errors.As(err, &panicErr) && panicErr.Stack != "" {
		return &stackError{err: err, stack: panicErr.Stack}
	}
	return err
}

// stackError is an error whose text ends with a stack trace.
type stackError struct {
	err   error
	stack string
}

func (e *stackError) Error() string { return e.err.Error() + "\n" + e.stack }
func (e *stackError) Unwrap() error { return e.err }

// runRow is a run's row as a step read it, and what the step did so far.
type runRow struct {
	engine.Run

	scanned    bool               // what never changes of the row is the row's (read by scan, or the start that inserted it)
	inboxed    bool               // the task wrote to the run's own inbox (a child that could not start)
	eager      []claimedAttempt   // activities the task claimed, to start once it commits
	eagerSlots int                // eager slots the task took (as many as eager once its writes ran)
	step       *engine.StepWrites // the step's typed writes to its run, not sent yet (flushWrites); nil once applied
	others     *otherWrites       // what else the step queued to go with step's (claims, completion, checks); nil once applied
	kept       *stepWrites        // where openWrites opens the step's writes first: its group's (memberState); nil: new ones
}

// taskResult is what a task tells interceptors, once its transaction
// commits.
type taskResult struct {
	step          *groupMember        // the outcome's place in a group (groupCommitter), if it has one
	run           *runRow             // the run's row as read, whose immutable part goes to the cache with history
	cached        bool                // commitHistory applied the history already
	startedTimer  bool                // it started a timer (the timer waker looks again)
	eagerSlots    int32               // eager slots taken, to give back if it does not (with the flags: a group member's size class)
	eager         []claimedAttempt    // activities claimed, to start once the transaction commits
	history       [][]history.Event   // the history committed, as pieces, for the cache (nil: forget the run)
	cachedRun     *replay.CachedRun   // the run's code as the task left it, for the cache with history
	facts         *engine.Facts       // what was read of the history's events, for the cache with history
	runID         uuid.UUID           // the run advanced, if any
	closed        string              // the run's new state, if the task closed it
	replayed      time.Duration       // replaying history and running the workflow code
	signalHeaders []map[string]string // of the signals it delivered, that had any
	notes         []note              // notifications to send once the transaction commits
	// completed are the last writes it applied alone (alone.applyLast)
	// that carried job completions, told to the fencing driver once it
	// commits.
	completed *otherWrites
}

// dropCachedRun closes the task's cached run, if it still holds one: the task
// did not commit, or its history is not cached, so the cached run stands
// ahead of (or apart from) any history a later task could give it.
func (r *taskResult) dropCachedRun() {
	r.cachedRun.Close()
	r.cachedRun = nil
}

// note is a notification on channel, with payload.
type note struct{ channel, payload string }

// notify notes a notification to send once the task's transaction commits.
func (r *taskResult) notify(channel, payload string) {
	r.notes = append(r.notes, note{channel: channel, payload: payload})
}

// runTask runs one workflow task in tx, noting in result what interceptors
// are told (meaningful only once tx commits). In a group (result.step),
// its run is locked and its inbox read by the group; a task that does not
// continue a running run leaves the group.
func (w *Worker) runTask(ctx context.Context, tx pgx.Tx, def *replay.Definition, job *river.Job[task.Args], own *ownJob, result *taskResult) error {
	runID := job.Args.RunID
	run, now, inbox, locked, err := result.step.takeLocked()
	switch {
	case locked && (err != nil || run.State != "running"):
		return errRunsAlone
	case !locked:
		run, now, inbox, err = w.lockRun(ctx, tx, runID, true)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		w.config.Logger.WarnContext(ctx, "weir: workflow task for a run that does not exist; completing it", slog.String("run_id", runID.String()))
		return own.finish(ctx, tx, false)
	case err != nil:
		return err
	}
	if run.State != "running" {
		// A task queued before the run closed (terminated, say): nothing to
		// do, and nothing of the run to keep.
		w.histories.forget(runID)
		return own.finish(ctx, tx, false)
	}
	in := &setting{attempt: job.Attempt, apply: alone{}, inbox: inbox, inboxRead: locked, own: own, taskJobID: job.ID}
	if locked {
		in.apply = result.step // its last writes go with the group's COMMIT
	}
	if err := w.advance(ctx, tx, def, run, now, nil, in, result); err != nil {
		if locked && !in.wrote && !errors.Is(err, errRunsAlone) {
			return &stepFailed{err: err} // it fails, as alone, and the group goes on
		}
		return err
	}
	return own.finish(ctx, tx, in.completed)
}

// immutable returns what of the run's row never changes once the run
// started (for the history cache): its identity, kind, queue, args, trace
// and parent; the rest is left zero.
func (run *runRow) immutable() *runRow {
	return &runRow{Run: engine.Run{
		ID: run.ID, HasParent: run.HasParent, Args: run.Args, Generation: run.Generation, Kind: run.Kind, Namespace: run.Namespace,
		Queue: run.Queue, TraceContext: run.TraceContext, WorkflowID: run.WorkflowID,
	}, scanned: true}
}

// lockRun locks a run's row for a workflow task (or an outcome continuing
// the run) and reads it, with the database's time; pgx.ErrNoRows means the
// run does not exist. With inbox (a workflow task), it takes the run's
// inbox (if the run is running) in the same round trip: the inbox
// statement runs after the lock is granted, with a snapshot of its own.
func (w *Worker) lockRun(ctx context.Context, tx pgx.Tx, runID uuid.UUID, inbox bool) (*runRow, time.Time, []engine.InboxItem, error) {
	run := &runRow{Run: engine.Run{ID: runID}}
	var now time.Time
	var taken []engine.InboxItem
	batch := &pgx.Batch{}
	w.store.QueueLockRun(batch, runID, func(row engine.Run, at time.Time, err error) error {
		run.Run, now, run.scanned = row, at, err == nil
		w.clock.observe(now)
		return err
	})
	if inbox {
		w.store.QueueTakeInbox(batch, runID, func(items []engine.InboxItem) { taken = items })
	}
	err := tx.SendBatch(ctx, batch).Close()
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return run, now, nil, err
	case err != nil:
		return nil, now, nil, fmt.Errorf("locking run %s: %w", runID, err)
	}
	return run, now, taken, nil
}

// setting is where a task runs and its writes are applied: alone from its
// job (with the inbox it took), in a group, in the start that inserted its
// run, or as a continuation of an activity's outcome (taskJobID 0; a run
// with no queued task has an empty inbox).
type setting struct {
	attempt   int
	inbox     []engine.InboxItem
	inboxRead bool // inbox was read, not taken: the step's writes delete it
	taskJobID int64

	// own is the job of the task or attempt, whose completion rides with
	// the run's last writes when it can (a claimed job); completed reports
	// whether it did, else the caller completes it.
	own       *ownJob
	completed bool

	// apply is how the step's writes are applied (alone, in a group, with
	// its start), as the caller chose.
	apply applier

	// startCtx is set for a first task running inside the start that
	// inserted its run, which no one else can see yet (so no query waits
	// for it): it bounds the workflow code (not the statements).
	startCtx context.Context

	// wrote is set once the task began writing (appending its events):
	// an error after that leaves tx with partial writes.
	wrote bool
}

// decided is what a step read of its run and decided: the run's history
// as read, the step's inputs and the replay's outcome, whose events the
// step appends.
type decided struct {
	events  [][]history.Event // as pieces (historyCache)
	facts   *engine.Facts
	inputs  []history.Event
	outcome replay.Outcome
}

// advance is the body of a workflow task, on a run locked in tx that is
// running: it moves the inbox (and direct, outcomes handed over by the
// caller) into history, replays the workflow, appends the new events with a
// compare-and-swap on the run's append point and schedules what they ask
// for. The caller completes its own job in tx, fenced, after it.
func (w *Worker) advance(ctx context.Context, tx pgx.Tx, def *replay.Definition, run *runRow, now time.Time, direct []history.Event,
	in *setting, result *taskResult,
) (err error) {
	defer func() {
		result.eager, result.eagerSlots = run.eager, int32(run.eagerSlots)
		if err != nil {
			result.dropCachedRun() // whatever it decided is not committed
		}
	}()
	writes := run.openWrites()
	var d decided
	if ok, err := w.decide(ctx, tx, def, run, now, direct, in, result, &d); err != nil || !ok {
		return err
	}
	st, err := engine.Decide(engine.StepParams{
		Run: run.Run, History: d.events, Facts: d.facts, Appended: d.outcome.Events, Outcome: d.outcome, TaskJobID: in.taskJobID,
		Room: &writes.cas, // its writes are sent before they are opened again
	})
	if err != nil {
		return err
	}
	if err := in.apply.admit(ctx, st, in.own); err != nil {
		if result.step != nil {
			// Its rerun alone, just after the group, takes what it decided.
			outcome := d.outcome
			w.histories.keepDecision(run.ID, run.NextEventID, &decidedTask{inputs: d.inputs, outcome: &outcome, cached: result.cachedRun})
			result.cachedRun = nil
		}
		return err
	}
	in.wrote = true
	// The events go first; the CAS and the rest of st.Writes, last.
	run.step.Events, run.step.Retired = st.Writes.Events, st.Writes.Retired
	if in.inboxRead {
		for _, item := range in.inbox {
			run.step.Taken = append(run.step.Taken, item.ID)
		}
	}
	if err := w.scheduleEvents(ctx, tx, run, d.outcome.Events, d.outcome.Activities); err != nil {
		return err
	}
	result.startedTimer, result.closed = st.StartsTimer, st.Closed
	if st.CancelsOrAnswers {
		if err := w.flushWrites(ctx, tx, run); err != nil {
			return err
		}
		if err := w.cancelJobs(ctx, tx, run.ID, d.outcome.CanceledActivities, d.outcome.CanceledTimers); err != nil {
			return err
		}
		if err := w.answerUpdates(ctx, tx, run.ID, &d.outcome); err != nil {
			return err
		}
	}
	if err := w.sendLast(ctx, tx, run, in, &st, result); err != nil {
		return err
	}
	stageHistory(result, run, d.events, d.outcome.Events, d.outcome.Completed)
	return w.afterLast(ctx, tx, run, &d.outcome, st.Pending)
}

// decide reads the run's history, takes the step's inputs (the inbox it
// took, and direct) and replays the workflow with them, into d. It returns
// false when there is nothing new (a duplicate task, or only outcomes
// history already has), having cleared the run's task.
func (w *Worker) decide(ctx context.Context, tx pgx.Tx, def *replay.Definition, run *runRow, now time.Time, direct []history.Event,
	in *setting, result *taskResult, d *decided,
) (bool, error) {
	events, facts, err := w.history(ctx, tx, run)
	if err != nil {
		return false, err
	}
	result.facts = facts
	d.events, d.facts = events, facts
	var started []history.Event // a first task's: WorkflowStarted, its first input
	if len(events) == 0 {
		e, err := history.NewEvent(0, now, &history.WorkflowStartedAttributes{
			Args: run.Args, Generation: run.Generation, Kind: run.Kind, RunID: run.ID.String(), WorkflowID: run.WorkflowID,
		})
		if err != nil {
			return false, err
		}
		started = []history.Event{e}
	} else if last := lastEvent(events).ID; last != run.NextEventID-1 {
		return false, fmt.Errorf("history of run %s ends at event %d but the run expects %d next", run.ID, last, run.NextEventID)
	}
	// A run with no queued task has an empty inbox: every inbox writer
	// queues a task unless one is queued (and the sweeper repairs a task
	// job deleted by hand).
	if d.inputs, err = engine.NewInputs(ctx, run.ID, events, facts, in.inbox, direct, w.config.Logger); err != nil {
		return false, err
	}
	if started != nil {
		d.inputs = append(started, d.inputs...)
	}
	if len(w.config.Interceptors) > 0 {
		result.signalHeaders = signalHeaders(d.inputs)
	}
	if len(d.inputs) == 0 {
		if result.step != nil {
			return false, errRunsAlone // the job completes on its own
		}
		if in.taskJobID != 0 {
			if err := w.store.ClearTask(ctx, tx, run.ID, in.taskJobID); err != nil {
				return false, fmt.Errorf("clearing task: %w", err)
			}
		}
		return false, nil
	}
	if err := w.replayStep(ctx, def, run, now, in, d, result); err != nil {
		return false, err
	}
	if engine.OnlyBoundary(&d.outcome) {
		// Nothing entered history (every input was rejected, deferred or
		// dropped) and the code did nothing: the task records nothing,
		// so rejected updates cannot grow a history. The cached run has
		// the boundary; it is not the run's history any more.
		d.outcome.Events = nil
		result.dropCachedRun()
	}
	return true, nil
}

// replayStep runs the workflow code on d's history and inputs, into
// d.outcome. Sticky execution: the code as this worker's last task of the
// run left it, if that task's history is still the run's; else a replay of
// the history, keeping the code for the run's next task. A rerun alone of
// an outcome that left its group takes what it decided there, if nothing
// changed since.
func (w *Worker) replayStep(ctx context.Context, def *replay.Definition, run *runRow, now time.Time, in *setting, d *decided,
	result *taskResult,
) error {
	begin := time.Now()
	defer func() { result.replayed = time.Since(begin) }()
	replayCtx := ctx
	if in.startCtx != nil {
		replayCtx = in.startCtx
	}
	params := &replay.ExecuteParams{
		ActivityResultType: w.resultType,
		Codec:              w.config.Codec,
		DeadlockTimeout:    w.config.DeadlockTimeout,
		Info:               replay.Info{TaskAttempt: in.attempt},
		Inputs:             d.inputs,
		Now:                now,
	}
	if decision := w.histories.decision(run.ID, run.NextEventID, d.inputs); decision != nil {
		result.cachedRun = decision.cached
		d.outcome = *decision.outcome
		return nil
	}
	if cachedRun := w.histories.cachedRun(run.ID, run.NextEventID); cachedRun != nil {
		result.cachedRun = cachedRun
		if len(d.events) > 0 {
			params.History = d.events[len(d.events)-1] // a cached run reads only history's last event
		}
		_, err := cachedRun.ContinueInto(replayCtx, params, &d.outcome) // the run's identity is the cached run's
		return err
	}
	params.History = flat(d.events)
	params.Decode, params.Go = d.facts.Decode, w.goroutines.Go
	params.Info.Generation, params.Info.Kind, params.Info.RunID, params.Info.WorkflowID = run.Generation, run.Kind, run.ID.String(), run.WorkflowID
	params.Logger = w.config.Logger // the engine adds the run's kind and IDs
	cachedRun, err := replay.StartInto(replayCtx, def, params, &d.outcome)
	result.cachedRun = cachedRun
	return err
}

// sendLast queues the step's last writes (the CAS, a closing run's
// rejection of pending updates, the first task's look for waiting queries,
// the job's completion) and applies them as the caller chose (in.apply).
func (w *Worker) sendLast(ctx context.Context, tx pgx.Tx, run *runRow, in *setting, st *engine.Step, result *taskResult) (err error) {
	// A run's first task looks for queries waiting for its handlers (unless
	// it runs in its start, before anyone could ask; a group looks once for
	// all of its first tasks), so that a run nobody queried wakes no
	// responder; a query that comes after the look is answered on the
	// responders' next poll. Notifications go once tx commits (settle).
	if run.NextEventID == 1 && in.startCtx == nil && result.step == nil {
		w.queueQueriesWaiting(&run.others.checks, []uuid.UUID{run.ID}, result)
	}
	if st.Closed != "" {
		result.notify(dbschema.Channel(w.names.Schema, dbschema.RunClosedChannel), run.ID.String())
	}
	// Checked in the database (a moved append point divides by zero), so
	// that it fails the batch, and a COMMIT queued behind it, there.
	run.step.CAS, run.step.AbandonUpdates = st.Writes.CAS, st.Writes.AbandonUpdates
	// The job's own completion, fenced, rides in the same round trip; a
	// refusal (the attempt lost its job) fails the batch and so tx.
	if in.completed, err = in.own.queueIn(ctx, run.others); err != nil {
		return err
	}
	// What is written below, after this batch (a superset of it): nothing,
	// and the batch may commit tx too.
	final := (in.own == nil || in.completed) && !st.WritesAfter && !run.inboxed
	return in.apply.applyLast(ctx, tx, w, run, result, final)
}

// queueQueriesWaiting queues the look for queries waiting for the first
// tasks of runs, which result notifies the responders of once it commits.
func (w *Worker) queueQueriesWaiting(batch *pgx.Batch, runs []uuid.UUID, result *taskResult) {
	w.store.QueueQueriesWaiting(batch, runs, func(waiting bool) {
		if waiting {
			result.notify(dbschema.Channel(w.names.Schema, dbschema.QueryChannel), "")
		}
	})
}

// afterLast writes what follows a step's last batch: the next run of a run
// continued as new, the updates deferred back into the inbox with a task
// for them, a closing run's parent and children told and its pending
// activities cleared, a task for what the step put in its own inbox.
func (w *Worker) afterLast(ctx context.Context, tx pgx.Tx, run *runRow, outcome *replay.Outcome, pending engine.Pending) error {
	runID := run.ID
	self := &inbox.Run{ID: runID, Kind: run.Kind, Namespace: run.Namespace, Queue: run.Queue, WorkflowID: run.WorkflowID}
	if outcome.ContinuedAsNew != nil {
		if err := w.continueAsNew(ctx, tx, run, runID, outcome.ContinuedAsNew, outcome.CarriedSignals); err != nil {
			return err
		}
	}
	if len(outcome.DeferredInputs) > 0 && !outcome.Completed {
		// Updates that came before the code could register handlers: back
		// into the inbox, for a task of their own.
		for _, in := range outcome.DeferredInputs {
			var ref struct {
				UpdateID string `json:"update_id"`
			}
			_ = json.Unmarshal(in.Attributes, &ref)
			item := &inbox.Item{Attributes: in.Attributes, DedupKey: inbox.UpdateKey(ref.UpdateID), Type: string(in.Type)}
			if _, err := inbox.Add(ctx, tx, w.store, runID, item); err != nil {
				return fmt.Errorf("deferring update %s: %w", ref.UpdateID, err)
			}
		}
		return inbox.QueueTask(ctx, tx, w.store, w.riverClient, self)
	}
	if outcome.Completed {
		return w.closedRun(ctx, tx, run, pending)
	}
	if !run.inboxed {
		return nil
	}
	// Something this task itself put in the run's inbox (a child that
	// could not start) needs a task of its own.
	waiting, err := w.store.NeedsTask(ctx, tx, runID)
	if err != nil {
		return fmt.Errorf("re-checking inbox: %w", err)
	}
	if waiting {
		return inbox.QueueTask(ctx, tx, w.store, w.riverClient, self)
	}
	return nil
}

// closedRun tells a closed run's parent and children, and clears its
// pending activities.
func (w *Worker) closedRun(ctx context.Context, tx pgx.Tx, run *runRow, pending engine.Pending) error {
	if run.HasParent {
		if err := closing.NotifyParent(ctx, tx, w.store, w.riverClient, run.ID); err != nil {
			return err
		}
	}
	if pending.Children {
		if err := closing.CloseChildren(ctx, tx, w.store, w.riverClient, run.ID); err != nil {
			return err
		}
	}
	if pending.Activities {
		if err := w.store.ClearActivities(ctx, tx, run.ID); err != nil {
			return fmt.Errorf("clearing pending activities: %w", err)
		}
	}
	return nil
}

// startChild starts the run of a child workflow in the parent's task
// transaction, with the guarantees of a start: one live run per workflow ID
// (a live one means the child doesn't start, and the parent learns it), a
// new generation of the child's workflow ID.
func (w *Worker) startChild(ctx context.Context, tx pgx.Tx, run *runRow, runID uuid.UUID, e history.Event) error {
	attrs, err := history.Decode[*history.ChildWorkflowScheduledAttributes](e)
	if err != nil {
		return err
	}
	queue := cmp.Or(attrs.Queue, run.Queue)
	liveRunID, err := w.store.LockLiveRun(ctx, tx, run.Namespace, attrs.WorkflowID)
	switch {
	case err == nil:
		failed, err := json.Marshal(&history.ChildWorkflowFailedAttributes{
			Failure: history.Failure{
				Message: fmt.Sprintf("workflow %s already has a live run %s", attrs.WorkflowID, liveRunID), Type: "WorkflowAlreadyStarted",
			},
			ScheduledEventID: e.ID, State: "not_started",
		})
		if err != nil {
			return err
		}
		item := &inbox.Item{Attributes: failed, DedupKey: closing.ChildKey(e.ID), Type: string(history.EventChildWorkflowFailed)}
		if _, err := inbox.Add(ctx, tx, w.store, runID, item); err != nil {
			return fmt.Errorf("reporting child %s not started: %w", attrs.WorkflowID, err)
		}
		run.inboxed = true
		return nil
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("looking up child workflow %s: %w", attrs.WorkflowID, err)
	}

	childRunID := uuid.New()
	if err := w.store.StartChildRun(ctx, tx, store.ChildRunParams{
		RunID: childRunID, Parent: runID, EventID: e.ID, Namespace: run.Namespace, WorkflowID: attrs.WorkflowID, Kind: attrs.Kind,
		Queue: queue, ParentClosePolicy: attrs.ParentClosePolicy, Args: attrs.Args, RunTimeout: time.Duration(attrs.RunTimeout),
	}); err != nil {
		return fmt.Errorf("starting child workflow %s: %w", attrs.WorkflowID, err)
	}
	if attrs.RunTimeout > 0 {
		if _, err := w.riverClient.InsertTx(ctx, tx, closing.TimeoutArgs{RunID: childRunID}, &river.InsertOpts{
			MaxAttempts: 25, Queue: queue, ScheduledAt: e.Time.Add(time.Duration(attrs.RunTimeout)),
		}); err != nil {
			return fmt.Errorf("scheduling the timeout of child workflow %s: %w", attrs.WorkflowID, err)
		}
	}
	return inbox.QueueTask(ctx, tx, w.store, w.riverClient, &inbox.Run{
		ID: childRunID, Kind: attrs.Kind, Namespace: run.Namespace, Queue: queue, WorkflowID: attrs.WorkflowID,
	})
}

// answerUpdates tells the callers of the updates this task rejected or
// completed.
func (w *Worker) answerUpdates(ctx context.Context, tx pgx.Tx, runID uuid.UUID, outcome *replay.Outcome) error {
	for _, rejected := range outcome.RejectedUpdates {
		if err := w.store.AnswerUpdate(ctx, tx, store.AnswerUpdateParams{
			UpdateKey: store.UpdateKey{RunID: runID, UpdateID: rejected.UpdateID}, State: "rejected", Failure: rejected.Failure,
		}); err != nil {
			return err
		}
	}
	for _, e := range outcome.Events {
		if e.Type != history.EventUpdateCompleted {
			continue
		}
		attrs, err := history.Decode[*history.UpdateCompletedAttributes](e)
		if err != nil {
			return err
		}
		if err := w.store.AnswerUpdate(ctx, tx, store.AnswerUpdateParams{
			UpdateKey: store.UpdateKey{RunID: runID, UpdateID: attrs.UpdateID}, State: "completed", Result: attrs.Result, Failure: attrs.Failure,
		}); err != nil {
			return err
		}
	}
	return nil
}

// continueAsNew starts the next run of the workflow ID, in the same
// transaction that closes this one: generation + 1, a new run ID, the same
// namespace, queue and execution deadline, and the new args.
func (w *Worker) continueAsNew(ctx context.Context, tx pgx.Tx, run *runRow, runID uuid.UUID, next *history.WorkflowContinuedAsNewAttributes,
	carried []*history.SignalReceivedAttributes,
) error {
	nextRunID := uuid.New()
	if err := w.store.StartNextRun(ctx, tx, runID, nextRunID, next.Kind, next.Args); err != nil {
		return fmt.Errorf("starting the next run of workflow %s: %w", run.WorkflowID, err)
	}
	// Signals the run received and never took go on to the next run.
	for i, signal := range carried {
		attrs, err := json.Marshal(signal)
		if err != nil {
			return err
		}
		item := &inbox.Item{Attributes: attrs, DedupKey: fmt.Sprintf("carried:%d", i), Type: string(history.EventSignalReceived)}
		if _, err := inbox.Add(ctx, tx, w.store, nextRunID, item); err != nil {
			return fmt.Errorf("carrying signals to the next run of workflow %s: %w", run.WorkflowID, err)
		}
	}
	// Signals still waiting in this run's inbox follow too.
	if err := w.store.MoveSignals(ctx, tx, runID, nextRunID); err != nil {
		return fmt.Errorf("moving waiting signals to the next run of workflow %s: %w", run.WorkflowID, err)
	}
	return inbox.QueueTask(ctx, tx, w.store, w.riverClient, &inbox.Run{
		ID: nextRunID, Kind: next.Kind, Namespace: run.Namespace, Queue: run.Queue, WorkflowID: run.WorkflowID,
	})
}

// scheduleEvents does what a step's events ask for: an ActivityScheduled
// event inserts the activity's River job; a timer or a child, which write
// at once, send what the step queued first. Activities are the step's
// outcome's, whose attributes its ActivityScheduled events encode.
func (w *Worker) scheduleEvents(ctx context.Context, tx pgx.Tx, run *runRow, events []history.Event, activities []replay.ScheduledActivity) error {
	for _, e := range events {
		switch e.Type {
		case history.EventActivityScheduled:
			var attrs *history.ActivityScheduledAttributes
			if len(activities) > 0 && activities[0].EventID == e.ID {
				attrs, activities = activities[0].Attributes, activities[1:]
			}
			if err := w.scheduleActivity(ctx, tx, run, run.ID, e, attrs); err != nil {
				return err
			}
		case history.EventTimerStarted, history.EventChildWorkflowScheduled:
			if err := w.flushWrites(ctx, tx, run); err != nil {
				return fmt.Errorf("appending events %d to %d: %w", events[0].ID, events[len(events)-1].ID, err)
			}
			start := w.startTimer
			if e.Type == history.EventChildWorkflowScheduled {
				start = w.startChild
			}
			if err := start(ctx, tx, run, run.ID, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// flushWrites sends the writes the step queued (run.step, then run.others)
// in one round trip.
func (w *Worker) flushWrites(ctx context.Context, tx pgx.Tx, run *runRow) error {
	batch := w.takeWrites(run)
	run.openWrites() // the step goes on
	if batch.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, batch).Close()
}

// takeWrites renders what the step queued into a batch (run.step's writes,
// then the others, each kind one statement, hash-joined when over arrays:
// hashJoined), leaving nothing queued.
func (w *Worker) takeWrites(run *runRow) *pgx.Batch {
	batch := &pgx.Batch{}
	w.store.QueueStep(batch, run.step)
	head := len(batch.QueuedQueries)
	if run.others.queue(batch, w.claims) {
		hashJoined(batch, head, run.others.checks.Len())
	}
	run.step, run.others = nil, nil
	return batch
}

// openWrites gives the step empty writes to queue in: at its start, and
// after it sent what it queued so far and goes on. Once its last writes are
// applied (applier.applyLast), it has none: it writes nothing more. The
// writes its group keeps for it (run.kept) are opened once: what a step
// sent before it goes on is never written in again.
func (run *runRow) openWrites() *stepWrites {
	writes := run.kept
	if run.kept = nil; writes == nil {
		writes = new(stepWrites)
	}
	writes.reset(run.ID)
	run.step, run.others = &writes.step, &writes.others
	return writes
}

// stepWrites are what a step queues its writes in (openWrites), one
// allocation for both.
type stepWrites struct {
	step   engine.StepWrites
	others otherWrites
	cas    engine.CASRoom // step.CAS's, once decided
}

// reset empties w for a step of run runID, keeping the room of the lists a
// step appends to, which hold nothing after.
func (w *stepWrites) reset(runID uuid.UUID) {
	clear(w.step.Activities)
	w.step = engine.StepWrites{RunID: runID, Activities: w.step.Activities[:0], Taken: w.step.Taken[:0]}
	w.others.reset()
	w.cas = engine.CASRoom{}
}

// signalHeaders returns the headers of the signals among inputs that have
// any, for TaskInfo.SignalHeaders.
func signalHeaders(inputs []history.Event) []map[string]string {
	var out []map[string]string
	for _, in := range inputs {
		if in.Type != history.EventSignalReceived {
			continue
		}
		attrs, err := history.Decode[*history.SignalReceivedAttributes](in)
		if err == nil && len(attrs.Headers) > 0 {
			out = append(out, attrs.Headers)
		}
	}
	return out
}
