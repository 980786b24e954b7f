package worker

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/attempt"
	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/fencingclaim"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/workflow"
)

// activityMaxAttemptsUnlimited is the River max_attempts of an activity whose
// retry policy sets no maximum (River's column is a smallint).
const activityMaxAttemptsUnlimited = math.MaxInt16

// activityMeta is weir's entry in an activity job's River metadata,
// {"weir": {"run_id": …, "event": …}}, encoded once: the activity the job
// runs (River's GIN index on metadata finds a run's jobs by run ID, for the
// web UI's attempts list), and how it is retried and timed out, which
// River asks for without a transaction. The run's own fields are read with
// its row (checkPending), or were at hand when the job was claimed.
type activityMeta struct {
	HeartbeatTimeout    history.Duration     `json:"heartbeat,omitempty"`
	Namespace           string               `json:"namespace,omitempty"` // "": the default
	RetryPolicy         *history.RetryPolicy `json:"retry,omitempty"`     // nil: retryPolicyDefault
	RunID               uuid.UUID            `json:"run_id"`
	ScheduledEventID    int64                `json:"event"`
	StartToCloseTimeout history.Duration     `json:"timeout,omitempty"`

	// What the attempt reads of its run.
	Generation   int64             `json:"-"`
	Headers      map[string]string `json:"-"`
	WorkflowID   string            `json:"-"`
	WorkflowKind string            `json:"-"`
}

// activityMetadata is an activity job's River metadata, as far as weir
// reads it (River adds keys of its own).
type activityMetadata struct {
	Weir *activityMeta `json:"weir"`
}

// retryPolicyDefault is the retry policy of an activity whose options set
// none; its metadata leaves it out.
var retryPolicyDefault = history.RetryPolicy{
	BackoffCoefficient: workflow.BackoffCoefficientDefault,
	InitialInterval:    history.Duration(workflow.InitialIntervalDefault),
	MaximumAttempts:    workflow.MaximumAttemptsDefault,
	MaximumInterval:    history.Duration(workflow.MaximumIntervalDefault),
}

// encodeActivityMeta renders meta as an activity job's River metadata:
// json.Marshal(activityMetadata{…}) of it without the defaults, written by
// hand when the retry policy is the default and the namespace is plain.
func encodeActivityMeta(meta *activityMeta) ([]byte, error) {
	retry, namespace := meta.RetryPolicy, meta.Namespace
	if isRetryPolicyDefault(retry) {
		retry = nil
	}
	if namespace == client.NamespaceDefault {
		namespace = ""
	}
	if retry != nil || !plainJSON(namespace) {
		entry := *meta
		entry.RetryPolicy, entry.Namespace = retry, namespace
		return json.Marshal(activityMetadata{Weir: &entry})
	}
	b := append(make([]byte, 0, 96), `{"weir":{`...)
	if meta.HeartbeatTimeout != 0 {
		b = append(append(append(b, `"heartbeat":"`...), time.Duration(meta.HeartbeatTimeout).String()...), `",`...)
	}
	if namespace != "" {
		b = append(append(append(b, `"namespace":"`...), namespace...), `",`...)
	}
	b = append(b, `"run_id":"`...)
	id := meta.RunID
	for i, part := range [...][]byte{id[:4], id[4:6], id[6:8], id[8:10], id[10:]} { // as UUID.MarshalText
		if i > 0 {
			b = append(b, '-')
		}
		b = hex.AppendEncode(b, part)
	}
	b = strconv.AppendInt(append(b, `","event":`...), meta.ScheduledEventID, 10)
	if meta.StartToCloseTimeout != 0 {
		b = append(append(append(b, `,"timeout":"`...), time.Duration(meta.StartToCloseTimeout).String()...), '"')
	}
	return append(b, "}}"...), nil
}

