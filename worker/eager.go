package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/attempt"
	"github.com/weirhq/weir/internal/fencingclaim"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/store"
)

// Eager dispatch: a workflow task (or an activity outcome continuing a run)
// that schedules an activity this worker can run inserts the activity's
// River job already running, claimed by this worker under a fenced lease,
// in the same transaction; once that commits the worker runs the activity
// at once, without the job going through River's fetch. The job is still a
// River job row with River's retries: a failed attempt is written back as
// retryable (or discarded, or cancelled) through the fenced path, and if
// the worker dies the lease expires and the reaper hands the job to River.

// finalStateTimeout bounds the write of a claimed attempt's final state
// once its work is over, even if the worker is stopping.
const finalStateTimeout = 10 * time.Second

// claimedRunner runs a claimed activity attempt to its end; it gives the
// attempt's slot back to slots once the activity's code has returned (the
// slot is free then, while its outcome is still being written), and by its
// own return at the latest.
type claimedRunner func(ctx context.Context, claim *fencingclaim.Claim, meta *activityMeta, slots *claimedPool)

// eagerSlot is a claimed attempt's slot in its pool.
type eagerSlot struct {
	pool  *claimedPool
	freed atomic.Bool
}

// free gives the slot back, once; a nil slot is none.
func (s *eagerSlot) free() {
	if s != nil && s.freed.CompareAndSwap(false, true) {
		s.pool.release(1)
	}
}

// claimedAttempt is an activity claimed in a transaction, to run once it commits.
type claimedAttempt struct {
	claim *fencingclaim.Claim
	meta  *activityMeta
	run   claimedRunner
	ended func() // if not nil, called once the attempt ended (historyCache.claimEnded)
}

// claimedPool bounds and tracks the attempts a worker runs eagerly.
type claimedPool struct {
	cancel   context.CancelFunc
	ctx      context.Context
	slots    chan struct{}
	stopping atomic.Bool
	attempts sync.WaitGroup // running attempts
	closed   bool           // stop is waiting for attempts: launch no more (under launchMu)
	launchMu sync.RWMutex
	wg       sync.WaitGroup // the listener

	mu      sync.Mutex
	running map[int64]context.CancelCauseFunc // by job ID
}

func newEagerPool(w *Worker, size int) *claimedPool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &claimedPool{cancel: cancel, ctx: ctx, running: make(map[int64]context.CancelCauseFunc), slots: make(chan struct{}, size)}
	p.wg.Add(1)
	go p.listen(w)
	return p
}

// track makes a running attempt cancellable by River's job control (a
// cancel of its job, e.g. the workflow cancelled the activity) until
// untrack.
func (p *claimedPool) track(jobID int64, cancel context.CancelCauseFunc) {
	p.mu.Lock()
	p.running[jobID] = cancel
	p.mu.Unlock()
}

func (p *claimedPool) untrack(jobID int64) {
	p.mu.Lock()
	delete(p.running, jobID)
	p.mu.Unlock()
}

// cancelJob cancels the attempt of jobID, if it runs here, as River's
// producer cancels a fetched one.
func (p *claimedPool) cancelJob(jobID int64) {
	p.mu.Lock()
	cancel := p.running[jobID]
	p.mu.Unlock()
	if cancel != nil {
		cancel(rivertype.ErrJobCancelledRemotely)
	}
}

// listen delivers River's job cancellations (Client.JobCancel, which weir
// uses to cancel activities) to the attempts running here: it LISTENs on
// River's control channel, as River's producers do for fetched jobs.
func (p *claimedPool) listen(w *Worker) {
	defer p.wg.Done()
	w.listen(p.ctx, "eager activities' cancel listener lost its connection; reconnecting",
		func(ctx context.Context, conn *pgx.Conn) ([]string, error) {
			channel, err := w.store.RiverChannel(ctx, conn, store.RiverControlTopic)
			return []string{channel}, err
		},
		func(n *pgconn.Notification) {
			var control struct {
				Action string `json:"action"`
				JobID  int64  `json:"job_id"`
			}
			if n != nil && json.Unmarshal([]byte(n.Payload), &control) == nil && control.Action == "cancel" {
				p.cancelJob(control.JobID)
			}
		})
}

