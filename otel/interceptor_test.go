package otel_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	weirotel "github.com/weirhq/weir/otel"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type providersBundle struct {
	mp       *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
	recorder *tracetest.SpanRecorder
	tp       *sdktrace.TracerProvider
}

func newProviders(t *testing.T, opts ...sdktrace.TracerProviderOption) *providersBundle {
	t.Helper()
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithSpanProcessor(recorder))...)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return &providersBundle{mp: mp, reader: reader, recorder: recorder, tp: tp}
}

func (p *providersBundle) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, p.reader.Collect(t.Context(), &rm))
	return rm
}

func TestClientInterceptor(t *testing.T) {
	t.Parallel()

	start := func(t *testing.T, p *providersBundle, info *client.StartInfo, run *client.Run, err error) (*client.Run, error) {
		t.Helper()
		c, cerr := weirotel.NewClientInterceptor(p.tp, p.mp)
		require.NoError(t, cerr)
		return c.InterceptStart(t.Context(), info, func(ctx context.Context) (*client.Run, error) {
			// What next sees: the span is current and its context is in the headers.
			require.Equal(t, trace.SpanContextFromContext(ctx).TraceID().String(), strings.Split(info.Headers["traceparent"], "-")[1])
			return run, err
		})
	}

	t.Run("ErrorMarksSpanAndCountsNothing", func(t *testing.T) {
		t.Parallel()
		p := newProviders(t)
		_, err := start(t, p, &client.StartInfo{Kind: "order"}, nil, errors.New("boom"))
		require.EqualError(t, err, "boom")
		spans := p.recorder.Ended()
		require.Len(t, spans, 1)
		require.Equal(t, codes.Error, spans[0].Status().Code)
		require.Zero(t, sumOf(t, p.collect(t), weirotel.MetricWorkflowsStarted, nil))
	})

	t.Run("HeadersCarryTheSpan", func(t *testing.T) {
		t.Parallel()
		p := newProviders(t)
		theirs := map[string]string{"x-tenant": "acme"}
		info := &client.StartInfo{Headers: theirs, Kind: "order", Namespace: "default", Queue: "q", WorkflowID: "w"}
		run := &client.Run{Created: true, Generation: 2, RunID: uuid.New(), WorkflowID: "w"}
		got, err := start(t, p, info, run, nil)
		require.NoError(t, err)
		require.Same(t, run, got)

		spans := p.recorder.Ended()
		require.Len(t, spans, 1)
		require.Equal(t, "StartWorkflow:order", spans[0].Name())
		require.Equal(t, trace.SpanKindProducer, spans[0].SpanKind())
		require.Equal(t, int64(2), attr(spans[0], weirotel.AttrGeneration).AsInt64())
		require.Equal(t, "acme", info.Headers["x-tenant"], "other interceptors' headers are kept")
		require.Contains(t, info.Headers["traceparent"], spans[0].SpanContext().SpanID().String())
		require.Equal(t, map[string]string{"x-tenant": "acme"}, theirs, "the caller's map is not written")
		require.Equal(t, int64(1), sumOf(t, p.collect(t), weirotel.MetricWorkflowsStarted, map[attribute.Key]string{
			weirotel.AttrWorkflowKind: "order", weirotel.AttrQueue: "q",
		}))
	})

	t.Run("RepeatedStartCountsNothing", func(t *testing.T) {
		t.Parallel()
		p := newProviders(t)
		_, err := start(t, p, &client.StartInfo{Kind: "order"}, &client.Run{Created: false, RunID: uuid.New()}, nil)
		require.NoError(t, err)
		require.Zero(t, sumOf(t, p.collect(t), weirotel.MetricWorkflowsStarted, nil))
	})
}

// activityAttempt runs one activity attempt through w with next returning
// err, and returns its span.
func activityAttempt(t *testing.T, p *providersBundle, w *weirotel.WorkerInterceptor, info *activity.Info, err error) sdktrace.ReadOnlySpan {
	t.Helper()
	before := len(p.recorder.Ended())
	got := w.InterceptActivity(t.Context(), info, func(context.Context) error { return err })
	require.Equal(t, err, got)
	spans := p.recorder.Ended()
	require.Len(t, spans, before+1)
	return spans[before]
}

