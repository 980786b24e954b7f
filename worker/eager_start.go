package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/eagerstart"
	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/lazytx"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/internal/task"
)

// Eager workflow start: a client linked to this worker
// (client.Config.EagerStarter) that starts a run of a workflow the worker
// serves hands the run's first task to the worker (internal/eagerstart), which runs it inside the start's
// transaction, right after the run's row is inserted. The run's first
// events, and the activities they schedule (claimed here, to start once the
// start commits), commit with the run itself: no task job, no fetch, no
// second transaction. If the task fails, the client rolls it back and queues
// the task through River as usual.

// firstTaskTaker takes the first tasks of one workflow kind for a worker.
type firstTaskTaker struct {
	def *replay.Definition
	w   *Worker

	// aheadSkips counts down the starts that do not run their first task
	// ahead after one was declined (aheadSkipsAfterDecline).
	aheadSkips atomic.Int32
}

// aheadSkipsAfterDecline is how many starts of a workflow kind go in two
// round trips after its first task could not run ahead (it writes before its
// last batch: a timer, an activity this worker does not claim): a kind whose
// first tasks always decline runs at most one in that many twice.
const aheadSkipsAfterDecline = 16

// errStartRolledBack is why a first task's results are dropped when the
// start's transaction did not commit.
var errStartRolledBack = errors.New("the start did not commit")

// RunFirstTask implements eagerstart.Taker: the task of a run with no history
// and an empty inbox (nobody else can see the run yet), on the run's row the
// start inserted in tx. Its workflow code gets at most the deadlock check's
// timeout in all (the caller's Start waits for it); the task is declined
// when ctx leaves less than twice that, when the worker is stopping, or
// when its run cache has no room for the run and the start reserved none
// (admitFirst).
func (t *firstTaskTaker) RunFirstTask(ctx context.Context, tx pgx.Tx, r *eagerstart.Run) (func(committed bool), error) {
	w := t.w
	budget, ok := t.budget(ctx)
	if !ok {
		return nil, eagerstart.ErrDeclined
	}
	// Tracked like an eager attempt, so that Stop waits for it.
	if !w.eager.begin() {
		return nil, eagerstart.ErrDeclined
	}
	defer w.eager.attempts.Done()
	release, ok := w.admitFirst(r)
	if !ok {
		return nil, eagerstart.ErrDeclined
	}
	replayCtx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()

	var result taskResult
	in := &setting{attempt: 1, apply: alone{commit: r.LastInTx}, startCtx: replayCtx}
	err := w.advance(ctx, tx, t.def, w.startedRun(r), r.Now, nil, in, &result)
	if errors.Is(err, lazytx.ErrCommittedDespiteCallback) {
		// The start committed with the task's last batch: the task is done.
		w.config.Logger.WarnContext(ctx, "weir: first workflow task committed, but reading one of its results failed",
			slog.String("run_id", r.ID.String()), slog.String("error", err.Error()))
		err = nil
	}
	if err != nil {
		w.settleAdmitted(err, &result, release)
		return nil, w.failedInStart(ctx, r.ID, err)
	}
	return w.settleStart(&result, release), nil
}

// startedRun is the run a start just inserted, as its first task reads it;
// the start's time is a reading of the database's clock.
func (w *Worker) startedRun(r *eagerstart.Run) *runRow {
	w.clock.observe(r.Now)
	return newRun(r)
}

// newRun is the run a start inserts, as its first task reads it.
func newRun(r *eagerstart.Run) *runRow {
	return &runRow{
		Run: engine.Run{
			Args: r.Args, Generation: r.Generation, ID: r.ID, Kind: r.Kind, Namespace: r.Namespace, NextEventID: 1, Queue: r.Queue,
			State: "running", TraceContext: r.TraceContext, WorkflowID: r.WorkflowID,
		},
		scanned: true, // all of the row the start inserted (a client's start has no parent)
	}
}

// settleStart is what the start that ran a first task calls once its
// transaction ended: the task's results settle (claimed activities start)
// if it committed.
func (w *Worker) settleStart(result *taskResult, release func()) func(committed bool) {
	return func(committed bool) {
		var err error
		if !committed {
			err = errStartRolledBack
		}
		w.settleAdmitted(err, result, release)
	}
}

