package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/devexamples"
	"github.com/weirhq/weir/internal/pgcluster"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/worker"
)

const (
	devAddrDefault     = "127.0.0.1:8844"
	devDatabaseDefault = "weir"
	devPortFile        = "port"
)

type devOpts struct {
	dataDir  string
	examples bool
	server   serverOpts
}

func newDevCommand(g *globals) *cobra.Command {
	opts := &devOpts{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Start weir locally with zero configuration",
		Long: `Start weir locally with zero configuration.

With DATABASE_URL (or --database-url) set, weir dev uses that database.
Otherwise it starts a private Postgres from the locally installed binaries
(found on PATH or under /usr/lib/postgresql/*/bin) in a data directory it owns,
which survives restarts. Either way it migrates the schema, serves HTTP until
interrupted, and then stops its Postgres cleanly.

It serves the whole HTTP API (see weir server --help). Without tokens the
API is open, which weir dev allows only on a loopback address; it then
answers only requests to a loopback Host from a loopback Origin (if any),
and API writes only as application/json, so web pages of other sites
cannot drive it. With --token or WEIR_TOKENS it checks tokens like weir
server.

With --examples it also runs a worker for small versions of the example
workflows (hello, order-saga, approval; see examples/) on the River queue
` + devexamples.Queue + `, and starts a few of them, so that the web UI shows
runs in every state: completed, failed, a saga that compensated, and an
approval that waits for a signal. Their workflow IDs and request IDs are
fixed, so starting weir dev --examples again starts nothing new. Decide the
approval with:

  weir workflow signal approval-r-1 approval.decision --args '{"approved":true,"by":"you"}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd.Context(), g, opts)
		},
	}
	addServerFlags(cmd, g, &opts.server, devAddrDefault)
	cmd.Flags().StringVar(&opts.dataDir, "data-dir", os.Getenv("WEIR_DEV_DIR"),
		"directory of the private Postgres (env WEIR_DEV_DIR; default "+defaultDevDir()+")")
	cmd.Flags().BoolVar(&opts.examples, "examples", false,
		"also run the example workers and start a few example workflows")
	return cmd
}

func runDev(ctx context.Context, g *globals, opts *devOpts) (err error) {
	databaseURL := g.databaseURL
	if databaseURL == "" {
		cluster, url, err := startDevCluster(ctx, g, opts)
		if err != nil {
			return err
		}
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if stopErr := cluster.Stop(stopCtx); stopErr != nil {
				err = errors.Join(err, fmt.Errorf("stopping Postgres: %w", stopErr))
				return
			}
			fmt.Fprintln(g.stdout, "weir dev: Postgres stopped")
		}()
		databaseURL = url
	} else {
		fmt.Fprintln(g.stdout, "weir dev: using DATABASE_URL")
	}

	pool, err := openPool(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrateUp(ctx, g, pool, "weir dev"); err != nil {
		return err
	}

	config, err := opts.server.config(g)
	if err != nil {
		return err
	}
	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", opts.server.addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", opts.server.addr, err)
	}
	auth := fmt.Sprintf("%d API tokens", len(config.Tokens))
	if len(config.Tokens) == 0 {
		if tcp, ok := listener.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
			_ = listener.Close()
			return usageError(fmt.Errorf("weir dev serves the API without tokens only on loopback, not on %s: "+
				"listen on 127.0.0.1 or set WEIR_TOKENS (see weir server --help)", listener.Addr()))
		}
		config.AllowUnauthenticated = true
		auth = "API open without auth: loopback only"
	}
	srv, err := server.New(pool, config)
	if err != nil {
		_ = listener.Close()
		return usageError(err)
	}
	defer srv.Close()

	if opts.examples {
		stop, err := runDevExamples(ctx, g, pool)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}

	fmt.Fprintf(g.stdout, "weir dev: serving http://%s (%s; UI /ui/, River UI /riverui/, API /api/v1, health /healthz, readiness /readyz, metrics /metrics)\n",
		listener.Addr(), auth)
	fmt.Fprintln(g.stdout, "weir dev: press Ctrl-C to stop")
	if err := srv.Serve(ctx, listener); err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, "weir dev: shutting down")
	return nil
}

// runDevExamples starts a worker of the example workflows and starts them
// (idempotently). The returned function stops the worker.
func runDevExamples(ctx context.Context, g *globals, pool *pgxpool.Pool) (stop func() error, err error) {
	w, err := worker.New(pool, &worker.Config{Logger: g.logger(), Queues: devexamples.Queues(), Schema: g.schema})
	if err != nil {
		return nil, err
	}
	devexamples.Register(w)
	if err := w.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting the examples' worker: %w", err)
	}
	stop = func() error {
		// Let running tasks finish (up to 10s), even though ctx is done.
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := w.Stop(stopCtx); err != nil {
			return fmt.Errorf("stopping the examples' worker: %w", err)
		}
		return nil
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, stop())
		}
	}()

	c, err := client.New(pool, &client.Config{Logger: g.logger(), Schema: g.schema})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	started, err := devexamples.Start(ctx, c)
	if err != nil {
		return nil, err
	}
	for _, s := range started {
		switch {
		case s.Skipped != nil:
			fmt.Fprintf(g.stdout, "weir dev: example %s skipped: %v\n", s.WorkflowID, s.Skipped)
		case s.Run.Created:
			fmt.Fprintf(g.stdout, "weir dev: example %s started (%s: %s)\n", s.WorkflowID, s.Want, s.About)
		default:
			fmt.Fprintf(g.stdout, "weir dev: example %s already started (%s: %s)\n", s.WorkflowID, s.Want, s.About)
		}
	}
	return stop, nil
}

// startDevCluster starts (creating on first use) the private Postgres of
// weir dev and returns the URL of its weir database.
func startDevCluster(ctx context.Context, g *globals, opts *devOpts) (*pgcluster.Cluster, string, error) {
	dir := opts.dataDir
	if dir == "" {
		dir = defaultDevDir()
	}
	// Keep the port across restarts so URLs a user copied stay valid.
	portPath := filepath.Join(dir, devPortFile)
	port := 0
	if data, err := os.ReadFile(portPath); err == nil {
		port, _ = strconv.Atoi(strings.TrimSpace(string(data)))
	}

	cluster, err := pgcluster.New(&pgcluster.Config{Dir: dir, Durable: true, Port: port})
	if errors.Is(err, pgcluster.ErrBinariesNotFound) {
		return nil, "", &exitError{code: 2, err: fmt.Errorf(`no DATABASE_URL and no local Postgres to start.
Either install Postgres (Debian/Ubuntu):
  %s
or point weir at a server you have:
  DATABASE_URL=postgres://user:pass@host:5432/db weir dev`, pgcluster.InstallHint)}
	}
	if err != nil {
		return nil, "", err
	}

	start := time.Now()
	if err = cluster.Start(ctx); err != nil && port != 0 {
		// The remembered port may be taken now: take any free one.
		if cluster, err = pgcluster.New(&pgcluster.Config{Dir: dir, Durable: true}); err == nil {
			err = cluster.Start(ctx)
		}
	}
	if err != nil {
		return nil, "", fmt.Errorf("starting Postgres in %s: %w", dir, err)
	}
	_ = os.WriteFile(portPath, []byte(strconv.Itoa(cluster.Port())+"\n"), 0o644)

	if err := ensureDatabase(ctx, cluster.URL("postgres"), devDatabaseDefault); err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return nil, "", errors.Join(err, cluster.Stop(stopCtx))
	}
	url := cluster.URL(devDatabaseDefault)
	fmt.Fprintf(g.stdout, "weir dev: Postgres ready in %s: %s (data in %s)\n", time.Since(start).Round(time.Millisecond), url, cluster.DataDir())
	return cluster, url, nil
}

func ensureDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connecting to the private Postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("checking database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	return nil
}

// defaultDevDir is where weir dev keeps its Postgres: the user's data
// directory, or /var/lib/weir/dev for root, whose home directory the
// unprivileged postgres user could not reach.
func defaultDevDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/weir/dev"
	}
	if dir := os.Getenv("XDG_DATA_HOME"); dir != "" {
		return filepath.Join(dir, "weir", "dev")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "weir", "dev")
	}
	return filepath.Join(os.TempDir(), "weir-dev")
}
