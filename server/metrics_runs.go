package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirhq/weir/internal/dbschema"
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
	desc     *prometheus.Desc
	interval time.Duration
	labels   int // how many of namespace, kind, state the query groups by (1 or 3)
	logger   *slog.Logger
	pool     *pgxpool.Pool
	query    string

	mu      sync.Mutex // held while counting: concurrent scrapes share one count
	counted time.Time
	counts  []runCount
}

type runCount struct {
	labels []string
	n      int64
}

func newRunsCollector(pool *pgxpool.Pool, config *Config) *runsCollector {
	run := dbschema.New(config.Schema).Run
	c := &runsCollector{interval: config.RunMetricsInterval, logger: config.Logger, pool: pool}
	const help = "Workflow runs in the database, counted at most once per interval."
	if config.RunMetrics == RunMetricsByNamespace {
		c.desc = prometheus.NewDesc("weir_workflow_runs", help+" By namespace, workflow kind and state.", []string{"namespace", "kind", "state"}, nil)
		c.labels, c.query = 3, "SELECT namespace, kind, state, count(*) FROM "+run+" GROUP BY namespace, kind, state"
	} else {
		c.desc = prometheus.NewDesc("weir_workflow_runs", help+" By state.", []string{"state"}, nil)
		c.labels, c.query = 1, "SELECT state, count(*) FROM "+run+" GROUP BY state"
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *runsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *runsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, count := range c.current() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(count.n), count.labels...)
	}
}

func (c *runsCollector) current() []runCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.counted.IsZero() && time.Since(c.counted) < c.interval {
		return c.counts
	}
	c.counted = time.Now() // a failed count, too, waits an interval
	counts, err := c.count()
	if err != nil {
		c.logger.Warn("counting runs for /metrics", slog.String("error", err.Error()))
		return c.counts
	}
	c.counts = counts
	return counts
}

func (c *runsCollector) count() ([]runCount, error) {
	ctx, cancel := context.WithTimeout(context.Background(), runCountTimeout)
	defer cancel()
	rows, err := c.pool.Query(ctx, c.query)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (runCount, error) {
		count := runCount{labels: make([]string, c.labels)}
		dst := make([]any, 0, c.labels+1)
		for i := range count.labels {
			dst = append(dst, &count.labels[i])
		}
		return count, row.Scan(append(dst, &count.n)...)
	})
}
