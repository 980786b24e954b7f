package client

import (
	"context"

	"github.com/google/uuid"
)

// Interceptor wraps the client's calls, for tracing, metrics or logging
// (package otel implements one). Each method must call next exactly once and
// return its results, or an error of its own. Embed InterceptorDefaults to
// implement only some methods.
type Interceptor interface {
	// InterceptStart wraps Start and StartTx.
	InterceptStart(ctx context.Context, info *StartInfo, next func(ctx context.Context) (*Run, error)) (*Run, error)

	// InterceptSignal wraps Signal and SignalTx (and the signal of
	// SignalWithStart).
	InterceptSignal(ctx context.Context, info *SignalInfo, next func(ctx context.Context) error) error
}

// InterceptorDefaults implements Interceptor by calling next.
type InterceptorDefaults struct{}

// InterceptStart calls next.
func (InterceptorDefaults) InterceptStart(ctx context.Context, _ *StartInfo, next func(ctx context.Context) (*Run, error)) (*Run, error) {
	return next(ctx)
}

// InterceptSignal calls next.
func (InterceptorDefaults) InterceptSignal(ctx context.Context, _ *SignalInfo, next func(ctx context.Context) error) error {
	return next(ctx)
}

// SignalInfo describes a signal before it is sent.
type SignalInfo struct {
	// Headers travel with the signal (a tracing interceptor puts its trace
	// context here): whatever an interceptor leaves in it before calling
	// next is recorded with the signal and handed to the worker's
	// interceptors, in TaskInfo.SignalHeaders, by the workflow task that
	// delivers it. Empty by default.
	Headers map[string]string

	// Kind is the signal's kind.
	Kind string

	// RequestID is the signal's request ID, defaults applied.
	RequestID string

	// RunID is the run addressed (zero: the workflow's latest run) and
	// WorkflowID its workflow.
	RunID      uuid.UUID
	WorkflowID string
}

// StartInfo describes a start before it happens.
type StartInfo struct {
	// Headers carry context to the run's workflow tasks and activities (a
	// tracing interceptor puts its trace context here). Whatever an
	// interceptor leaves in it before calling next is stored with the run
	// and handed to the worker's interceptors as TaskInfo.Headers and
	// activity.Info.Headers. Empty by default.
	Headers map[string]string

	// Kind is the workflow's kind.
	Kind string

	// Namespace, Queue, RequestID and WorkflowID are the start's options,
	// defaults applied.
	Namespace  string
	Queue      string
	RequestID  string
	WorkflowID string
}

func (c *Client) interceptSignal(ctx context.Context, info *SignalInfo, next func(ctx context.Context) error) error {
	wrapped := next
	for i := len(c.config.Interceptors) - 1; i >= 0; i-- {
		inner, interceptor := wrapped, c.config.Interceptors[i]
		wrapped = func(ctx context.Context) error { return interceptor.InterceptSignal(ctx, info, inner) }
	}
	return wrapped(ctx)
}

func (c *Client) interceptStart(ctx context.Context, info *StartInfo, next func(ctx context.Context) (*Run, error)) (*Run, error) {
	wrapped := next
	for i := len(c.config.Interceptors) - 1; i >= 0; i-- {
		inner, interceptor := wrapped, c.config.Interceptors[i]
		wrapped = func(ctx context.Context) (*Run, error) { return interceptor.InterceptStart(ctx, info, inner) }
	}
	return wrapped(ctx)
}
