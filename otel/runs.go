package otel

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/store"
)

// runsQueryTimeout bounds the query behind one observation of the runs gauge.
const runsQueryTimeout = 5 * time.Second

// ObserveRuns reports the gauge weir.workflow.runs: the runs in the database,
// by namespace, workflow kind and state (running, completed, failed,
// cancelled, terminated, continued_as_new, timed_out), read with one
// grouped count of weir_run in schema ("" for the search_path's) each time
// mp's reader collects. It counts the runs that exist, whoever closed
// them; weir.workflow.closed (the worker interceptor's counter, from
// TaskInfo.Closed) counts the closes by workflow code as they happen, but
// not runs terminated or timed out, which no workflow task closes. Counts
// drop when retention deletes runs, and every process that observes reports
// the same numbers (aggregate with max, not sum). Unregister the returned
// Registration to stop.
func ObserveRuns(mp metric.MeterProvider, pool *pgxpool.Pool, schema string) (metric.Registration, error) {
	if mp == nil || pool == nil {
		return nil, errors.New("otel: ObserveRuns needs a MeterProvider and a pool")
	}
	meter := mp.Meter(ScopeName)
	gauge, err := meter.Int64ObservableGauge(MetricWorkflowRuns, metric.WithUnit("{run}"),
		metric.WithDescription("Workflow runs in the database, by namespace, kind and state."))
	if err != nil {
		return nil, fmt.Errorf("otel: creating runs gauge: %w", err)
	}
	st := store.New(dbschema.New(schema))
	return meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, runsQueryTimeout)
		defer cancel()
		counts, err := st.CountRuns(ctx, pool, true)
		if err != nil {
			return fmt.Errorf("otel: counting runs: %w", err)
		}
		for _, c := range counts {
			o.ObserveInt64(gauge, c.N, metric.WithAttributes(
				AttrNamespace.String(c.Namespace), AttrWorkflowKind.String(c.Kind), AttrState.String(c.State)))
		}
		return nil
	}, gauge)
}