func TestWorkerInterceptor(t *testing.T) {
	t.Parallel()

	info := func(attempt int) *activity.Info {
		return &activity.Info{Attempt: attempt, JobID: 7, ActivityKind: "charge", RunID: uuid.MustParse("6f1c2b9e-52c7-4a59-9d7c-2c1c9c1b5a10")}
	}

	t.Run("IDGeneratorLinksAcrossProcesses", func(t *testing.T) {
		t.Parallel()
		p := newProviders(t, sdktrace.WithIDGenerator(weirotel.NewIDGenerator()))
		// Two interceptors share nothing, as two worker processes wouldn't.
		a, err := weirotel.NewWorkerInterceptor(p.tp, p.mp)
		require.NoError(t, err)
		b, err := weirotel.NewWorkerInterceptor(p.tp, p.mp)
		require.NoError(t, err)

		first := activityAttempt(t, p, a, info(1), errors.New("bank unavailable"))
		second := activityAttempt(t, p, b, info(2), nil)
		require.True(t, linkedTo(second, first.SpanContext()))
		require.Equal(t, first.SpanContext().TraceID(), second.SpanContext().TraceID(),
			"a run without a stored trace context still has one trace")
	})

	t.Run("LeaseLostCauseIsFenced", func(t *testing.T) {
		t.Parallel()
		p := newProviders(t)
		w, err := weirotel.NewWorkerInterceptor(p.tp, p.mp)
		require.NoError(t, err)
		// The fencing plugin cancels a lost attempt's context with this
		// cause; the code then returns what it returns.
		ctx, cancel := context.WithCancelCause(t.Context())
		cancel(&fencing.LeaseLostError{Attempt: 1, JobID: 7, Op: "renew"})
		require.ErrorIs(t, w.InterceptActivity(ctx, info(1), func(ctx context.Context) error { return ctx.Err() }), context.Canceled)
		require.ErrorIs(t, w.InterceptTask(ctx, &worker.TaskInfo{Attempt: 1, JobID: 8, Kind: "order", RunID: uuid.New()},
			func(ctx context.Context) error { return ctx.Err() }), context.Canceled)

		for _, s := range p.recorder.Ended() {
			require.Equal(t, weirotel.OutcomeFenced, attr(s, weirotel.AttrOutcome).AsString(), s.Name())
		}
		rm := p.collect(t)
		require.Equal(t, int64(1), sumOf(t, rm, weirotel.MetricActivityAttempts, map[attribute.Key]string{weirotel.AttrOutcome: weirotel.OutcomeFenced}))
		require.Equal(t, int64(1), sumOf(t, rm, weirotel.MetricTaskAttempts, map[attribute.Key]string{weirotel.AttrOutcome: weirotel.OutcomeFenced}))
	})

	t.Run("NonDeterminismIsAnEvent", func(t *testing.T) {
		t.Parallel()
		p := newProviders(t)
		w, err := weirotel.NewWorkerInterceptor(p.tp, p.mp)
		require.NoError(t, err)
		taskErr := &workflow.NonDeterminismError{EventID: 5, Expected: "ActivityScheduled charge", Got: "TimerStarted"}
		err = w.InterceptTask(t.Context(), &worker.TaskInfo{Attempt: 1, JobID: 3, Kind: "order", RunID: uuid.New()},
			func(context.Context) error { return taskErr })
		require.ErrorIs(t, err, workflow.ErrNonDeterminism)
		spans := p.recorder.Ended()
		require.Len(t, spans, 1)
		require.True(t, hasEvent(spans[0], weirotel.EventNonDeterminism))
		require.Equal(t, weirotel.OutcomeNonDeterminism, attr(spans[0], weirotel.AttrOutcome).AsString())
		require.Equal(t, int64(1), sumOf(t, p.collect(t), weirotel.MetricTaskAttempts, map[attribute.Key]string{
			weirotel.AttrOutcome: weirotel.OutcomeNonDeterminism,
		}))
	})

	t.Run("StoredContextIsTheParent", func(t *testing.T) {
		t.Parallel()
		p := newProviders(t)
		w, err := weirotel.NewWorkerInterceptor(p.tp, p.mp)
		require.NoError(t, err)
		i := info(1)
		i.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "baggage": "tenant=acme"}
		var inner trace.SpanContext
		require.NoError(t, w.InterceptActivity(t.Context(), i, func(ctx context.Context) error {
			inner = trace.SpanContextFromContext(ctx)
			return nil
		}))
		span := p.recorder.Ended()[0]
		require.Equal(t, "0af7651916cd43dd8448eb211c80319c", span.SpanContext().TraceID().String())
		require.Equal(t, "b7ad6b7169203331", span.Parent().SpanID().String())
		require.Equal(t, span.SpanContext(), inner, "the activity runs in its span")
	})

	t.Run("WithoutIDGeneratorNoLinkAcrossProcesses", func(t *testing.T) {
		t.Parallel()
		p := newProviders(t)
		a, err := weirotel.NewWorkerInterceptor(p.tp, p.mp)
		require.NoError(t, err)
		b, err := weirotel.NewWorkerInterceptor(p.tp, p.mp)
		require.NoError(t, err)
		first := activityAttempt(t, p, a, info(1), errors.New("bank unavailable"))
		second := activityAttempt(t, p, b, info(2), nil)
		require.False(t, linkedTo(second, first.SpanContext()), "random IDs can't be derived")
		third := activityAttempt(t, p, b, info(3), nil)
		require.True(t, linkedTo(third, second.SpanContext()), "in one process the previous attempt is remembered")
	})
}