// settleAdmitted settles a first task that the run cache admitted, and
// ends its admission (release, from admitFirst).
func (w *Worker) settleAdmitted(err error, result *taskResult, release func()) {
	w.settle(err, result)
	release()
}

// admitFirst admits the first task of r's run into the run cache
// (historyCache.admit) unless its start holds room for the run (Reserve),
// and returns what ends that admission once the task settled: nothing for
// a reserved run, whose start releases its room once it ended.
func (w *Worker) admitFirst(r *eagerstart.Run) (release func(), ok bool) {
	switch {
	case r.Reserved:
		return func() {}, true
	case w.histories.admit():
		return w.histories.release, true
	}
	return nil, false
}

// Reserve implements eagerstart.Taker: room in the run cache for a run
// that a start is about to insert (historyCache.reserve), awaited as a
// fetched task of a run new to the cache awaits it, for at most half of
// TaskTimeout, and only while ctx would still leave the first task its
// budget (budget). A burst of eager starts larger than the cache so waits
// for the runs in flight rather than queue tasks that would wait for the
// same room once fetched.
func (t *firstTaskTaker) Reserve(ctx context.Context) (release func(), ok bool) {
	w := t.w
	switch {
	case w.eager == nil || w.eager.stopping.Load():
		return nil, false
	case w.histories.admit(): // room now: no timer to set
		return w.histories.release, true
	}
	wait := w.config.TaskTimeout / 2
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(deadline)-2*t.budgetLimit())
	}
	if wait <= 0 {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	release, err := w.histories.reserve(ctx)
	return release, err == nil
}

// failedInStart words and logs a first task that failed inside its start,
// before it wrote anything: it goes through River.
func (w *Worker) failedInStart(ctx context.Context, runID uuid.UUID, err error) error {
	err = withStack(fmt.Errorf("workflow task of run %s (in the start, attempt 1): %w", runID, err))
	w.config.Logger.WarnContext(ctx, "weir: first workflow task failed in the start; it goes through River",
		slog.String("run_id", runID.String()), slog.String("error", err.Error()))
	return err
}

// RunFirstTasks implements eagerstart.Taker: the first tasks of a group
// of starts, each as RunFirstTask runs one, in turn, with their last
// writes merged into one batch (as a group of outcomes merges its members',
// groupCommitter) for the caller to send with its COMMIT. A task that fails
// before it wrote anything (its workflow code failed, or ran out of its
// budget) is the caller's to queue through River; one that fails after,
// fails the group. A task that starts a child is declined (it goes through
// River): the child's start lock is taken waiting, and a group must never
// wait for a lock while it holds its starts' locks. So are the tasks left
// when the group's time runs short.
func (t *firstTaskTaker) RunFirstTasks(ctx context.Context, tx pgx.Tx, runs []*eagerstart.Run) (*eagerstart.FirstTasks, error) {
	w := t.w
	out := &eagerstart.FirstTasks{Done: make([]func(bool), len(runs)), Errs: make([]error, len(runs)), Last: &pgx.Batch{}}
	budget, ok := t.budget(ctx)
	if !ok || !w.eager.begin() { // tracked like an eager attempt, so that Stop waits for it
		for i := range runs {
			out.Errs[i] = eagerstart.ErrDeclined
		}
		out.Sent = func() {}
		return out, nil
	}
	defer w.eager.attempts.Done()

	results := make([]*taskResult, len(runs))
	releases := make([]func(), len(runs))
	var afters []func()
	writes := newLastWrites(len(runs))
	// failed settles what the tasks that ran took (eager slots) when the
	// group fails.
	failed := func(err error) {
		for i, result := range results {
			if result != nil {
				w.settleAdmitted(err, result, releases[i])
			}
		}
	}
	for i, r := range runs {
		if _, ok := t.budget(ctx); !ok {
			// The group's time runs short: the rest go through River.
			for j := i; j < len(runs); j++ {
				out.Errs[j] = eagerstart.ErrDeclined
			}
			break
		}
		release, ok := w.admitFirst(r)
		if !ok {
			out.Errs[i] = eagerstart.ErrDeclined // no room: it goes through River
			continue
		}
		result := &taskResult{}
		in, after, err := t.advanceDeferred(ctx, tx, w.startedRun(r), r.Now, budget, &writes, result)
		if after != nil {
			afters = append(afters, after)
		}
		switch {
		case err == nil:
			results[i], releases[i] = result, release
			out.Done[i] = w.settleStart(result, release)
		case in.wrote:
			err = fmt.Errorf("workflow task of run %s (in a group of starts): %w", r.ID, err)
			w.settleAdmitted(err, result, release)
			failed(err)
			return nil, err
		case errors.Is(err, errRunsAlone):
			w.settleAdmitted(err, result, release)
			out.Errs[i] = eagerstart.ErrDeclined
		default:
			w.settleAdmitted(err, result, release)
			out.Errs[i] = w.failedInStart(ctx, r.ID, err)
		}
	}
	w.queueLastWrites(out.Last, &writes, true) // a group of starts asked for generic plans with its lock
	out.Sent = func() {
		for _, after := range afters {
			after()
		}
	}
	return out, nil
}

