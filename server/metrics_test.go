package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/server"
)

// countingTracer counts the queries that group runs.
type countingTracer struct{ groupBys atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "GROUP BY") {
		c.groupBys.Add(1)
	}
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestMetricsRuns: /metrics counts runs by state only unless configured
// otherwise (and then behind a token), and many scrapes share one count.
func TestMetricsRuns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema := dbtest.TestSchema(ctx, t)
	tracer := &countingTracer{}
	poolConfig, err := pgxpool.ParseConfig(dbtest.URL(ctx, t))
	require.NoError(t, err)
	poolConfig.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, poolConfig)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	for _, ns := range []string{"tenant-a", "tenant-b"} {
		c, err := client.New(dbtest.Pool(ctx, t), &client.Config{Namespace: ns, Schema: schema})
		require.NoError(t, err)
		_, err = c.Start(ctx, client.RawArgs{JSON: []byte(`{}`), KindName: "secret_kind_of_" + ns}, nil)
		require.NoError(t, err)
		require.NoError(t, c.Close())
	}
	const metricsSecret = "metrics-secret-0123456789"

	serve := func(t *testing.T, config *server.Config) string {
		t.Helper()
		config.Schema = schema
		srv, err := server.New(pool, config)
		require.NoError(t, err)
		httpServer := httptest.NewServer(srv.Handler())
		t.Cleanup(func() {
			httpServer.Close()
			require.NoError(t, srv.Close())
		})
		return httpServer.URL
	}
	scrape := func(t *testing.T, url, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/metrics", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(data)
	}

	t.Run("ByStateOpenAndCached", func(t *testing.T) {
		url := serve(t, &server.Config{RunMetricsInterval: time.Hour})
		before := tracer.groupBys.Load()
		for range 20 {
			status, text := scrape(t, url, "")
			require.Equal(t, http.StatusOK, status)
			require.Contains(t, text, `weir_workflow_runs{state="running"} 2`)
			require.NotContains(t, text, "tenant-a")
			require.NotContains(t, text, "secret_kind_of_")
		}
		require.Equal(t, int64(1), tracer.groupBys.Load()-before, "20 scrapes, one count")
	})

	t.Run("ByNamespaceNeedsToken", func(t *testing.T) {
		_, err := server.New(pool, &server.Config{RunMetrics: server.RunMetricsByNamespace, Schema: schema})
		require.Error(t, err)
		_, err = server.New(pool, &server.Config{MetricsToken: "short", Schema: schema})
		require.Error(t, err)
		_, err = server.New(pool, &server.Config{RunMetrics: "everything", Schema: schema})
		require.Error(t, err)

		url := serve(t, &server.Config{MetricsToken: metricsSecret, RunMetrics: server.RunMetricsByNamespace})
		status, text := scrape(t, url, "")
		require.Equal(t, http.StatusUnauthorized, status)
		require.NotContains(t, text, "tenant-a")
		status, _ = scrape(t, url, "wrong-secret-0123456789")
		require.Equal(t, http.StatusUnauthorized, status)
		status, text = scrape(t, url, metricsSecret)
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, text, `weir_workflow_runs{kind="secret_kind_of_tenant-a",namespace="tenant-a",state="running"} 1`)
	})

	t.Run("Off", func(t *testing.T) {
		url := serve(t, &server.Config{RunMetrics: server.RunMetricsOff})
		status, text := scrape(t, url, "")
		require.Equal(t, http.StatusOK, status)
		require.NotContains(t, text, "weir_workflow_runs")
	})
}
