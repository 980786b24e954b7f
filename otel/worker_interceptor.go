package otel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// reapedErrorPrefix starts the error the fencing reaper records on a job
// whose lease expired.
const reapedErrorPrefix = "fencing: lease of attempt"

// taskKindPrefix starts the River job kind of a workflow task.
const taskKindPrefix = "weir.workflow:"

// WorkerInterceptor traces and measures a worker's workflow tasks and
// activity attempts: each is a span (WorkflowTask:<kind>, Activity:<kind>)
// in the trace of its run, a child of the run's start span. Its
// FencingObserver puts lease events on those spans. Install both with
// InstallWorker.
//
// For each attempt it reads the attempt's River job once (by primary key),
// for its queue and its schedule-to-start and schedule-to-close times.
type WorkerInterceptor struct {
	attempts *attempts
	fencing  *FencingObserver
	meter    metric.Meter
	tracer   trace.Tracer

	activityAttempts        metric.Int64Counter
	activityExecution       metric.Float64Histogram
	activityScheduleToClose metric.Float64Histogram
	activityScheduleToStart metric.Float64Histogram
	taskAttempts            metric.Int64Counter
	taskDuration            metric.Float64Histogram
	taskReplay              metric.Float64Histogram
	taskScheduleToStart     metric.Float64Histogram
	workflowClosed          metric.Int64Counter
	workflowDuration        metric.Float64Histogram
}

// NewWorkerInterceptor returns a WorkerInterceptor reporting to tp and mp; a
// nil provider means no-op.
func NewWorkerInterceptor(tp trace.TracerProvider, mp metric.MeterProvider) (*WorkerInterceptor, error) {
	tracer, meter := providers(tp, mp)
	in := &instruments{meter: meter}
	w := &WorkerInterceptor{
		attempts: newAttempts(),
		meter:    meter,
		tracer:   tracer,

		activityAttempts:        in.counter(MetricActivityAttempts, "{attempt}", "Activity attempts, by outcome."),
		activityExecution:       in.seconds(MetricActivityExecution, "Time an activity attempt ran, by outcome."),
		activityScheduleToClose: in.seconds(MetricActivityScheduleToClose, "Time from scheduling an activity to its final outcome, across attempts."),
		activityScheduleToStart: in.seconds(MetricActivityScheduleToStart, "Time an activity attempt waited to start since it was due."),
		taskAttempts:            in.counter(MetricTaskAttempts, "{attempt}", "Workflow task attempts, by outcome."),
		taskDuration:            in.seconds(MetricTaskDuration, "Time a workflow task took: loading and replaying history, and committing."),
		taskReplay:              in.seconds(MetricTaskReplay, "Time a workflow task spent replaying history and running workflow code."),
		taskScheduleToStart:     in.seconds(MetricTaskScheduleToStart, "Time a workflow task waited to start since it was due."),
		workflowClosed:          in.counter(MetricWorkflowClosed, "{run}", "Runs closed by their workflow code, by weir.state (completed, failed, cancelled, continued_as_new)."),
		workflowDuration:        in.seconds(MetricWorkflowDuration, "Time from a run's start to its close by its workflow code, end to end, by weir.state."),
	}
	if in.err != nil {
		return nil, fmt.Errorf("otel: creating worker instruments: %w", in.err)
	}
	observer, err := newFencingObserver(tracer, meter, w.attempts)
	if err != nil {
		return nil, err
	}
	w.fencing = observer
	return w, nil
}

// InstallWorker adds a WorkerInterceptor reporting to tp and mp to config's
// interceptors (outermost) and its FencingObserver to config.Fencing (after
// any observer already there).
func InstallWorker(config *worker.Config, tp trace.TracerProvider, mp metric.MeterProvider) error {
	w, err := NewWorkerInterceptor(tp, mp)
	if err != nil {
		return err
	}
	config.Interceptors = append([]worker.Interceptor{w}, config.Interceptors...)
	var fencingConfig fencing.Config
	if config.Fencing != nil {
		fencingConfig = *config.Fencing
	}
	fencingConfig.Observer = chainObservers(fencingConfig.Observer, w.FencingObserver())
	config.Fencing = &fencingConfig
	return nil
}

// FencingObserver returns the observer that counts lease events and puts
// them on this interceptor's attempt spans. Set it as the worker's
// fencing.Config.Observer (InstallWorker does).
func (w *WorkerInterceptor) FencingObserver() *FencingObserver { return w.fencing }