// isRetryPolicyDefault reports whether p is reflect.DeepEqual to
// &retryPolicyDefault.
func isRetryPolicyDefault(p *history.RetryPolicy) bool {
	d := &retryPolicyDefault
	return p != nil && p.NonRetryableErrorTypes == nil && p.InitialInterval == d.InitialInterval &&
		p.BackoffCoefficient == d.BackoffCoefficient && p.MaximumInterval == d.MaximumInterval && p.MaximumAttempts == d.MaximumAttempts
}

// plainJSON reports whether json.Marshal writes s as itself in quotes.
func plainJSON(s string) bool {
	for _, c := range []byte(s) {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// activityMetaOf reads weir's entry from job metadata; nil when the job was
// not scheduled by a workflow (inserted directly, as a plain River job).
func activityMetaOf(metadata []byte) *activityMeta {
	var decoded activityMetadata
	if err := json.Unmarshal(metadata, &decoded); err != nil || decoded.Weir == nil || decoded.Weir.ScheduledEventID == 0 {
		return nil
	}
	meta := decoded.Weir
	if meta.RetryPolicy == nil {
		policy := retryPolicyDefault
		meta.RetryPolicy = &policy
	}
	meta.Namespace = cmp.Or(meta.Namespace, client.NamespaceDefault)
	return meta
}

// rawArgs are River job args that are already JSON.
type rawArgs struct {
	data []byte
	kind string
}

func (a rawArgs) Kind() string                 { return a.kind }
func (a rawArgs) MarshalJSON() ([]byte, error) { return a.data, nil }

// scheduleActivity inserts the River job of the activity an
// ActivityScheduled event asks for, without River uniqueness (so no one
// else's job can stand in for it), and records it as pending. The event's
// attributes are decoded unless attrs, those it was made of, are what
// decoding gives.
func (w *Worker) scheduleActivity(ctx context.Context, tx pgx.Tx, run *runRow, runID uuid.UUID, e history.Event,
	attrs *history.ActivityScheduledAttributes,
) (err error) {
	if attrs == nil || !attrs.RoundTrips() {
		if attrs, err = history.Decode[*history.ActivityScheduledAttributes](e); err != nil {
			return err
		}
	}
	if !json.Valid(attrs.Args) {
		return fmt.Errorf("activity %s (event %d): args must be JSON, as River job args are", attrs.Kind, e.ID)
	}
	maxAttempts := activityMaxAttemptsUnlimited
	if attrs.RetryPolicy != nil && attrs.RetryPolicy.MaximumAttempts > 0 {
		maxAttempts = min(attrs.RetryPolicy.MaximumAttempts, activityMaxAttemptsUnlimited)
	}
	meta := &activityMeta{
		Generation:          run.Generation,
		Headers:             decodeHeaders(run.TraceContext),
		HeartbeatTimeout:    attrs.HeartbeatTimeout,
		Namespace:           run.Namespace,
		RetryPolicy:         attrs.RetryPolicy,
		RunID:               runID,
		ScheduledEventID:    e.ID,
		StartToCloseTimeout: attrs.StartToCloseTimeout,
		WorkflowID:          run.WorkflowID,
		WorkflowKind:        run.Kind,
	}
	metadata, err := encodeActivityMeta(meta)
	if err != nil {
		return fmt.Errorf("encoding activity metadata: %w", err)
	}
	var deadline *time.Time
	if attrs.ScheduleToCloseTimeout > 0 {
		d := e.Time.Add(time.Duration(attrs.ScheduleToCloseTimeout))
		deadline = &d
	}
	jobID, err := w.claimActivity(ctx, tx, run, attrs, maxAttempts, metadata, meta)
	if err != nil {
		return fmt.Errorf("claiming job of activity %s (event %d): %w", attrs.Kind, e.ID, err)
	}
	if jobID == 0 { // not claimed: River fetches it
		inserted, err := w.riverClient.InsertTx(ctx, tx, rawArgs{data: attrs.Args, kind: attrs.Kind}, &river.InsertOpts{
			MaxAttempts: maxAttempts, Metadata: metadata, Priority: attrs.Priority, Queue: attrs.Queue, Tags: attrs.Tags,
		})
		if err != nil {
			return fmt.Errorf("inserting job of activity %s (event %d): %w", attrs.Kind, e.ID, err)
		}
		jobID = inserted.Job.ID
	}
	run.step.Activities = append(run.step.Activities, engine.Activity{ScheduledEventID: e.ID, JobID: jobID, Kind: attrs.Kind, Deadline: deadline})
	return nil
}

// activityWorker runs a weir activity as a River worker.
type activityWorker[A activity.Args, R any] struct {
	river.WorkerDefaults[A]

	activity activity.Activity[A, R]
	encode   func(v any) ([]byte, error) // the worker's codec's, made once for its attempts
	w        *Worker
}

// NextRetry follows the workflow's retry policy; jobs not scheduled by a
// workflow keep River's default.
func (a *activityWorker[A, R]) NextRetry(job *river.Job[A]) time.Time {
	meta := activityMetaOf(job.Metadata)
	if meta == nil || meta.RetryPolicy == nil {
		return time.Time{}
	}
	return time.Now().Add(meta.RetryPolicy.Delay(job.Attempt))
}

// Timeout is the workflow's start-to-close timeout, else the activity's own.
func (a *activityWorker[A, R]) Timeout(job *river.Job[A]) time.Duration {
	return a.timeout(activityMetaOf(job.Metadata))
}

// timeout is the attempt's timeout: the workflow's StartToCloseTimeout, else
// the activity's own.
func (a *activityWorker[A, R]) timeout(meta *activityMeta) time.Duration {
	if meta != nil && meta.StartToCloseTimeout > 0 {
		return time.Duration(meta.StartToCloseTimeout)
	}
	return a.activity.Timeout()
}

// Work runs one attempt. Success records the outcome and completes the job in
// one fenced transaction. A failure that will be retried is River's as usual;
// the final one (last attempt, or a non-retryable error) records the failure
// under the job's row lock, fenced, before River finalizes the job.
func (a *activityWorker[A, R]) Work(ctx context.Context, job *river.Job[A]) error {
	meta := activityMetaOf(job.Metadata)
	if meta == nil {
		_, err := a.execute(ctx, job.Args)
		return err
	}
	if !slices.Contains(a.w.config.Namespaces, meta.Namespace) {
		// Another namespace's activity (its kind registered here too, in a
		// queue this worker serves): hand it back untouched for one of that
		// namespace's workers, so no namespace's data reaches another's.
		return a.w.returns.returnToQueue(job.Queue)
	}
	if err := a.w.checkPending(ctx, meta, job.ID, job.Kind); err != nil {
		return err
	}
	own := &ownJob{id: job.ID, complete: func(ctx context.Context, tx pgx.Tx) error {
		_, err := fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
		return err
	}}
	st := &attempt.State{}
	a.fillState(st, job.ID, job.Kind, job.Attempt, job.MaxAttempts, meta)
	st.CompleteTx = func(ctx context.Context, tx pgx.Tx, result []byte) error {
		return a.completeTx(ctx, tx, st, meta, own, result)
	}
	info, _ := activity.GetInfo(attempt.With(ctx, st))
	return intercept(ctx, a.w.config.Interceptors, &info, Interceptor.InterceptActivity, func(ctx context.Context) error {
		return a.work(ctx, job.Args, meta, st, own)
	})
}

// fillState sets st to what the attempt (of job jobID of kind, attempt
// attemptNum of maxAttempts) reads through package activity, but for its
// CompleteTx.
func (a *activityWorker[A, R]) fillState(st *attempt.State, jobID int64, kind string, attemptNum, maxAttempts int, meta *activityMeta) {
	*st = attempt.State{
		ActivityKind:     kind,
		Attempt:          attemptNum,
		Encode:           a.encode,
		Generation:       meta.Generation,
		Headers:          meta.Headers,
		JobID:            jobID,
		MaxAttempts:      maxAttempts,
		Namespace:        meta.Namespace,
		RunID:            meta.RunID,
		ScheduledEventID: meta.ScheduledEventID,
		WorkflowID:       meta.WorkflowID,
		WorkflowKind:     meta.WorkflowKind,
	}
}

// completeTx is CompleteTx of attempt st (attempt.State): it records
// result and completes the attempt's job in tx.
func (a *activityWorker[A, R]) completeTx(ctx context.Context, tx pgx.Tx, st *attempt.State, meta *activityMeta,
	own *ownJob, result []byte,
) error {
	if err := completeActivityTx(ctx, tx, a.w, st.Attempt, meta, result, own, nil); err != nil {
		return err
	}
	st.Completed = true
	return nil
}

// work runs the attempt st of the activity with args, then records its
// outcome.
func (a *activityWorker[A, R]) work(ctx context.Context, args A, meta *activityMeta, st *attempt.State, own *ownJob) error {
	jobID, kind := st.JobID, st.ActivityKind
	// The fencing layer recovers an attempt whose code ignores its context
	// past its own timeouts as it recovers one whose process died, not only
	// after River's job timeout plus its stuck threshold; untold, the
	// attempt runs under River's deadline alone.
	limits := fencing.AttemptLimits{HeartbeatTimeout: time.Duration(meta.HeartbeatTimeout), HeartbeatsRequired: true, Timeout: a.timeout(meta)}
	if err := fencing.LimitAttempt(ctx, limits); err != nil && !errors.Is(err, fencing.ErrNoLease) {
		a.w.config.Logger.WarnContext(ctx, "weir: telling the fencing layer an activity attempt's timeouts failed", slog.String("error", err.Error()))
	}
	execCtx := attempt.With(ctx, st)
	if meta.HeartbeatTimeout > 0 {
		var stop func()
		execCtx, stop = watchHeartbeats(execCtx, st, time.Duration(meta.HeartbeatTimeout))
		defer stop()
	}
	result, err := a.execute(execCtx, args)
	if own != nil {
		own.slot.free()
	}
	if st.Completed {
		// activity.CompleteTx succeeded inside the activity's transaction,
		// but that transaction may still have failed to commit (a dropped
		// connection, a Postgres restart, a rollback). Only the job's row
		// tells: if this attempt still holds its lease, nothing committed
		// and the attempt must not count as done.
		held, checkErr := a.w.leaseHeld(ctx, nil, jobID)
		switch {
		case checkErr != nil:
			return errors.Join(err, checkErr) // River retries; a committed completion fences the retry out
		case !held:
			return nil // the outcome committed with the job's completion
		case err == nil:
			err = fmt.Errorf("activity %s (job %d) called activity.CompleteTx but its transaction did not commit", kind, jobID)
		}
	}
	switch {
	case err == nil:
	case errors.Is(context.Cause(execCtx), errHeartbeatTimeout):
		err = &workflow.TimeoutError{LastFailure: err, TimeoutType: history.TimeoutHeartbeat}
	case errors.Is(err, context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded):
		// River's per-attempt timeout: the workflow's start-to-close.
		err = &workflow.TimeoutError{LastFailure: err, TimeoutType: history.TimeoutStartToClose}
	}
	if err != nil {
		failure := replay.FailureFromError(err)
		final := st.Attempt >= st.MaxAttempts || nonRetryable(failure, meta.RetryPolicy)
		if !final {
			return err
		}
		// A failure goes alone: it locks its job before its run (leaseHeld),
		// the other way round from a group. It is written past the
		// attempt's deadline (a start-to-close timeout ends the attempt's
		// context), within finalStateTimeout; the job's lease fences it.
		recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalStateTimeout)
		defer cancel()
		if recordErr := a.w.recordOutcome(recordCtx, meta.RunID, true, func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
			return failActivityTx(ctx, tx, a.w, jobID, meta, st.Attempt, err, failure, cont)
		}); recordErr != nil {
			return errors.Join(err, recordErr)
		}
		if st.Attempt >= st.MaxAttempts {
			return err // River discards it
		}
		return river.JobCancel(err)
	}

	payload, err := a.w.config.Codec.Encode(result)
	if err != nil {
		return fmt.Errorf("encoding result of activity %s: %w", kind, err)
	}
	if len(payload) > a.w.config.MaxPayloadBytes {
		// Retrying would produce the same result: fail for good.
		tooLarge := &workflow.ApplicationError{
			Message:      fmt.Sprintf("result of activity %s is %d bytes, the limit is %d", kind, len(payload), a.w.config.MaxPayloadBytes),
			NonRetryable: true,
			Type:         "PayloadTooLarge",
		}
		if err := a.w.recordOutcome(ctx, meta.RunID, true, func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
			return failActivityTx(ctx, tx, a.w, jobID, meta, st.Attempt, tooLarge, replay.FailureFromError(tooLarge), cont)
		}); err != nil {
			return err
		}
		return river.JobCancel(fmt.Errorf("%w: %s", client.ErrPayloadTooLarge, tooLarge.Message))
	}
	return a.w.recordOutcome(ctx, meta.RunID, false, func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
		return completeActivityTx(ctx, tx, a.w, st.Attempt, meta, payload, own, cont)
	})
}