// acquire takes a slot if one is free and the pool is not stopping.
func (p *claimedPool) acquire() bool {
	if p == nil || p.stopping.Load() {
		return false
	}
	select {
	case p.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (p *claimedPool) release(n int) {
	for range n {
		<-p.slots
	}
}

// stop lets running attempts finish until ctx ends, then cancels them and
// waits for them to write their state; then it stops the cancel listener.
func (p *claimedPool) stop(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.stopping.Store(true)
	p.launchMu.Lock()
	p.closed = true
	p.launchMu.Unlock()
	finished := make(chan struct{})
	go func() {
		p.attempts.Wait()
		close(finished)
	}()
	var err error
	select {
	case <-finished:
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.cancel() // the attempts still running, and the listener
	<-finished
	p.wg.Wait()
	return err
}

// eagerRunnerFor returns how to run an activity of kind in queue eagerly,
// or nil when this worker does not (not its activity, not its queue, eager
// dispatch off or stopping).
func (w *Worker) eagerRunnerFor(kind, queue string) claimedRunner {
	if w.eager == nil {
		return nil
	}
	if _, ok := w.config.Queues[cmp.Or(queue, river.QueueDefault)]; !ok {
		return nil
	}
	return w.eagerRunners[kind]
}

// begin tracks work the pool's stop must wait for (a first task running in
// a client's start), unless the pool is stopping or off; the caller ends it
// with attempts.Done.
func (p *claimedPool) begin() bool {
	if p == nil {
		return false
	}
	p.launchMu.RLock()
	defer p.launchMu.RUnlock()
	if p.closed || p.stopping.Load() {
		return false
	}
	p.attempts.Add(1)
	return true
}

// launchEager starts the attempts a committed transaction claimed. Once the
// pool is stopping and waits for its attempts, it hands them back to River
// instead.
func (w *Worker) launchEager(starts []claimedAttempt) {
	p := w.eager
	p.launchMu.RLock()
	closed := p.closed
	if !closed {
		p.attempts.Add(len(starts))
	}
	p.launchMu.RUnlock()
	for _, s := range starts {
		if s.ended == nil {
			s.ended = func() {}
		}
		if closed {
			w.handBack(s.claim)
			p.release(1)
			s.ended()
			continue
		}
		// A goroutine of its own, not one of w.goroutines: activity code may
		// leave its goroutine changed (runtime.LockOSThread on a thread it
		// altered, pprof labels), which must not reach the next function.
		go func() {
			defer p.attempts.Done()
			defer s.ended()
			s.run(p.ctx, s.claim, s.meta, p)
		}()
	}
}

// handBack gives a claimed job that will not run here back to River, as
// River's executor gives back a snoozed one: available at once, the attempt
// not counted. Should that fail, the lease expires and River runs it then.
func (w *Worker) handBack(claim *fencingclaim.Claim) {
	ctx, cancel := context.WithTimeout(context.Background(), finalStateTimeout)
	defer cancel()
	err := w.claims.WorkClaimed(ctx, claim, time.Time{}, func(ctx context.Context, _ context.CancelCauseFunc) error {
		return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error { // attempt 1, not counted
			return w.claims.SetClaimedStateTx(ctx, tx, riverdriver.JobSetStateSnoozedAvailable(claim.ID, time.Now(), 0, nil))
		})
	})
	if err != nil {
		w.config.Logger.Warn("weir: handing a claimed job back to River failed; it runs once its lease expires",
			"job_id", claim.ID, "kind", claim.Kind, "error", err.Error())
	}
}

// afterTx launches the attempts that a transaction claimed if it committed
// (err nil), and frees the slots it took if it did not.
func (w *Worker) afterTx(err error, starts []claimedAttempt, slots int) {
	if slots == 0 {
		return
	}
	if err != nil {
		w.eager.release(slots)
		return
	}
	if extra := slots - len(starts); extra > 0 {
		w.eager.release(extra) // cannot happen once the writes ran; never leak a slot
	}
	w.launchEager(starts)
}

// claimActivity queues in run.others the insert of an activity's job
// already claimed by this worker, noted in run for launch after commit, if
// the activity can run here now; it returns the job's ID (reserved by this
// worker) if it did, 0 if not (the job must go through River).
func (w *Worker) claimActivity(ctx context.Context, tx pgx.Tx, run *runRow, attrs *history.ActivityScheduledAttributes, maxAttempts int, metadata []byte, meta *activityMeta) (int64, error) {
	runner := w.eagerRunnerFor(attrs.Kind, attrs.Queue)
	if runner == nil || len(attrs.Tags) > 0 || !w.eager.acquire() { // a claim carries no tags: River inserts it
		return 0, nil
	}
	run.eagerSlots++
	id, err := w.jobIDs.take(ctx, tx)
	if err != nil {
		return 0, err
	}
	run.others.claims = append(run.others.claims, fencingclaim.Request{Params: fencingclaim.Params{
		Args: attrs.Args, AttemptedBy: w.riverClient.ID(), ID: id, Kind: attrs.Kind, MaxAttempts: maxAttempts, Metadata: metadata,
		Priority: attrs.Priority, Queue: cmp.Or(attrs.Queue, river.QueueDefault), Schema: w.config.Schema,
	}, Done: func(claim *fencingclaim.Claim) {
		run.eager = append(run.eager, claimedAttempt{claim: claim, meta: meta, run: runner})
	}})
	return id, nil
}

// claimedRun is a claimed attempt of an activity as runClaimed runs it: its
// claim and args, its slot, how it completes its job and what its code
// reads through package activity, allocated as one.
type claimedRun[A activity.Args, R any] struct {
	a        *activityWorker[A, R]
	claim    *fencingclaim.Claim
	args     A
	meta     *activityMeta
	deadline time.Time // zero: none
	slot     eagerSlot
	own      ownJob
	state    attempt.State
}

// runClaimed runs a claimed attempt of the activity as River's executor
// would run a fetched one: with the activity's timeout, cancellable by
// River's job control, its panics recovered, then the attempt's outcome
// written through the fenced path (a failure back to River, to be retried).
func (a *activityWorker[A, R]) runClaimed(ctx context.Context, claim *fencingclaim.Claim, meta *activityMeta, slots *claimedPool) {
	r := &claimedRun[A, R]{a: a, claim: claim, meta: meta, slot: eagerSlot{pool: slots}}
	defer r.slot.free()
	// An activity without a timeout of its own has River's JobTimeout for
	// this worker's client.
	if timeout := cmp.Or(a.timeout(meta), a.w.config.TaskTimeout); timeout > 0 {
		r.deadline = time.Now().Add(timeout)
	}
	err := a.w.claims.WorkClaimed(ctx, claim, r.deadline, r.work)
	// A lost lease, or a failure written after the attempt completed its
	// job (which stays completed), is no failure River retries.
	if err != nil && !errors.Is(err, fencing.ErrLeaseLost) && !errors.Is(err, fencing.ErrAlreadyCompleted) {
		a.w.config.Logger.WarnContext(ctx, "weir: eager activity attempt failed; River retries it",
			"job_id", claim.ID, "kind", claim.Kind, "error", err.Error())
	}
}

// work is the attempt's work in its attempt context (WorkClaimed): the
// activity under its deadline, then a failure's state written.
func (r *claimedRun[A, R]) work(attemptCtx context.Context, cancelAttempt context.CancelCauseFunc) error {
	w := r.a.w
	w.eager.track(r.claim.ID, cancelAttempt)
	defer w.eager.untrack(r.claim.ID)
	workCtx := attemptCtx
	if !r.deadline.IsZero() {
		var cancel context.CancelFunc
		workCtx, cancel = fencing.WithAttemptDeadline(attemptCtx, r.deadline)
		defer cancel()
	}
	err := r.execute(workCtx)
	if err == nil {
		return nil
	}
	if cause := context.Cause(attemptCtx); errors.Is(cause, rivertype.ErrJobCancelledRemotely) {
		err = river.JobCancel(cause)
	}
	job := &river.Job[A]{JobRow: r.claim.Row(), Args: r.args}
	return w.failClaimed(attemptCtx, job.JobRow, err, r.a.NextRetry(job))
}

// execute decodes the attempt's args, runs the activity's code and records
// its outcome (activityWorker.work), a panic turned into an error.
func (r *claimedRun[A, R]) execute(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("activity %s (job %d) panicked: %v", r.claim.Kind, r.claim.ID, p)
		}
	}()
	if err := json.Unmarshal(r.claim.Args, &r.args); err != nil {
		return fmt.Errorf("decoding args of activity %s (job %d): %w", r.claim.Kind, r.claim.ID, err)
	}
	// A claimed job is completed through the driver's claimed path, queued
	// with the run's last writes when its outcome continues the run.
	r.own = ownJob{id: r.claim.ID, claims: r.a.w.claims, slot: &r.slot}
	r.a.fillState(&r.state, r.claim.ID, r.claim.Kind, 1, r.claim.MaxAttempts, r.meta)
	r.state.CompleteTx = r.completeTx
	return r.a.work(ctx, r.args, r.meta, &r.state, &r.own)
}