// InterceptTask runs a workflow task in a span. History is replayed in
// memory, so a task is one span however much past work it replays.
func (w *WorkerInterceptor) InterceptTask(ctx context.Context, info *worker.TaskInfo, next func(context.Context) error) error {
	job := jobRow(ctx, info.JobID)
	attrs := []attribute.KeyValue{
		AttrWorkflowKind.String(info.Kind),
		AttrWorkflowID.String(info.WorkflowID),
		AttrRunID.String(info.RunID.String()),
		AttrAttempt.Int(info.Attempt),
		AttrJobID.Int64(info.JobID),
	}
	if info.Generation > 0 {
		attrs = append(attrs, AttrGeneration.Int64(info.Generation))
	}
	metricAttrs := []attribute.KeyValue{AttrWorkflowKind.String(info.Kind)}
	if job != nil {
		attrs = append(attrs, AttrQueue.String(job.Queue))
		metricAttrs = append(metricAttrs, AttrQueue.String(job.Queue))
		if namespace, ok := taskNamespace(job.Kind); ok {
			attrs = append(attrs, AttrNamespace.String(namespace))
			metricAttrs = append(metricAttrs, AttrNamespace.String(namespace))
		}
		if job.AttemptedAt != nil {
			w.taskScheduleToStart.Record(ctx, max(job.AttemptedAt.Sub(job.ScheduledAt), 0).Seconds(), metric.WithAttributes(metricAttrs...))
		}
	}
	key := attemptKey{attempt: info.Attempt, jobID: info.JobID}
	ctx, live := w.startAttempt(ctx, "WorkflowTask:"+info.Kind, info.Headers, info.RunID, key, job, attrs)
	begin := time.Now()

	err := next(ctx)

	outcome := OutcomeCompleted
	switch {
	case err == nil:
	case errors.Is(err, fencing.ErrLeaseLost) || errors.Is(context.Cause(ctx), fencing.ErrLeaseLost):
		outcome = OutcomeFenced
	case errors.Is(err, workflow.ErrNonDeterminism):
		outcome = OutcomeNonDeterminism
		live.span.AddEvent(EventNonDeterminism, trace.WithAttributes(attribute.String("exception.message", err.Error())))
	default:
		outcome = OutcomeError
	}
	if err == nil && info.ReplayDuration > 0 {
		w.taskReplay.Record(ctx, info.ReplayDuration.Seconds(), metric.WithAttributes(metricAttrs...))
	}
	if err == nil {
		// Signals delivered by this task: link to their senders.
		for _, headers := range info.SignalHeaders {
			sender := trace.SpanContextFromContext(propagator.Extract(context.Background(), propagation.MapCarrier(headers)))
			if sender.IsValid() {
				live.span.AddLink(trace.Link{SpanContext: sender, Attributes: []attribute.KeyValue{AttrLink.String(LinkSignal)}})
			}
		}
	}
	if err == nil && info.Closed != "" {
		closedAttrs := append(slices.Clone(metricAttrs), AttrState.String(info.Closed))
		w.workflowClosed.Add(ctx, 1, metric.WithAttributes(closedAttrs...))
		if !info.CreatedAt.IsZero() {
			w.workflowDuration.Record(ctx, max(time.Since(info.CreatedAt), 0).Seconds(), metric.WithAttributes(closedAttrs...))
		}
		live.span.SetAttributes(AttrState.String(info.Closed))
	}
	metricAttrs = append(metricAttrs, AttrOutcome.String(outcome))
	w.taskDuration.Record(ctx, time.Since(begin).Seconds(), metric.WithAttributes(metricAttrs...))
	w.taskAttempts.Add(ctx, 1, metric.WithAttributes(metricAttrs...))
	w.endAttempt(key, live, outcome, err)
	return err
}

// InterceptActivity runs an activity attempt in a span.
func (w *WorkerInterceptor) InterceptActivity(ctx context.Context, info *activity.Info, next func(context.Context) error) error {
	job := jobRow(ctx, info.JobID)
	attrs := []attribute.KeyValue{
		AttrActivityKind.String(info.ActivityKind),
		AttrNamespace.String(info.Namespace),
		AttrWorkflowID.String(info.WorkflowID),
		AttrRunID.String(info.RunID.String()),
		AttrGeneration.Int64(info.Generation),
		AttrAttempt.Int(info.Attempt),
		AttrJobID.Int64(info.JobID),
		AttrScheduledEventID.Int64(info.ScheduledEventID),
	}
	metricAttrs := []attribute.KeyValue{AttrActivityKind.String(info.ActivityKind), AttrNamespace.String(info.Namespace)}
	if job != nil {
		attrs = append(attrs, AttrQueue.String(job.Queue))
		metricAttrs = append(metricAttrs, AttrQueue.String(job.Queue))
		if job.AttemptedAt != nil {
			w.activityScheduleToStart.Record(ctx, max(job.AttemptedAt.Sub(job.ScheduledAt), 0).Seconds(), metric.WithAttributes(metricAttrs...))
		}
	}
	key := attemptKey{attempt: info.Attempt, jobID: info.JobID}
	ctx, live := w.startAttempt(ctx, "Activity:"+info.ActivityKind, info.Headers, info.RunID, key, job, attrs)
	begin := time.Now()

	err := next(ctx)

	outcome := activityOutcome(err, context.Cause(ctx), info.Attempt, job)
	metricAttrs = append(metricAttrs, AttrOutcome.String(outcome))
	w.activityExecution.Record(ctx, time.Since(begin).Seconds(), metric.WithAttributes(metricAttrs...))
	w.activityAttempts.Add(ctx, 1, metric.WithAttributes(metricAttrs...))
	if job != nil && (outcome == OutcomeCompleted || outcome == OutcomeFailed) {
		w.activityScheduleToClose.Record(ctx, time.Since(job.CreatedAt).Seconds(), metric.WithAttributes(metricAttrs...))
	}
	w.endAttempt(key, live, outcome, err)
	return err
}

