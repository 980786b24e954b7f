package otel

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// PrometheusReader returns a metric reader whose metrics are collected by
// reg (the server's /metrics registry, say), for a MeterProvider of your
// own: give it sdkmetric.WithReader next to your other readers. Names
// follow the Prometheus exporter's translation: weir.workflow.started
// becomes weir_workflow_started_total, weir.activity.execution.duration
// becomes weir_activity_execution_duration_seconds. Shutting the provider
// down unregisters it.
func PrometheusReader(reg prometheus.Registerer) (sdkmetric.Reader, error) {
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, fmt.Errorf("otel: creating Prometheus exporter: %w", err)
	}
	return exporter, nil
}

// RegisterPrometheus returns a MeterProvider whose metrics are collected by
// reg (see PrometheusReader), built with opts too: another reader
// (sdkmetric.WithReader, an OTLP exporter's, say) then sees the same
// metrics, so one provider serves both. Pass it to InstallClient,
// InstallWorker or ObserveRuns in the same process, once each. Shut the
// provider down to unregister.
func RegisterPrometheus(reg prometheus.Registerer, opts ...sdkmetric.Option) (*sdkmetric.MeterProvider, error) {
	reader, err := PrometheusReader(reg)
	if err != nil {
		return nil, err
	}
	return sdkmetric.NewMeterProvider(append([]sdkmetric.Option{sdkmetric.WithReader(reader)}, opts...)...), nil
}
