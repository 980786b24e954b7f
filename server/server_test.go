package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/server"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestServer(t *testing.T) {
	t.Parallel()

	get := func(t *testing.T, srv *server.Server, path string, out any) int {
		t.Helper()
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), out))
		return rec.Code
	}

	t.Run("HealthzFailsWithoutDatabase", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		cluster := dbtest.Server(ctx, t, nil)
		pool, err := pgxpool.New(ctx, cluster.URL("postgres"))
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		srv, err := server.New(pool, nil)
		require.NoError(t, err)

		var health server.HealthResponse
		require.Equal(t, http.StatusOK, get(t, srv, "/healthz", &health))

		require.NoError(t, cluster.Stop(ctx))
		require.Equal(t, http.StatusServiceUnavailable, get(t, srv, "/healthz", &health))
		require.Equal(t, "unavailable", health.Status)
		require.NotEqual(t, "ok", health.Database)

		var ready server.ReadyResponse
		require.Equal(t, http.StatusServiceUnavailable, get(t, srv, "/readyz", &ready))
		require.NotEmpty(t, ready.Error)

		// Neither says who connects where: that is in the log only.
		cfg := pool.Config().ConnConfig
		for _, secret := range []string{cfg.User, cfg.Database, cfg.Host, strconv.Itoa(int(cfg.Port))} {
			require.NotContains(t, health.Database, secret)
			require.NotContains(t, ready.Error, secret)
		}
	})

	t.Run("ReadyzReportsLinesBehind", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.EmptySchema(ctx, t)
		srv, err := server.New(pool, &server.Config{Schema: schema})
		require.NoError(t, err)

		var ready server.ReadyResponse
		require.Equal(t, http.StatusServiceUnavailable, get(t, srv, "/readyz", &ready))
		require.Equal(t, "not_ready", ready.Status)
		require.Contains(t, ready.Error, "weir migrate up")
		require.Len(t, ready.Lines, len(migrations.Lines()))
		for _, line := range ready.Lines {
			require.Zero(t, line.Current)
			require.NotEmpty(t, line.Pending)
		}

		migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
		require.NoError(t, err)
		_, err = migrator.Up(ctx, nil)
		require.NoError(t, err)
		_, err = migrator.Down(ctx, &migrations.DownOpts{Line: migrations.LineWeir})
		require.NoError(t, err)

		var afterDown server.ReadyResponse
		require.Equal(t, http.StatusServiceUnavailable, get(t, srv, "/readyz", &afterDown))
		for _, line := range afterDown.Lines {
			require.Equal(t, line.Line == migrations.LineWeir, len(line.Pending) > 0, line.Line)
		}
	})

	t.Run("ReadyWhenMigrated", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		srv, err := server.New(dbtest.Pool(ctx, t), &server.Config{Schema: dbtest.TestSchema(ctx, t)})
		require.NoError(t, err)

		var health server.HealthResponse
		require.Equal(t, http.StatusOK, get(t, srv, "/healthz", &health))
		require.Equal(t, server.HealthResponse{Database: "ok", Status: "ok"}, health)

		var ready server.ReadyResponse
		require.Equal(t, http.StatusOK, get(t, srv, "/readyz", &ready))
		require.Equal(t, "ready", ready.Status)
		require.Empty(t, ready.Error)
		for _, line := range ready.Lines {
			require.Equal(t, line.Required, line.Current)
		}
	})

	t.Run("RejectsBadConfig", func(t *testing.T) {
		t.Parallel()
		_, err := server.New(nil, nil)
		require.Error(t, err)
		_, err = server.New(dbtest.Pool(context.Background(), t), &server.Config{CheckTimeout: -1})
		require.Error(t, err)
		// Secrets easy to guess are refused at startup.
		for _, secret := range []string{"short-0123", "passwordpassword", "abcdabcdabcdabcd", "aaaaaaaaaaaaaaaaaaaaaaaa", "changemechangeme"} {
			_, err = server.New(dbtest.Pool(context.Background(), t), &server.Config{Tokens: []*server.Token{
				{Name: "weak", Namespaces: []string{"*"}, Role: server.RoleRead, Secret: secret},
			}})
			require.Error(t, err, secret)
			require.NotContains(t, err.Error(), secret, "errors never show a secret")
			_, err = server.ParseTokens("weak:read:*:" + secret)
			require.Error(t, err, secret)
		}
		_, err = server.New(dbtest.Pool(context.Background(), t), &server.Config{Tokens: []*server.Token{
			{Name: "random", Namespaces: []string{"*"}, Role: server.RoleRead, Secret: "9f86d081884c7d659a2feaa0c55ad015"},
		}})
		require.NoError(t, err)
	})
}