// A start in one round trip: a start that the taker can run ahead has its
// first task run before it sends anything (RunFirstTaskAhead), at the run's
// first generation and dated by the database's clock as estimated
// (dbClock, as a one-round-trip step dates its events); the start then
// sends its lock, its run's insert (created at that time), a guard and the
// task's writes, with BEGIN and COMMIT, in one batch. The guard fails the
// batch, which rolls all of it back, unless the insert made the run at
// generation 1; the start then goes as before (two round trips), its task
// run again. The task runs on a transaction that sends nothing
// (lazytx.NoSend): one that would write before its last batch (a timer, a
// child, an activity that this worker does not claim) fails, and is
// declined (job IDs for its claims are reserved through the pool). One that fails on its
// own (its workflow code, its budget) is not run again: the start inserts
// the run and queues the task through River with that failure.

// aheadCounts counts the first tasks run ahead of their starts, by how their
// starts ended.
type aheadCounts struct {
	committed  atomic.Int64
	rolledBack atomic.Int64
	declined   atomic.Int64 // not kept: the task could not run ahead
	failed     atomic.Int64 // the task failed (it goes through River)
}

// errAheadSends is why a first task run ahead of its start is declined when
// it would send a statement before its last batch.
var errAheadSends = errors.New("the first task sends a statement before its last batch")

// RunFirstTaskAhead implements eagerstart.Taker.
func (t *firstTaskTaker) RunFirstTaskAhead(ctx context.Context, r *eagerstart.Run) (*eagerstart.FirstTasks, error) {
	w := t.w
	budget, ok := t.budget(ctx)
	if !ok {
		return nil, eagerstart.ErrDeclined
	}
	for n := t.aheadSkips.Load(); n > 0; n = t.aheadSkips.Load() {
		if t.aheadSkips.CompareAndSwap(n, n-1) {
			return nil, eagerstart.ErrDeclined
		}
	}
	now, ok := w.clock.now()
	if !ok {
		return nil, eagerstart.ErrDeclined // the start reads it (ObserveNow)
	}
	if !w.eager.begin() { // tracked like an eager attempt, so that Stop waits for it
		return nil, eagerstart.ErrDeclined
	}
	defer w.eager.attempts.Done()
	release, ok := w.admitFirst(r)
	if !ok {
		return nil, eagerstart.ErrDeclined
	}
	r.Now, r.Generation, r.LastInTx = now, 1, true

	out := &eagerstart.FirstTasks{Done: make([]func(bool), 1), Errs: make([]error, 1), Last: &pgx.Batch{}}
	var result taskResult
	tx := lazytx.NoSend(errAheadSends)
	var writes lastWrites
	_, after, err := t.advanceDeferred(ctx, tx, newRun(r), now, budget, &writes, &result)
	declined := tx.Tried() || errors.Is(err, errRunsAlone)
	if err == nil && (declined || after == nil) {
		err, declined = errAheadSends, true // cannot happen: it would have failed, or its writes been sent
	}
	if err != nil {
		w.settleAdmitted(err, &result, release)
		if declined {
			// Not the task's failure: the start goes as before and runs
			// the task again.
			w.ahead.declined.Add(1)
			t.aheadSkips.Store(aheadSkipsAfterDecline)
			return nil, eagerstart.ErrDeclined
		}
		w.ahead.failed.Add(1)
		return nil, &eagerstart.FailedAheadError{Err: w.failedInStart(ctx, r.ID, err)}
	}
	foldRunWrite(r, &writes)
	w.queueLastWrites(out.Last, &writes, true) // the start asked for generic plans
	settle := w.settleStart(&result, release)
	out.Done[0] = func(committed bool) {
		if committed {
			w.ahead.committed.Add(1)
		} else {
			w.ahead.rolledBack.Add(1)
		}
		settle(committed)
	}
	out.Sent = after
	return out, nil
}