// completeTx is the attempt's CompleteTx (attempt.State).
func (r *claimedRun[A, R]) completeTx(ctx context.Context, tx pgx.Tx, result []byte) error {
	return r.a.completeTx(ctx, tx, &r.state, r.meta, &r.own, result)
}

// failClaimed writes the state a claimed attempt that returned workErr
// leaves its job in, as River's executor would: cancelled for river.JobCancel,
// discarded past its last attempt, else retryable at nextRetry (River's
// default policy when zero).
func (w *Worker) failClaimed(ctx context.Context, job *rivertype.JobRow, workErr error, nextRetry time.Time) error {
	now := time.Now()
	errData, err := json.Marshal(&rivertype.AttemptError{At: now.UTC(), Attempt: job.Attempt, Error: workErr.Error()})
	if err != nil {
		return err
	}
	var (
		params    *riverdriver.JobSetStateIfRunningParams
		cancelErr *rivertype.JobCancelError
	)
	switch {
	case errors.As(workErr, &cancelErr):
		params = riverdriver.JobSetStateCancelled(job.ID, now, errData, nil)
	case job.Attempt >= job.MaxAttempts:
		params = riverdriver.JobSetStateDiscarded(job.ID, now, errData, nil)
	default:
		if nextRetry.IsZero() {
			nextRetry = (&river.DefaultClientRetryPolicy{}).NextRetry(job)
		}
		params = failRetry(job.ID, now, nextRetry, errData)
	}
	writeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalStateTimeout)
	defer cancel()
	if err := pgx.BeginFunc(writeCtx, w.pool, func(tx pgx.Tx) error {
		return w.claims.SetClaimedStateTx(writeCtx, tx, params)
	}); err != nil {
		return errors.Join(workErr, err)
	}
	if params.State == rivertype.JobStateAvailable {
		w.returns.announce(job.Queue, *params.ScheduledAt)
	}
	return nil
}

// riverSchedulerInterval is River's JobSchedulerIntervalDefault: how often
// its leader makes due retryable jobs available.
const riverSchedulerInterval = 5 * time.Second

// failRetry is the state a failed attempt retried at nextRetry leaves its
// job in, as River's executor writes it: retryable (made available by
// River's scheduler) unless the retry is due within one scheduler interval,
// then available at once, scheduled at nextRetry, so that it runs when
// due and not at the scheduler's next tick.
func failRetry(jobID int64, now, nextRetry time.Time, errData []byte) *riverdriver.JobSetStateIfRunningParams {
	if nextRetry.Sub(now) <= riverSchedulerInterval {
		return riverdriver.JobSetStateErrorAvailable(jobID, nextRetry, errData, nil)
	}
	return riverdriver.JobSetStateErrorRetryable(jobID, nextRetry, errData, nil)
}