// activityOutcome is how an attempt that returned err ended; cause is its
// context's cause (ErrLeaseLost once a renewal was refused: whatever the
// code returned then, its writes are rejected).
func activityOutcome(err, cause error, attempt int, job *rivertype.JobRow) string {
	var cancelErr *river.JobCancelError
	switch {
	case err == nil:
		return OutcomeCompleted
	case errors.Is(err, fencing.ErrLeaseLost) || errors.Is(cause, fencing.ErrLeaseLost):
		return OutcomeFenced
	case errors.As(err, &cancelErr):
		return OutcomeFailed // weir cancels the job of an activity that failed for good
	case job != nil && attempt >= job.MaxAttempts:
		return OutcomeFailed
	default:
		return OutcomeRetry
	}
}

// startAttempt starts the span of an attempt: a child of the run's stored
// trace context if there is one, else a root; linked to the span current in
// ctx (a River middleware's), and to the previous attempt's span when its
// context can be known.
func (w *WorkerInterceptor) startAttempt(ctx context.Context, name string, headers map[string]string, runID uuid.UUID,
	key attemptKey, job *rivertype.JobRow, attrs []attribute.KeyValue,
) (context.Context, *liveSpan) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if caller := trace.SpanContextFromContext(ctx); caller.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: caller, Attributes: []attribute.KeyValue{AttrLink.String(LinkCaller)}}))
	}
	stored := propagator.Extract(context.Background(), propagation.MapCarrier(headers))
	if parent := trace.SpanContextFromContext(stored); parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	if b := baggage.FromContext(stored); b.Len() > 0 {
		ctx = baggage.ContextWithBaggage(ctx, b)
	}

	startCtx, ids := withAttemptIDs(ctx, runID, key.jobID, key.attempt)
	_, span := w.tracer.Start(startCtx, name, opts...)
	ctx = trace.ContextWithSpan(ctx, span) // without the IDs: user spans get their own

	if key.attempt > 1 {
		previous := attemptKey{attempt: key.attempt - 1, jobID: key.jobID}
		_, prev := w.attempts.find(previous)
		if sc := span.SpanContext(); sc.SpanID() == ids.spanID {
			// IDGenerator is installed: the previous attempt's ID is known.
			prev = trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: sc.TraceID(), SpanID: attemptSpanID(runID, key.jobID, key.attempt-1), TraceFlags: sc.TraceFlags(), Remote: true,
			})
		}
		if prev.IsValid() {
			span.AddLink(trace.Link{SpanContext: prev, Attributes: []attribute.KeyValue{AttrLink.String(LinkPreviousAttempt)}})
		}
		if reaped := reapedError(job, key.attempt-1); reaped != nil {
			span.AddEvent(EventLeaseExpired, trace.WithTimestamp(reaped.At), trace.WithAttributes(
				AttrAttempt.Int(reaped.Attempt), attribute.String("exception.message", reaped.Error)))
		}
	}
	return ctx, w.attempts.begin(key, span)
}

func (w *WorkerInterceptor) endAttempt(key attemptKey, live *liveSpan, outcome string, err error) {
	span := live.span
	span.SetAttributes(AttrOutcome.String(outcome))
	if err != nil {
		failSpan(span, err)
	}
	w.attempts.end(key, live)
	span.End()
}

// reapedError returns the error the fencing reaper recorded for attempt of
// job, if it recovered that attempt.
func reapedError(job *rivertype.JobRow, attempt int) *rivertype.AttemptError {
	if job == nil {
		return nil
	}
	for i := range job.Errors {
		if e := &job.Errors[i]; e.Attempt == attempt && strings.HasPrefix(e.Error, reapedErrorPrefix) {
			return e
		}
	}
	return nil
}

// jobRow reads the attempt's River job through the River client in ctx; nil
// if it can't (telemetry never fails the work).
func jobRow(ctx context.Context, jobID int64) *rivertype.JobRow {
	riverClient, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return nil
	}
	job, err := riverClient.JobGet(ctx, jobID)
	if err != nil {
		return nil
	}
	return job
}

// taskNamespace reads the namespace from a workflow task's job kind.
func taskNamespace(kind string) (string, bool) {
	rest, ok := strings.CutPrefix(kind, taskKindPrefix)
	if !ok {
		return "", false
	}
	namespace, _, ok := strings.Cut(rest, "/")
	return namespace, ok
}

var _ worker.Interceptor = (*WorkerInterceptor)(nil)