// foldRunWrite moves the write of a first task run ahead to its run's row
// (its CAS) into the start's insert, when all it does is advance the append
// point from an empty history: the start inserts the run at the append
// point the task leaves (r.NextEventID). The CAS is moot there: the run is
// the batch's own insert, under the start's lock, invisible to any other
// transaction until the COMMIT, and the start's guard fails the batch
// unless that insert made it at generation 1. A task that closes its run
// keeps its CAS.
func foldRunWrite(r *eagerstart.Run, writes *lastWrites) {
	if len(writes.steps) != 1 {
		return
	}
	step := writes.steps[0]
	if c := step.CAS; c != nil && c.Close == nil && c.Found == 1 && c.ClearTask == 0 && step.RunID == r.ID {
		r.NextEventID, step.CAS = c.Next, nil
	}
}

// budget is the time a first task's workflow code gets in all (the deadlock
// check's timeout), and whether ctx leaves at least twice that.
func (t *firstTaskTaker) budget(ctx context.Context) (time.Duration, bool) {
	budget := t.budgetLimit()
	deadline, ok := ctx.Deadline()
	return budget, !ok || time.Until(deadline) >= 2*budget
}

// budgetLimit is the time a first task's workflow code gets in all.
func (t *firstTaskTaker) budgetLimit() time.Duration {
	return cmp.Or(t.w.config.DeadlockTimeout, replay.DeadlockTimeoutDefault)
}

// advanceDeferred runs run's first task within budget, as the task of a
// start that commits right after it, its last writes appended to last (for
// the caller to send with its COMMIT); after is what to do once they ran
// (nil when the task did not get that far).
func (t *firstTaskTaker) advanceDeferred(ctx context.Context, tx pgx.Tx, run *runRow, now time.Time, budget time.Duration,
	last *lastWrites, result *taskResult,
) (in *setting, after func(), err error) {
	replayCtx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	in = &setting{attempt: 1, apply: startLast{last: last, after: &after}, startCtx: replayCtx}
	err = t.w.advance(ctx, tx, t.def, run, now, nil, in, result)
	return in, after, err
}

// ObserveNow implements eagerstart.Taker.
func (t *firstTaskTaker) ObserveNow(now time.Time) { t.w.clock.observe(now) }

// FirstTaskTaker implements client.EagerStarter: it returns what runs the
// first tasks of key (a workflow this worker serves, in a namespace and
// queue it serves, in its schema) while the worker is started with eager
// dispatch on, else nil.
func (w *Worker) FirstTaskTaker(key eagerstart.Key) eagerstart.Taker {
	if takers := w.takers.Load(); takers != nil {
		return (*takers)[key]
	}
	return nil
}

// firstTaskTakers are the worker's takers of first tasks, by what they take.
//
// A worker with the deadlock check off takes none: the first task runs in
// the client's Start call, which workflow code that blocks must not hold
// for longer than the check allows.
func (w *Worker) firstTaskTakers() map[eagerstart.Key]eagerstart.Taker {
	takers := map[eagerstart.Key]eagerstart.Taker{}
	if w.config.DeadlockTimeout < 0 {
		return takers
	}
	for kind, def := range w.workflows {
		taker := &firstTaskTaker{def: def, w: w}
		for _, namespace := range w.config.Namespaces {
			for queue := range w.config.Queues {
				takers[eagerstart.Key{Schema: w.names.Schema, Queue: queue, Kind: task.Kind(namespace, kind)}] = taker
			}
		}
	}
	return takers
}
