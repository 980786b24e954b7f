package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weirhq/weir/internal/store"
)

// metrics are the server's Prometheus metrics, in a registry of its own.
type metrics struct {
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge
	registry *prometheus.Registry
	requests *prometheus.CounterVec
}

func newMetrics(pool *pgxpool.Pool, st *store.Store, config *Config) *metrics {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "weir_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by route (result long polls include their wait).",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weir_http_requests_in_flight",
			Help: "HTTP requests being answered.",
		}),
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_http_requests_total",
			Help: "HTTP requests answered, by route and status code.",
		}, []string{"route", "code"}),
	}
	poolGauge := func(name, help string, read func(*pgxpool.Stat) int32) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			return float64(read(pool.Stat()))
		})
	}
	m.registry.MustRegister(
		m.duration, m.inFlight, m.requests,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		poolGauge("weir_db_pool_acquired_connections", "Postgres connections in use.", (*pgxpool.Stat).AcquiredConns),
		poolGauge("weir_db_pool_total_connections", "Postgres connections open.", (*pgxpool.Stat).TotalConns),
	)
	if config.RunMetrics != RunMetricsOff {
		m.registry.MustRegister(newRunsCollector(pool, st, config))
	}
	return m
}

// handleMetrics serves /metrics, to the bearer of Config.MetricsToken when
// one is set.
func (s *Server) handleMetrics() http.HandlerFunc {
	serve := promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{})
	want := sha256.Sum256([]byte(s.config.MetricsToken))
	return func(w http.ResponseWriter, r *http.Request) {
		if s.config.MetricsToken != "" {
			got := sha256.Sum256([]byte(bearerSecret(r)))
			if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				s.writeError(w, r, newError(http.StatusUnauthorized, CodeUnauthenticated,
					"/metrics needs the metrics token (Authorization: Bearer <token>)", nil))
				return
			}
		}
		serve.ServeHTTP(w, r)
	}
}

// instrument counts and times a route's requests.
func (m *metrics) instrument(route string, next http.Handler) http.Handler {
	labels := prometheus.Labels{"route": route}
	return promhttp.InstrumentHandlerInFlight(m.inFlight,
		promhttp.InstrumentHandlerDuration(m.duration.MustCurryWith(labels),
			promhttp.InstrumentHandlerCounter(m.requests.MustCurryWith(labels), next)))
}

// MetricsRegisterer is the registry /metrics serves: register more collectors
// there (the otel package's RegisterPrometheus, say) to expose them.
func (s *Server) MetricsRegisterer() prometheus.Registerer { return s.metrics.registry }