// ownJob is how an attempt completes its own job, fenced, in the
// transaction that records its outcome: River's executor's attempts with
// fencing.CompleteTx, claimed (eager) ones through the driver's claimed
// path, queued with the run's last writes when it can be (setting.own).
type ownJob struct {
	id int64
	// complete completes the job in tx; nil for a claimed job, which
	// claims completes.
	complete func(ctx context.Context, tx pgx.Tx) error
	// slot, if set, is the eager pool's slot the attempt holds, freed once
	// the activity's code has returned, before its outcome is written.
	slot *eagerSlot
	// claims, if set, queues the job's completion (its attempt holds a
	// lease token); nil when it never is.
	claims fencingclaim.Driver
}

// queueIn adds the completion to others if it can; it reports whether it
// did. A nil ownJob adds nothing.
func (j *ownJob) queueIn(ctx context.Context, others *otherWrites) (bool, error) {
	c, ok, err := j.completion(ctx)
	if ok {
		others.completions = append(others.completions, c)
	}
	return ok, err
}

// completion is the job's completion to queue now, if it can be queued.
func (j *ownJob) completion(ctx context.Context) (fencingclaim.Completion, bool, error) {
	if j == nil || j.claims == nil {
		return fencingclaim.Completion{}, false, nil
	}
	c, err := j.claims.Completion(ctx, j.id, time.Now(), nil)
	return c, err == nil, err
}

