package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirhq/weir/internal/store"
)

// RunMetrics picks how /metrics counts workflow runs (the gauge
// weir_workflow_runs). A process that also exports the otel package's
// ObserveRuns into MetricsRegisterer, whose gauge has the same name, sets
// RunMetricsOff.
type RunMetrics string

const (
	// RunMetricsByState counts runs by state over all namespaces: no
	// tenant's namespaces or kinds show. The default.
	RunMetricsByState RunMetrics = "state"

	// RunMetricsByNamespace counts runs by namespace, workflow kind and
	// state. Whoever reads /metrics sees every namespace and the kinds its
	// writers chose, so it needs Config.MetricsToken.
	RunMetricsByNamespace RunMetrics = "namespace"

	// RunMetricsOff leaves the gauge out.
	RunMetricsOff RunMetrics = "off"
)

// RunMetricsIntervalDefault is how often, at most, the runs gauge is
// counted in the database.
const RunMetricsIntervalDefault = 30 * time.Second

// runCountTimeout bounds one count of the runs.
const runCountTimeout = 5 * time.Second

// runsCollector is the runs gauge: counted with one grouped query of
// weir_run at most once an interval, however many scrape; scrapes in
// between (and while a count fails) get the last counts.
type runsCollector struct {
	byKind   bool // by namespace, kind and state; else by state
	desc     *prometheus.Desc
	interval time.Duration
	logger   *slog.Logger
	pool     *pgxpool.Pool
	store    *store.Store

	mu      sync.Mutex // held while counting: concurrent scrapes share one count
	counted time.Time
	counts  []store.RunCount
}

func newRunsCollector(pool *pgxpool.Pool, st *store.Store, config *Config) *runsCollector {
	c := &runsCollector{interval: config.RunMetricsInterval, logger: config.Logger, pool: pool, store: st}
	const help = "Workflow runs in the database, counted at most once per interval."
	if c.byKind = config.RunMetrics == RunMetricsByNamespace; c.byKind {
		c.desc = prometheus.NewDesc("weir_workflow_runs", help+" By namespace, workflow kind and state.", []string{"namespace", "kind", "state"}, nil)
	} else {
		c.desc = prometheus.NewDesc("weir_workflow_runs", help+" By state.", []string{"state"}, nil)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *runsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *runsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, count := range c.current() {
		labels := []string{count.State}
		if c.byKind {
			labels = []string{count.Namespace, count.Kind, count.State}
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(count.N), labels...)
	}
}

func (c *runsCollector) current() []store.RunCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.counted.IsZero() && time.Since(c.counted) < c.interval {
		return c.counts
	}
	c.counted = time.Now() // a failed count, too, waits an interval
	ctx, cancel := context.WithTimeout(context.Background(), runCountTimeout)
	defer cancel()
	counts, err := c.store.CountRuns(ctx, c.pool, c.byKind)
	if err != nil {
		c.logger.Warn("counting runs for /metrics", slog.String("error", err.Error()))
		return c.counts
	}
	c.counts = counts
	return counts
}
