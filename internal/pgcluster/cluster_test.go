package pgcluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/pgcluster"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// Not parallel: it sets the environment.
func TestMissingBinDir(t *testing.T) {
	t.Setenv(pgcluster.EnvBinDir, t.TempDir())
	_, err := pgcluster.New(&pgcluster.Config{Dir: t.TempDir()})
	require.ErrorIs(t, err, pgcluster.ErrBinariesNotFound)
}

func TestCluster(t *testing.T) {
	t.Parallel()

	query := func(ctx context.Context, t *testing.T, url, sql string) string {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(context.WithoutCancel(ctx))
		var out string
		require.NoError(t, conn.QueryRow(ctx, sql).Scan(&out))
		return out
	}
	exec := func(ctx context.Context, t *testing.T, url string, sqls ...string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(context.WithoutCancel(ctx))
		for _, sql := range sqls {
			_, err := conn.Exec(ctx, sql)
			require.NoError(t, err)
		}
	}

	t.Run("CrashRecoversCommittedData", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		cluster := dbtest.Server(ctx, t, nil)
		url := cluster.URL("postgres")

		exec(ctx, t, url, "CREATE TABLE kept (v text)", "INSERT INTO kept VALUES ('before crash')")
		require.NoError(t, cluster.Crash(ctx))
		require.Zero(t, cluster.PID())
		require.NoError(t, cluster.Start(ctx))
		require.Equal(t, "before crash", query(ctx, t, url, "SELECT v FROM kept"))
	})

	// A killed backend makes the postmaster end every session and recover
	// in place: the same postmaster, the committed data kept, the other
	// session's connection ended.
	t.Run("CrashBackendResetsInPlace", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		cluster := dbtest.Server(ctx, t, nil)
		url := cluster.URL("postgres")
		postmaster := cluster.PID()

		exec(ctx, t, url, "CREATE TABLE kept (v text)", "INSERT INTO kept VALUES ('before crash')")
		other, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer other.Close(context.WithoutCancel(ctx))
		require.Error(t, cluster.CrashBackend(ctx, postmaster), "the postmaster is not one of its server processes")
		require.Error(t, cluster.CrashBackend(ctx, os.Getpid()))

		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(context.WithoutCancel(ctx))
		var pid int
		require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		require.NoError(t, cluster.CrashBackend(ctx, pid))
		require.Equal(t, postmaster, cluster.PID(), "the same postmaster")
		require.Equal(t, "before crash", query(ctx, t, url, "SELECT v FROM kept"))
		_, err = other.Exec(ctx, "SELECT 1")
		require.Error(t, err, "the crash reset ended the other session")
	})

	t.Run("DirRequired", func(t *testing.T) {
		t.Parallel()
		_, err := pgcluster.New(&pgcluster.Config{})
		require.Error(t, err)
		_, err = pgcluster.New(nil)
		require.Error(t, err)
	})

	t.Run("PauseAndResume", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		cluster := dbtest.Server(ctx, t, nil)
		url := cluster.URL("postgres")

		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(context.WithoutCancel(ctx))

		require.NoError(t, cluster.Pause())
		shortCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err = conn.Exec(shortCtx, "SELECT 1")
		require.Error(t, err, "a paused server answers nothing")

		require.NoError(t, cluster.Resume())
		require.Equal(t, "1", query(ctx, t, url, "SELECT '1'"))
	})

	t.Run("RestartKeepsPortAndData", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		cluster := dbtest.Server(ctx, t, nil)
		url := cluster.URL("postgres")
		port := cluster.Port()
		pid := cluster.PID()
		require.NotZero(t, pid)

		exec(ctx, t, url, "CREATE TABLE kept (v text)", "INSERT INTO kept VALUES ('hello')")
		require.NoError(t, cluster.Stop(ctx))
		require.NoError(t, cluster.Start(ctx))
		require.Equal(t, port, cluster.Port())
		require.NotEqual(t, pid, cluster.PID())
		require.Equal(t, "hello", query(ctx, t, url, "SELECT v FROM kept"))
	})

	t.Run("RunsUnprivilegedUnderRoot", func(t *testing.T) {
		t.Parallel()
		if os.Geteuid() != 0 {
			t.Skip("only meaningful when the tests run as root")
		}
		ctx := t.Context()
		cluster := dbtest.Server(ctx, t, nil)
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cluster.PID()), "status"))
		require.NoError(t, err)
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "Uid:") {
				require.NotEqual(t, "0", strings.Fields(line)[1], "postgres must not run as root")
			}
		}
	})

	t.Run("StopIsCleanAndIdempotent", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		cluster := dbtest.Server(ctx, t, nil)
		pid := cluster.PID()

		require.NoError(t, cluster.Stop(ctx))
		require.NoError(t, cluster.Stop(ctx))
		require.Zero(t, cluster.PID())
		_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
		require.ErrorIs(t, err, os.ErrNotExist, "postmaster gone")
		_, err = os.Stat(filepath.Join(cluster.DataDir(), "postmaster.pid"))
		require.ErrorIs(t, err, os.ErrNotExist, "a clean shutdown removes the lock file")

		_, err = pgx.Connect(ctx, cluster.URL("postgres"))
		require.Error(t, err)
		require.ErrorIs(t, cluster.Pause(), pgcluster.ErrNotRunning)
	})
}