func TestFencingObserver(t *testing.T) {
	t.Parallel()

	t.Run("CountsAndAnnotatesTheContextSpan", func(t *testing.T) {
		t.Parallel()
		p := newProviders(t)
		o, err := weirotel.NewFencingObserver(p.tp, p.mp)
		require.NoError(t, err)
		ctx, span := p.tp.Tracer("test").Start(t.Context(), "attempt")
		for _, kind := range []fencing.EventKind{fencing.EventLeaseRenewed, fencing.EventLeaseRenewed, fencing.EventLeaseLost, fencing.EventLeaseExpired} {
			o.FencingEvent(ctx, &fencing.Event{Attempt: 1, JobID: 9, Kind: kind})
		}
		o.FencingEvent(ctx, &fencing.Event{Attempt: 1, JobID: 9, Kind: fencing.EventStaleWriteRejected, Op: "complete"})
		span.End()

		ended := p.recorder.Ended()
		require.Len(t, ended, 1)
		var names []string
		for _, e := range ended[0].Events() {
			names = append(names, e.Name)
		}
		require.Equal(t, []string{weirotel.EventLeaseLost, weirotel.EventLeaseExpired, weirotel.EventStaleWriteRejected}, names,
			"renewals are counted, not traced")
		rm := p.collect(t)
		require.Equal(t, int64(2), sumOf(t, rm, weirotel.MetricLeaseRenewals, nil))
		require.Equal(t, int64(1), sumOf(t, rm, weirotel.MetricLeasesLost, nil))
		require.Equal(t, int64(1), sumOf(t, rm, weirotel.MetricLeasesExpired, nil))
		require.Equal(t, int64(1), sumOf(t, rm, weirotel.MetricStaleWritesRejected, map[attribute.Key]string{weirotel.AttrFencingOp: "complete"}))
	})

	t.Run("AfterTheAttemptEndedAChildSpan", func(t *testing.T) {
		t.Parallel()
		p := newProviders(t)
		w, err := weirotel.NewWorkerInterceptor(p.tp, p.mp)
		require.NoError(t, err)
		i := &activity.Info{Attempt: 1, JobID: 11, ActivityKind: "charge", RunID: uuid.New()}
		attemptSpan := activityAttempt(t, p, w, i, errors.New("context canceled"))

		// River's completer reports the attempt's outcome after Work returned.
		w.FencingObserver().FencingEvent(context.Background(), &fencing.Event{
			Attempt: 1, JobID: 11, Kind: fencing.EventStaleWriteRejected, Op: "set_state_retryable",
		})
		spans := p.recorder.Ended()
		require.Len(t, spans, 2)
		child := spans[1]
		require.Equal(t, "Fencing:"+weirotel.EventStaleWriteRejected, child.Name())
		require.Equal(t, attemptSpan.SpanContext().SpanID(), child.Parent().SpanID())
		require.True(t, hasEvent(child, weirotel.EventStaleWriteRejected))
	})
}

func TestNoopProviders(t *testing.T) {
	t.Parallel()
	w, err := weirotel.NewWorkerInterceptor(nil, nil)
	require.NoError(t, err)
	called := 0
	for attempt := 1; attempt <= 2; attempt++ {
		require.NoError(t, w.InterceptActivity(t.Context(), &activity.Info{Attempt: attempt, JobID: 1, ActivityKind: "k", RunID: uuid.New()},
			func(context.Context) error { called++; return nil }))
	}
	require.NoError(t, w.InterceptTask(t.Context(), &worker.TaskInfo{Attempt: 1, JobID: 2, Kind: "k", RunID: uuid.New()},
		func(context.Context) error { called++; return nil }))
	w.FencingObserver().FencingEvent(t.Context(), &fencing.Event{Attempt: 1, JobID: 1, Kind: fencing.EventStaleWriteRejected})
	require.Equal(t, 3, called)
}

