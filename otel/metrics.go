package otel

import (
	"errors"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of weir's tracers and meters.
const ScopeName = "github.com/weirhq/weir/otel"

// Metric names. With the Prometheus exporter dots become underscores,
// counters end in _total and durations in _seconds.
const (
	MetricActivityAttempts        = "weir.activity.attempts"
	MetricActivityExecution       = "weir.activity.execution.duration"
	MetricActivityScheduleToClose = "weir.activity.schedule_to_close.duration"
	MetricActivityScheduleToStart = "weir.activity.schedule_to_start.duration"
	MetricLeasesExpired           = "weir.lease.expired"
	MetricLeasesLost              = "weir.lease.lost"
	MetricLeaseRenewals           = "weir.lease.renewals"
	MetricStaleWritesRejected     = "weir.lease.stale_writes_rejected"
	MetricTaskAttempts            = "weir.workflow_task.attempts"
	MetricTaskDuration            = "weir.workflow_task.duration"
	MetricTaskReplay              = "weir.workflow_task.replay.duration"
	MetricTaskScheduleToStart     = "weir.workflow_task.schedule_to_start.duration"
	MetricWorkflowClosed          = "weir.workflow.closed"
	MetricWorkflowDuration        = "weir.workflow.duration"
	MetricWorkflowRuns            = "weir.workflow.runs"
	MetricWorkflowsStarted        = "weir.workflow.started"
)

// latencyBuckets are histogram bounds in seconds, from a millisecond to an
// hour: workflow tasks take milliseconds, activities anything.
var latencyBuckets = []float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
}

func providers(tp trace.TracerProvider, mp metric.MeterProvider) (trace.Tracer, metric.Meter) {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	return tp.Tracer(ScopeName), mp.Meter(ScopeName)
}

// instruments creates instruments on one meter, collecting the first error.
type instruments struct {
	err   error
	meter metric.Meter
}

func (in *instruments) counter(name, unit, description string) metric.Int64Counter {
	c, err := in.meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(description))
	in.err = errors.Join(in.err, err)
	return c
}

func (in *instruments) seconds(name, description string) metric.Float64Histogram {
	h, err := in.meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(description),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	in.err = errors.Join(in.err, err)
	return h
}
