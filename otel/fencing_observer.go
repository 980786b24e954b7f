package otel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirhq/weir/fencing"
)

// FencingObserver counts lease events (renewals, lost and expired leases,
// rejected stale writes) and adds all but renewals as span events:
//
//   - on the attempt's span, while it runs in this process (the worker's
//     observer, from WorkerInterceptor.FencingObserver or InstallWorker);
//   - after it ended (River's completer reports an attempt's outcome after
//     Work returned), on a short span "Fencing:<event>", a child of the
//     attempt's span, if this process ran it recently;
//   - otherwise on the span current in the event's context, if any.
//
// A lease reaped by another process's reaper also shows on the recovering
// attempt's span (EventLeaseExpired), wherever that runs.
type FencingObserver struct {
	attempts *attempts
	tracer   trace.Tracer

	expired  metric.Int64Counter
	lost     metric.Int64Counter
	rejected metric.Int64Counter
	renewed  metric.Int64Counter
}

var _ fencing.Observer = (*FencingObserver)(nil)

// NewFencingObserver returns a FencingObserver reporting to tp and mp, for a
// fencing.Driver used without a weir worker (a plain River client); a nil
// provider means no-op. A worker's observer comes from its
// WorkerInterceptor, which shares its attempts' spans with it.
func NewFencingObserver(tp trace.TracerProvider, mp metric.MeterProvider) (*FencingObserver, error) {
	tracer, meter := providers(tp, mp)
	return newFencingObserver(tracer, meter, newAttempts())
}

func newFencingObserver(tracer trace.Tracer, meter metric.Meter, attempts *attempts) (*FencingObserver, error) {
	in := &instruments{meter: meter}
	o := &FencingObserver{
		attempts: attempts,
		tracer:   tracer,
		expired:  in.counter(MetricLeasesExpired, "{lease}", "Leases that expired without renewal; the reaper recovered their jobs."),
		lost:     in.counter(MetricLeasesLost, "{lease}", "Attempts told by a refused renewal that a newer attempt holds their job."),
		rejected: in.counter(MetricStaleWritesRejected, "{write}", "Writes by attempts that no longer held their job, rejected."),
		renewed:  in.counter(MetricLeaseRenewals, "{renewal}", "Lease renewals."),
	}
	if in.err != nil {
		return nil, fmt.Errorf("otel: creating fencing instruments: %w", in.err)
	}
	return o, nil
}

// FencingEvent records one lease event. It does not block.
func (o *FencingObserver) FencingEvent(ctx context.Context, event *fencing.Event) {
	var name string
	switch event.Kind {
	case fencing.EventLeaseRenewed:
		o.renewed.Add(ctx, 1)
		return
	case fencing.EventLeaseExpired:
		o.expired.Add(ctx, 1)
		name = EventLeaseExpired
	case fencing.EventLeaseLost:
		o.lost.Add(ctx, 1)
		name = EventLeaseLost
	case fencing.EventStaleWriteRejected:
		o.rejected.Add(ctx, 1, metric.WithAttributes(AttrFencingOp.String(event.Op)))
		name = EventStaleWriteRejected
	default:
		return
	}

	attrs := []attribute.KeyValue{AttrJobID.Int64(event.JobID), AttrAttempt.Int(event.Attempt)}
	if event.Op != "" {
		attrs = append(attrs, AttrFencingOp.String(event.Op))
	}
	span, ended := o.attempts.find(attemptKey{attempt: event.Attempt, jobID: event.JobID})
	switch {
	case span != nil:
		span.AddEvent(name, trace.WithAttributes(attrs...))
	case ended.IsValid():
		_, span := o.tracer.Start(trace.ContextWithRemoteSpanContext(context.WithoutCancel(ctx), ended), "Fencing:"+name,
			trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
		span.AddEvent(name, trace.WithAttributes(attrs...))
		span.End()
	default:
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent(name, trace.WithAttributes(attrs...))
		}
	}
}

// chainObservers returns an observer telling first (if any), then second.
func chainObservers(first, second fencing.Observer) fencing.Observer {
	if first == nil {
		return second
	}
	return observers{first, second}
}

type observers []fencing.Observer

func (os observers) FencingEvent(ctx context.Context, event *fencing.Event) {
	for _, o := range os {
		o.FencingEvent(ctx, event)
	}
}