func TestRegisterPrometheus(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	mp, err := weirotel.RegisterPrometheus(reg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

	o, err := weirotel.NewFencingObserver(nil, mp)
	require.NoError(t, err)
	o.FencingEvent(t.Context(), &fencing.Event{Attempt: 1, JobID: 1, Kind: fencing.EventStaleWriteRejected, Op: "complete"})
	w, err := weirotel.NewWorkerInterceptor(nil, mp)
	require.NoError(t, err)
	require.NoError(t, w.InterceptActivity(t.Context(), &activity.Info{Attempt: 1, JobID: 1, ActivityKind: "k", RunID: uuid.New()},
		func(context.Context) error { return nil }))

	families, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	require.Contains(t, names, "weir_lease_stale_writes_rejected_total")
	require.Contains(t, names, "weir_activity_attempts_total")
	require.Contains(t, names, "weir_activity_execution_duration_seconds")
}

// TestPrometheusAndAnotherReader: one MeterProvider feeds Prometheus and a
// second reader, with the worker's instruments installed once.
func TestPrometheusAndAnotherReader(t *testing.T) {
	t.Parallel()
	attempts := func(t *testing.T, mp metric.MeterProvider) {
		t.Helper()
		w, err := weirotel.NewWorkerInterceptor(nil, mp)
		require.NoError(t, err)
		require.NoError(t, w.InterceptActivity(t.Context(), &activity.Info{Attempt: 1, JobID: 1, ActivityKind: "k", RunID: uuid.New()},
			func(context.Context) error { return nil }))
	}
	gathered := func(t *testing.T, reg *prometheus.Registry) []string {
		t.Helper()
		families, err := reg.Gather()
		require.NoError(t, err)
		var names []string
		for _, f := range families {
			names = append(names, f.GetName())
		}
		return names
	}

	t.Run("PrometheusReader", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		prom, err := weirotel.PrometheusReader(reg)
		require.NoError(t, err)
		other := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(prom), sdkmetric.WithReader(other))
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

		attempts(t, mp)
		require.Contains(t, gathered(t, reg), "weir_activity_attempts_total")
		var rm metricdata.ResourceMetrics
		require.NoError(t, other.Collect(t.Context(), &rm))
		require.Equal(t, int64(1), sumOf(t, rm, weirotel.MetricActivityAttempts, nil))
	})

	t.Run("RegisterPrometheusWithAReader", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		other := sdkmetric.NewManualReader()
		mp, err := weirotel.RegisterPrometheus(reg, sdkmetric.WithReader(other))
		require.NoError(t, err)
		t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })

		attempts(t, mp)
		require.Contains(t, gathered(t, reg), "weir_activity_attempts_total")
		var rm metricdata.ResourceMetrics
		require.NoError(t, other.Collect(t.Context(), &rm))
		require.Equal(t, int64(1), sumOf(t, rm, weirotel.MetricActivityAttempts, nil))
	})
}

// countingObserver counts the fencing events it sees.
type countingObserver struct{ n int }

func (c *countingObserver) FencingEvent(context.Context, *fencing.Event) { c.n++ }

func TestInstall(t *testing.T) {
	t.Parallel()

	t.Run("Client", func(t *testing.T) {
		t.Parallel()
		theirs := client.InterceptorDefaults{}
		config := &client.Config{Interceptors: []client.Interceptor{theirs}}
		require.NoError(t, weirotel.InstallClient(config, nil, nil))
		require.Len(t, config.Interceptors, 2)
		require.IsType(t, &weirotel.ClientInterceptor{}, config.Interceptors[0], "outermost")
	})

	t.Run("WorkerKeepsTheFencingObserver", func(t *testing.T) {
		t.Parallel()
		theirs := &countingObserver{}
		fencingConfig := &fencing.Config{Observer: theirs}
		config := &worker.Config{Fencing: fencingConfig}
		require.NoError(t, weirotel.InstallWorker(config, nil, nil))
		require.Len(t, config.Interceptors, 1)
		require.Same(t, theirs, fencingConfig.Observer, "the caller's fencing config is not written")
		config.Fencing.Observer.FencingEvent(t.Context(), &fencing.Event{Kind: fencing.EventLeaseRenewed})
		require.Equal(t, 1, theirs.n, "the existing observer still hears events")
	})

	t.Run("WorkerWithoutFencingConfig", func(t *testing.T) {
		t.Parallel()
		config := &worker.Config{}
		require.NoError(t, weirotel.InstallWorker(config, nil, nil))
		require.IsType(t, &weirotel.FencingObserver{}, config.Fencing.Observer)
	})
}
