package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/internal/pgcluster"
)

// PoolMaxConns is the most connections any contender gets: DBOS's default
// pool size, and what perf-anchors used for every contender.
const PoolMaxConns = 20

// pgSettings are the server settings recorded in every Result's Env.
var pgSettings = []string{
	"shared_buffers", "synchronous_commit", "fsync", "wal_sync_method", "full_page_writes",
	"wal_level", "max_wal_size", "checkpoint_timeout", "commit_delay", "max_connections",
	"work_mem", "autovacuum",
}

// server is the Postgres server the harness measures on: DATABASE_URL's, or
// a private durable cluster it started.
type server struct {
	base    *url.URL // a URL on the server; createDatabase swaps its path
	cluster *pgcluster.Cluster
	dir     string

	logf         func(string, ...any)
	noCheckpoint atomic.Bool // the role may not run CHECKPOINT (settle)
}

// StockMaxConnections is the private server's max_connections unless a
// workload needs more: Postgres's stock value.
const StockMaxConnections = 100

// startServer connects to DATABASE_URL's server when set, else starts a
// private one allowing maxConnections connections.
func startServer(ctx context.Context, logf func(string, ...any), maxConnections int) (*server, error) {
	if raw := os.Getenv("DATABASE_URL"); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
			return nil, errors.New("DATABASE_URL must be a postgres:// URL")
		}
		return &server{base: u, logf: logf}, nil
	}

	dir, err := os.MkdirTemp("", "weir-bench-postgres-")
	if err != nil {
		return nil, fmt.Errorf("making temp dir: %w", err)
	}
	// Postgres runs as another user when we are root; let it in.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("opening temp dir %s: %w", dir, err)
	}
	cluster, err := pgcluster.New(&pgcluster.Config{
		Dir:     dir,
		Durable: true, // fsync and full page writes on, as a stock server
		// pgcluster raises max_connections for tests; keep the stock value
		// unless the workload needs more.
		Settings: map[string]string{"max_connections": strconv.Itoa(maxConnections)},
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	start := time.Now()
	if err := cluster.Start(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	logf("private Postgres (durable) ready in %s", time.Since(start).Round(time.Millisecond))
	u, _ := url.Parse(cluster.URL("postgres"))
	return &server{base: u, cluster: cluster, dir: dir, logf: logf}, nil
}

// stop stops the private server and removes its files.
func (s *server) stop() error {
	if s.cluster == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.cluster.Stop(ctx)
	return errors.Join(err, os.RemoveAll(s.dir))
}

// url returns the server's URL for database.
func (s *server) url(database string) string {
	u := *s.base
	u.Path = "/" + database
	return u.String()
}

// adminConn connects to the database of the base URL.
func (s *server) adminConn(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, s.base.String())
}

// createDatabase drops database if it exists and creates it empty.
func (s *server) createDatabase(ctx context.Context, database string) error {
	conn, err := s.adminConn(ctx)
	if err != nil {
		return fmt.Errorf("connecting to admin database: %w", err)
	}
	defer conn.Close(ctx)
	name := pgx.Identifier{database}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("dropping database %s: %w", database, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return fmt.Errorf("creating database %s: %w", database, err)
	}
	return nil
}

// dropDatabase drops database, disconnecting whoever is still connected.
func (s *server) dropDatabase(ctx context.Context, database string) error {
	conn, err := s.adminConn(ctx)
	if err != nil {
		return fmt.Errorf("connecting to admin database: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{database}.Sanitize()+" WITH (FORCE)")
	return err
}

// newPool opens a pool of at most size connections to connString.
func newPool(ctx context.Context, connString string, size int) (*pgxpool.Pool, error) {
	config, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	config.MaxConns = int32(size)
	return pgxpool.NewWithConfig(ctx, config)
}

// env describes the server, the machine and weir's commit.
func (s *server) env(ctx context.Context) (*Env, error) {
	conn, err := s.adminConn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	pg := map[string]string{}
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return nil, err
	}
	pg["version"] = version
	rows, err := conn.Query(ctx, "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY($1)", pgSettings)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var name, setting string
		if err := rows.Scan(&name, &setting); err != nil {
			return nil, err
		}
		pg[name] = setting
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// The admin connection uses the contenders' URL with another database,
	// so it negotiates encryption as theirs do.
	var tls bool
	if err := conn.QueryRow(ctx, "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)").Scan(&tls); err != nil {
		return nil, err
	}
	rt, err := measureRoundTrip(ctx, conn)
	if err != nil {
		return nil, err
	}
	return &Env{
		CPUs:          runtime.NumCPU(),
		CPUModel:      cpuModel(),
		GoVersion:     runtime.Version(),
		PG:            pg,
		PrivateServer: s.cluster != nil,
		RoundTrip:     rt,
		TLS:           &tls,
		WeirCommit:    weirCommit(),
	}, nil
}

// roundTripIdle is the pause before each of measureRoundTrip's idle round
// trips: about the gap between two workflows' steps at the open-loop rate.
const roundTripIdle = 50 * time.Millisecond

// measureRoundTrip times SELECT 1 on conn: the median of 40 sent back to
// back, and of 20 sent each after roundTripIdle of nothing.
func measureRoundTrip(ctx context.Context, conn *pgx.Conn) (*RoundTrip, error) {
	timed := func(n int, pause time.Duration) (float64, error) {
		ms := make([]float64, n)
		for i := range ms {
			if pause > 0 {
				select {
				case <-time.After(pause):
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			}
			begin := time.Now()
			var one int
			if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
				return 0, fmt.Errorf("timing a round trip: %w", err)
			}
			ms[i] = float64(time.Since(begin).Microseconds()) / 1000
		}
		return percentile(ms, 50), nil
	}
	busy, err := timed(40, 0)
	if err != nil {
		return nil, err
	}
	idle, err := timed(20, roundTripIdle)
	if err != nil {
		return nil, err
	}
	return &RoundTrip{BackToBackMs: busy, AfterIdleMs: idle, IdleMs: float64(roundTripIdle.Milliseconds())}, nil
}

// weirCommit is the commit of the checkout the harness runs in, with
// "-dirty" when it has uncommitted changes, or "unknown" outside git.
func weirCommit() string {
	out, err := exec.Command("git", "rev-parse", "HEAD").Output() //nolint:noctx // a quick local command
	if err != nil {
		return "unknown"
	}
	commit := strings.TrimSpace(string(out))
	status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output() //nolint:noctx // as above
	if err == nil && len(strings.TrimSpace(string(status))) > 0 {
		commit += "-dirty"
	}
	return commit
}

// walLSN reads the current WAL insert position in bytes.
func walLSN(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
},
) (int64, error) {
	var lsn int64
	err := db.QueryRow(ctx, "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint").Scan(&lsn)
	return lsn, err
}
