package otel_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
	weirotel "github.com/weirhq/weir/otel"
	"github.com/weirhq/weir/worker"
)

// Trace a run end to end: the client's start span is the root, the worker's
// task and activity spans its children.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	const schema = "weir_example_otel"
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		log.Fatal(err)
	}

	// In production: an OTLP exporter in a batch span processor.
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder), sdktrace.WithIDGenerator(weirotel.NewIDGenerator()))
	defer func() { _ = tp.Shutdown(ctx) }()

	clientConfig := &client.Config{Schema: schema}
	if err := weirotel.InstallClient(clientConfig, tp, nil); err != nil {
		log.Fatal(err)
	}
	c, err := client.New(pool, clientConfig)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	workerConfig := &worker.Config{Schema: schema}
	if err := weirotel.InstallWorker(workerConfig, tp, nil); err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(pool, workerConfig)
	if err != nil {
		log.Fatal(err)
	}
	worker.AddWorkflow(w, &TracedWorkflow{})
	worker.AddActivity(w, &FlakyActivity{})
	worker.AddActivity(w, &HeldActivity{})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = w.Stop(ctx) }()

	run, err := c.Start(ctx, TracedArgs{Key: "example"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	gates.Store("example", &gate{entered: make(chan int64, 1), release: closed()})
	getCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	result, err := client.GetResult[string](getCtx, run)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(result)

	// Spans end as their work returns; the run's last task may still be
	// ending when its result is read.
	if err := w.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	var root sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		if s.Name() == "StartWorkflow:traced" {
			root = s
		}
	}
	children := map[string]int{}
	for _, s := range recorder.Ended() {
		if s.Parent().SpanID() == root.SpanContext().SpanID() && s.SpanContext().TraceID() == root.SpanContext().TraceID() {
			children[s.Name()]++
		}
	}
	fmt.Println("activity attempts:", children["Activity:flaky"], "flaky,", children["Activity:held"], "held")
	fmt.Println("workflow tasks:", children["WorkflowTask:traced"] >= 3)
	// Output:
	// charged, attempt 1
	// activity attempts: 2 flaky, 1 held
	// workflow tasks: true
}

func closed() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// Feed Prometheus and a second reader (an OTLP exporter's, say) from one
// MeterProvider, and install the worker's instruments once.
func ExampleRegisterPrometheus() {
	reg := prometheus.NewRegistry()
	other := sdkmetric.NewManualReader() // stands for an OTLP reader
	mp, err := weirotel.RegisterPrometheus(reg, sdkmetric.WithReader(other))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()

	config := &worker.Config{}
	if err := weirotel.InstallWorker(config, nil, mp); err != nil {
		log.Fatal(err)
	}
	// What a worker does for each activity attempt.
	_ = config.Interceptors[0].InterceptActivity(context.Background(), &activity.Info{Attempt: 1, JobID: 1, ActivityKind: "charge"},
		func(context.Context) error { return nil })

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "weir_activity_attempts_total" {
			fmt.Println("prometheus:", f.GetName(), f.GetMetric()[0].GetCounter().GetValue())
		}
	}
	var rm metricdata.ResourceMetrics
	if err := other.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == weirotel.MetricActivityAttempts {
			fmt.Println("other reader:", m.Name, m.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
		}
	}

	// Output:
	// prometheus: weir_activity_attempts_total 1
	// other reader: weir.activity.attempts 1
}
