package otel

import (
	"context"
	"fmt"
	"maps"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirhq/weir/client"
)

// propagator writes and reads the trace context stored with a run: W3C
// traceparent and tracestate, and W3C baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// ClientInterceptor traces and counts a client's starts. Its start span
// (StartWorkflow:<kind>) is the parent of every span of the run: its context
// is stored with the run (client.StartInfo.Headers), and workers continue
// it. Install it with InstallClient, or put it in client.Config.Interceptors.
type ClientInterceptor struct {
	client.InterceptorDefaults

	started metric.Int64Counter
	tracer  trace.Tracer
}

// NewClientInterceptor returns a ClientInterceptor reporting to tp and mp; a
// nil provider means no-op (pass otel.GetTracerProvider() and
// otel.GetMeterProvider() for the global ones).
func NewClientInterceptor(tp trace.TracerProvider, mp metric.MeterProvider) (*ClientInterceptor, error) {
	tracer, meter := providers(tp, mp)
	in := &instruments{meter: meter}
	c := &ClientInterceptor{
		started: in.counter(MetricWorkflowsStarted, "{run}", "Workflow runs created by Start, StartTx and SignalWithStart."),
		tracer:  tracer,
	}
	if in.err != nil {
		return nil, fmt.Errorf("otel: creating client instruments: %w", in.err)
	}
	return c, nil
}

// InstallClient adds a ClientInterceptor reporting to tp and mp to config's
// interceptors, outermost.
func InstallClient(config *client.Config, tp trace.TracerProvider, mp metric.MeterProvider) error {
	c, err := NewClientInterceptor(tp, mp)
	if err != nil {
		return err
	}
	config.Interceptors = append([]client.Interceptor{c}, config.Interceptors...)
	return nil
}

// InterceptStart wraps a start in a span and stores the span's context with
// the run.
func (c *ClientInterceptor) InterceptStart(ctx context.Context, info *client.StartInfo, next func(context.Context) (*client.Run, error)) (*client.Run, error) {
	ctx, span := c.tracer.Start(ctx, "StartWorkflow:"+info.Kind, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		AttrWorkflowKind.String(info.Kind),
		AttrNamespace.String(info.Namespace),
		AttrQueue.String(info.Queue),
		AttrWorkflowID.String(info.WorkflowID),
		AttrRequestID.String(info.RequestID),
	))
	defer span.End()
	info.Headers = withTraceContext(ctx, info.Headers)

	run, err := next(ctx)
	if err != nil {
		failSpan(span, err)
		return nil, err
	}
	span.SetAttributes(AttrRunID.String(run.RunID.String()), AttrGeneration.Int64(run.Generation), AttrCreated.Bool(run.Created))
	if run.Created {
		c.started.Add(ctx, 1, metric.WithAttributes(
			AttrNamespace.String(info.Namespace), AttrWorkflowKind.String(info.Kind), AttrQueue.String(info.Queue)))
	}
	return run, nil
}

// InterceptSignal wraps a signal in a span (SignalWorkflow:<kind>, in the
// caller's trace) and sends its context with the signal, so the workflow task
// that delivers it links to it (weir.link=signal).
func (c *ClientInterceptor) InterceptSignal(ctx context.Context, info *client.SignalInfo, next func(context.Context) error) error {
	attrs := []attribute.KeyValue{
		AttrSignalKind.String(info.Kind),
		AttrWorkflowID.String(info.WorkflowID),
		AttrRequestID.String(info.RequestID),
	}
	if info.RunID != uuid.Nil {
		attrs = append(attrs, AttrRunID.String(info.RunID.String()))
	}
	ctx, span := c.tracer.Start(ctx, "SignalWorkflow:"+info.Kind, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	defer span.End()
	info.Headers = withTraceContext(ctx, info.Headers)

	err := next(ctx)
	if err != nil {
		failSpan(span, err)
	}
	return err
}

// withTraceContext returns a copy of headers (another interceptor's map is
// its own) with ctx's trace context added.
func withTraceContext(ctx context.Context, headers map[string]string) map[string]string {
	headers = maps.Clone(headers)
	if headers == nil {
		headers = make(map[string]string)
	}
	propagator.Inject(ctx, propagation.MapCarrier(headers))
	return headers
}

// failSpan records err on span and marks it failed.
func failSpan(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

var _ client.Interceptor = (*ClientInterceptor)(nil)