// finish completes the job in tx, unless completed says a queued completion
// did already. Its worker settles the job: onFinalized need not look it up.
func (j *ownJob) finish(ctx context.Context, tx pgx.Tx, completed bool) error {
	if completed {
		return nil
	}
	ctx = withSettled(ctx, j.id)
	if j.complete == nil {
		return j.claims.SetClaimedStateTx(ctx, tx, riverdriver.JobSetStateCompleted(j.id, time.Now(), nil))
	}
	return j.complete(ctx, tx)
}

// errHeartbeatTimeout is the cause of an attempt's cancellation when it went
// longer than its heartbeat timeout without heartbeating.
var errHeartbeatTimeout = errors.New("activity heartbeat timeout")

// watchHeartbeats cancels the attempt's context with errHeartbeatTimeout once
// it goes longer than timeout without a heartbeat (counting from its start).
func watchHeartbeats(ctx context.Context, st *attempt.State, timeout time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	st.Beat()
	done := make(chan struct{})
	go func() {
		ticker := time.NewTicker(max(timeout/4, time.Millisecond))
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-ticker.C:
				if time.Since(st.LastBeat()) > timeout {
					cancel(errHeartbeatTimeout)
					return
				}
			}
		}
	}()
	return ctx, func() {
		close(done)
		cancel(nil)
	}
}

