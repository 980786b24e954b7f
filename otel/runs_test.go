package otel_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
	weirotel "github.com/weirhq/weir/otel"
)

func TestObserveRuns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	p := newProviders(t)

	c, err := client.New(pool, &client.Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	for range 2 {
		_, err := c.Start(ctx, TracedArgs{}, nil)
		require.NoError(t, err)
	}
	run, err := c.Start(ctx, TracedArgs{}, nil)
	require.NoError(t, err)
	require.NoError(t, c.Terminate(ctx, run.WorkflowID, run.RunID, "test"))

	registration, err := weirotel.ObserveRuns(p.mp, pool, schema)
	require.NoError(t, err)
	t.Cleanup(func() { _ = registration.Unregister() })

	rm := p.collect(t)
	require.Equal(t, int64(2), gaugeOf(t, rm, weirotel.MetricWorkflowRuns, map[attribute.Key]string{
		weirotel.AttrState: "running", weirotel.AttrWorkflowKind: "traced", weirotel.AttrNamespace: "default",
	}))
	require.Equal(t, int64(1), gaugeOf(t, rm, weirotel.MetricWorkflowRuns, map[attribute.Key]string{weirotel.AttrState: "terminated"}))
	require.Zero(t, gaugeOf(t, rm, weirotel.MetricWorkflowRuns, map[attribute.Key]string{weirotel.AttrState: "completed"}))

	_, err = weirotel.ObserveRuns(nil, pool, schema)
	require.Error(t, err)
}

func gaugeOf(t *testing.T, rm metricdata.ResourceMetrics, name string, want map[attribute.Key]string) int64 {
	t.Helper()
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			g, ok := m.Data.(metricdata.Gauge[int64])
			require.True(t, ok, name)
			for _, p := range g.DataPoints {
				if matches(p.Attributes, want) {
					total += p.Value
				}
			}
		}
	}
	return total
}
