package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/weirhq/weir/activity"
)

// Interceptor wraps the work a Worker does, for tracing, metrics or logging
// (package otel implements one). Each method must call next exactly once and
// return its error, or an error of its own. Embed InterceptorDefaults to
// implement only some methods.
type Interceptor interface {
	// InterceptActivity wraps one activity attempt of a weir activity.
	InterceptActivity(ctx context.Context, info *activity.Info, next func(ctx context.Context) error) error

	// InterceptTask wraps one workflow task: replay and commit.
	InterceptTask(ctx context.Context, info *TaskInfo, next func(ctx context.Context) error) error
}

// InterceptorDefaults implements Interceptor by calling next.
type InterceptorDefaults struct{}

// InterceptActivity calls next.
func (InterceptorDefaults) InterceptActivity(ctx context.Context, _ *activity.Info, next func(ctx context.Context) error) error {
	return next(ctx)
}

// InterceptTask calls next.
func (InterceptorDefaults) InterceptTask(ctx context.Context, _ *TaskInfo, next func(ctx context.Context) error) error {
	return next(ctx)
}

// TaskInfo describes a workflow task.
type TaskInfo struct {
	// Attempt is the task job's River attempt (1 is the first).
	Attempt int

	// Closed is set by the time the task's next returns nil, when the task
	// closed its run: the run's new state, "completed", "failed",
	// "cancelled" or "continued_as_new". Empty otherwise (and for runs
	// closed outside a task: terminated, timed out).
	Closed string

	// CreatedAt is when the run was started (its row created), for
	// end-to-end latency once Closed is set. Zero when the run could not be
	// read before the task (Headers, Generation and Namespace are then
	// unset too).
	CreatedAt time.Time

	// Generation and Namespace are the run's, as read before the task.
	Generation int64
	Namespace  string

	// Headers are the run's, as its start's interceptors left them in
	// client.StartInfo.Headers (a trace context, say); nil if none.
	Headers map[string]string

	// JobID is the task's River job.
	JobID int64

	// Kind is the workflow's kind.
	Kind string

	// ReplayDuration is set by the time the task's next returns nil: how
	// long replaying the run's history and running its workflow code took
	// (the rest of the task is reading and writing Postgres).
	ReplayDuration time.Duration

	// RunID and WorkflowID identify the run.
	RunID      uuid.UUID
	WorkflowID string

	// SignalHeaders is set by the time the task's next returns nil: the
	// client.SignalInfo.Headers of each signal the task delivered to the
	// workflow that had any (a sender's trace context, to link to).
	SignalHeaders []map[string]string
}

// intercept runs next through every interceptor, the first outermost.
func intercept[I any](ctx context.Context, interceptors []Interceptor, info I,
	call func(Interceptor, context.Context, I, func(context.Context) error) error, next func(context.Context) error,
) error {
	wrapped := next
	for i := len(interceptors) - 1; i >= 0; i-- {
		inner, interceptor := wrapped, interceptors[i]
		wrapped = func(ctx context.Context) error { return call(interceptor, ctx, info, inner) }
	}
	return wrapped(ctx)
}

// decodeHeaders reads a run's trace_context. Headers are for telemetry: a
// value that does not decode is dropped rather than failing the work.
func decodeHeaders(data []byte) map[string]string {
	if len(data) == 0 || string(data) == "null" || string(data) == "{}" { // a run started without telemetry: no decoder
		return nil
	}
	var headers map[string]string
	if err := json.Unmarshal(data, &headers); err != nil || len(headers) == 0 {
		return nil
	}
	return headers
}