// execute runs the activity, turning a panic into an error with its stack.
func (a *activityWorker[A, R]) execute(ctx context.Context, args A) (result R, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &workflow.PanicError{Stack: string(debug.Stack()), Value: r}
		}
	}()
	return a.activity.Execute(ctx, args)
}

// completeActivityTx records the result of attempt attemptNum and completes
// the job in tx, fenced.
func completeActivityTx(ctx context.Context, tx pgx.Tx, w *Worker, attemptNum int, meta *activityMeta, result []byte,
	own *ownJob, cont *taskResult,
) error {
	completed, err := w.deliverOutcome(ctx, tx, meta, history.EventActivityCompleted,
		&history.ActivityCompletedAttributes{Attempt: attemptNum, Result: result, ScheduledEventID: meta.ScheduledEventID}, cont, own)
	if err != nil {
		return err
	}
	return own.finish(ctx, tx, completed)
}

// failActivityTx records the final failure of an activity in tx (a timeout
// as ActivityTimedOut, anything else as ActivityFailed), if the
// attempt still holds its job: the job's row stays locked until commit, so
// no recovery can slip in between the check and the write.
func failActivityTx(ctx context.Context, tx pgx.Tx, w *Worker, jobID int64, meta *activityMeta, attemptNum int, cause error, failure *history.Failure,
	cont *taskResult,
) error {
	if held, err := w.leaseHeld(ctx, tx, jobID); err != nil {
		return err
	} else if !held {
		return &fencing.LeaseLostError{Attempt: attemptNum, JobID: jobID, Op: "fail"}
	}
	var outcome any = &history.ActivityFailedAttributes{Attempt: attemptNum, Failure: *failure, ScheduledEventID: meta.ScheduledEventID}
	eventType := history.EventActivityFailed
	var timeout *workflow.TimeoutError
	if errors.As(cause, &timeout) {
		eventType = history.EventActivityTimedOut
		outcome = &history.ActivityTimedOutAttributes{
			Attempt: attemptNum, LastFailure: replay.FailureFromError(timeout.LastFailure), ScheduledEventID: meta.ScheduledEventID, TimeoutType: timeout.TimeoutType,
		}
	}
	_, err := w.deliverOutcome(ctx, tx, meta, eventType, outcome, cont, nil)
	return err
}

// leaseHeld reports whether the attempt whose context is ctx still holds
// job jobID; with tx, it locks the job's row until tx ends, so that no
// recovery can slip in between the check and what tx writes after it.
func (w *Worker) leaseHeld(ctx context.Context, tx pgx.Tx, jobID int64) (bool, error) {
	lease, ok := fencing.LeaseFromContext(ctx)
	if !ok {
		return false, fencing.ErrNoLease
	}
	ref := store.LeaseRef{JobID: jobID, Attempt: lease.Attempt, Token: lease.Token, AttemptedAt: lease.AttemptedAt}
	var db store.DBTX = w.pool
	if tx != nil {
		db = tx
	}
	held, err := w.store.LeaseHeld(ctx, db, ref, tx != nil)
	if err != nil {
		return false, fmt.Errorf("checking lease of job %d: %w", jobID, err)
	}
	return held, nil
}

// nonRetryable reports whether retrying cannot help.
func nonRetryable(failure *history.Failure, policy *history.RetryPolicy) bool {
	if failure.NonRetryable {
		return true
	}
	return policy != nil && slices.Contains(policy.NonRetryableErrorTypes, failure.Type)
}
