// Command otel runs one workflow with weir's OpenTelemetry instrumentation
// and exports its trace and metrics: to stdout by default, over OTLP/HTTP
// when OTEL_EXPORTER_OTLP_ENDPOINT is set (http://localhost:4318 for a local
// collector or Jaeger).
//
//	DATABASE_URL=postgres://localhost/weir go run ./examples/otel
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 DATABASE_URL=… go run ./examples/otel
//
// The workflow charges an order; the charge fails once and is retried, so
// the trace shows a start span with workflow-task and activity-attempt
// children, the retry linked to the failed attempt.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/migrations"
	weirotel "github.com/weirhq/weir/otel"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, &config{
		DatabaseURL:  os.Getenv("DATABASE_URL"),
		OTLPEndpoint: os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"),
		Out:          os.Stdout,
		Schema:       os.Getenv("WEIR_SCHEMA"),
	})
	if err != nil {
		log.Fatal(err)
	}
}

type config struct {
	// DatabaseURL is the Postgres to run on. Required.
	DatabaseURL string

	// OTLPEndpoint is the base URL of an OTLP/HTTP receiver; empty means
	// export to Out.
	OTLPEndpoint string

	// Out receives the stdout exporters' JSON and the run's result.
	Out io.Writer

	// Schema holds weir's tables; migrated if needed. Defaults to the
	// search_path's first.
	Schema string
}

// ChargeArgs are the args of the charge activity.
type ChargeArgs struct {
	Cents int64 `json:"cents"`
}

func (ChargeArgs) Kind() string { return "charge" }

// ChargeActivity fails its first attempt, as a flaky payment API would.
type ChargeActivity struct {
	activity.Defaults[ChargeArgs, string]
}

func (a *ChargeActivity) Execute(ctx context.Context, args ChargeArgs) (string, error) {
	info, _ := activity.GetInfo(ctx)
	if info.Attempt == 1 {
		return "", errors.New("payment API unavailable")
	}
	return fmt.Sprintf("charged %d cents on attempt %d", args.Cents, info.Attempt), nil
}

// OrderArgs are the args of the order workflow.
type OrderArgs struct {
	Cents int64 `json:"cents"`
}

func (OrderArgs) Kind() string { return "order" }

// OrderWorkflow charges an order.
type OrderWorkflow struct {
	workflow.Defaults[OrderArgs, string]
}

func (w *OrderWorkflow) Run(ctx workflow.Context, args OrderArgs) (string, error) {
	return workflow.ExecuteActivity[string](ctx, ChargeArgs(args), &workflow.ActivityOpts{
		RetryPolicy: &workflow.RetryPolicy{InitialInterval: 100 * time.Millisecond, MaximumAttempts: 3},
	}).Get(ctx)
}

func run(ctx context.Context, cfg *config) (err error) {
	if cfg.DatabaseURL == "" {
		return errors.New("set DATABASE_URL")
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer pool.Close()
	migrator, err := migrations.New(pool, &migrations.Config{Schema: cfg.Schema})
	if err != nil {
		return err
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}

	tp, mp, err := providers(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		// Shutting down flushes what is left to the exporters.
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err = errors.Join(err, tp.Shutdown(shutdownCtx), mp.Shutdown(shutdownCtx))
	}()

	clientConfig := &client.Config{Schema: cfg.Schema}
	if err := weirotel.InstallClient(clientConfig, tp, mp); err != nil {
		return err
	}
	c, err := client.New(pool, clientConfig)
	if err != nil {
		return err
	}
	defer c.Close()

	workerConfig := &worker.Config{Schema: cfg.Schema}
	if err := weirotel.InstallWorker(workerConfig, tp, mp); err != nil {
		return err
	}
	w, err := worker.New(pool, workerConfig)
	if err != nil {
		return err
	}
	worker.AddWorkflow(w, &OrderWorkflow{})
	worker.AddActivity(w, &ChargeActivity{})
	if err := w.Start(ctx); err != nil {
		return err
	}

	// Runs by state, counted when metrics are collected (until the
	// provider shuts down).
	if _, err := weirotel.ObserveRuns(mp, pool, cfg.Schema); err != nil {
		return err
	}

	started, err := c.Start(ctx, OrderArgs{Cents: 1299}, nil)
	if err != nil {
		return err
	}
	getCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	result, err := client.GetResult[string](getCtx, started)
	if err != nil {
		return err
	}
	// Stop the worker before the providers, so every span has ended.
	if err := w.Stop(ctx); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cfg.Out, "run %s: %s\n", started.RunID, result)
	return err
}

// providers builds the SDK's providers with stdout or OTLP/HTTP exporters.
func providers(ctx context.Context, cfg *config) (*sdktrace.TracerProvider, *metric.MeterProvider, error) {
	var (
		spans   sdktrace.SpanExporter
		metrics metric.Exporter
		err     error
	)
	if cfg.OTLPEndpoint != "" {
		base := strings.TrimRight(cfg.OTLPEndpoint, "/")
		if spans, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(base+"/v1/traces")); err != nil {
			return nil, nil, fmt.Errorf("creating OTLP trace exporter: %w", err)
		}
		if metrics, err = otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(base+"/v1/metrics")); err != nil {
			return nil, nil, fmt.Errorf("creating OTLP metric exporter: %w", err)
		}
	} else {
		if spans, err = stdouttrace.New(stdouttrace.WithWriter(cfg.Out)); err != nil {
			return nil, nil, fmt.Errorf("creating stdout trace exporter: %w", err)
		}
		if metrics, err = stdoutmetric.New(stdoutmetric.WithWriter(cfg.Out)); err != nil {
			return nil, nil, fmt.Errorf("creating stdout metric exporter: %w", err)
		}
	}
	res := resource.NewSchemaless(semconv.ServiceName(cmp.Or(os.Getenv("OTEL_SERVICE_NAME"), "weir-example")))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(spans),
		sdktrace.WithIDGenerator(weirotel.NewIDGenerator()), // retries link to the attempt before them
		sdktrace.WithResource(res),
	)
	mp := metric.NewMeterProvider(metric.WithReader(metric.NewPeriodicReader(metrics)), metric.WithResource(res))
	return tp, mp, nil
}
