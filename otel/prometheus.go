package otel

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// RegisterPrometheus returns a MeterProvider whose metrics are collected by
// reg (the server's /metrics registry, say): pass it to InstallClient,
// InstallWorker or ObserveRuns in the same process. Names follow the
// Prometheus exporter's translation: weir.workflow.started becomes
// weir_workflow_started_total, weir.activity.execution.duration becomes
// weir_activity_execution_duration_seconds. Shut the provider down to
// unregister.
func RegisterPrometheus(reg prometheus.Registerer) (*sdkmetric.MeterProvider, error) {
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, fmt.Errorf("otel: creating Prometheus exporter: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)), nil
}
