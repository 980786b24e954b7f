package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/server"
)

const serverAddrDefault = ":8844"

// serverOpts configure the HTTP server of weir server and weir dev.
type serverOpts struct {
	addr           string
	envErrs        []error // unparsable environment variables, reported when the command runs
	maxBodyBytes   int64
	maxWait        time.Duration
	migrate        bool
	requestTimeout time.Duration
	runMetrics     string
	tokens         []string
}

// addServerFlags registers the server's flags, each defaulting to its
// environment variable.
func addServerFlags(cmd *cobra.Command, g *globals, opts *serverOpts, addrDefault string) {
	envInt := func(name string, fallback int64) int64 {
		return envValue(g, opts, name, fallback, func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) })
	}

	flags := cmd.Flags()
	flags.StringVar(&opts.addr, "addr", g.env("WEIR_ADDR", addrDefault), "HTTP listen address (env WEIR_ADDR)")
	flags.Int64Var(&opts.maxBodyBytes, "max-body-bytes", envInt("WEIR_MAX_BODY_BYTES", server.MaxBodyBytesDefault),
		"largest request body accepted; larger is 413 payload_too_large (env WEIR_MAX_BODY_BYTES)")
	flags.DurationVar(&opts.maxWait, "max-wait", envValue(g, opts, "WEIR_MAX_WAIT", server.MaxWaitDefault, time.ParseDuration),
		"cap on the wait of a result long poll (env WEIR_MAX_WAIT)")
	flags.BoolVar(&opts.migrate, "migrate", envValue(g, opts, "WEIR_MIGRATE", false, strconv.ParseBool),
		"apply pending migrations before serving (env WEIR_MIGRATE); otherwise /readyz reports them")
	flags.DurationVar(&opts.requestTimeout, "request-timeout", envValue(g, opts, "WEIR_REQUEST_TIMEOUT", server.RequestTimeoutDefault, time.ParseDuration),
		"time limit of each API request, long polls getting their wait on top (env WEIR_REQUEST_TIMEOUT)")
	flags.StringVar(&opts.runMetrics, "run-metrics", g.env("WEIR_RUN_METRICS", string(server.RunMetricsByState)),
		"how /metrics counts runs: state (all namespaces together), namespace (by namespace, kind and state;\n"+
			"needs WEIR_METRICS_TOKEN) or off (env WEIR_RUN_METRICS)")
	flags.StringArrayVar(&opts.tokens, "token", nil,
		"API token NAME:ROLE:NAMESPACES:SECRET, repeatable; ROLE is read, write or admin, NAMESPACES a comma list or *\n"+
			"(env WEIR_TOKENS, entries separated by ; or newlines; prefer it: flags show in ps)")
}

// envValue is the value of the environment variable name, parsed, or
// fallback when it is unset; a parse error is kept in opts.envErrs.
func envValue[T any](g *globals, opts *serverOpts, name string, fallback T, parse func(string) (T, error)) T {
	v := g.getenv(name)
	if v == "" {
		return fallback
	}
	t, err := parse(v)
	if err != nil {
		opts.envErrs = append(opts.envErrs, fmt.Errorf("%s: %w", name, err))
	}
	return t
}

// config builds the server config from the flags and WEIR_TOKENS.
func (o *serverOpts) config(g *globals) (*server.Config, error) {
	if len(o.envErrs) > 0 {
		return nil, usageError(errors.Join(o.envErrs...))
	}
	tokens, err := server.ParseTokens(g.getenv("WEIR_TOKENS"))
	if err != nil {
		return nil, usageError(fmt.Errorf("WEIR_TOKENS: %w", err))
	}
	for _, flag := range o.tokens {
		more, err := server.ParseTokens(flag)
		if err != nil {
			return nil, usageError(fmt.Errorf("--token: %w", err))
		}
		tokens = append(tokens, more...)
	}
	return &server.Config{
		Logger:         g.logger(),
		MaxBodyBytes:   o.maxBodyBytes,
		MaxWait:        o.maxWait,
		MetricsToken:   g.getenv("WEIR_METRICS_TOKEN"),
		RequestTimeout: o.requestTimeout,
		RunMetrics:     server.RunMetrics(o.runMetrics),
		Schema:         g.schema,
		Tokens:         tokens,
	}, nil
}

func newServerCommand(g *globals) *cobra.Command {
	opts := &serverOpts{}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Serve weir's HTTP API, health, readiness and metrics",
		Long: `Serve weir's HTTP API, health, readiness and metrics.

The JSON API lives under /api/v1 and is described by the OpenAPI document at
/api/v1/openapi.json. Every API call needs a bearer token from --token or
WEIR_TOKENS, each scoped to namespaces and a role (read, write, admin):

  WEIR_TOKENS='ci:write:orders,billing:<secret>;ops:admin:*:<secret>' weir server

Secrets are at least 16 bytes. /healthz, /readyz (503 while any migration line
is behind this build) and /metrics (Prometheus) need no token; set
WEIR_METRICS_TOKEN to make /metrics need that bearer secret. /metrics counts
runs by state only unless --run-metrics namespace (which needs the metrics
token), at most every 30 seconds.

The database comes from --database-url or DATABASE_URL, the schema from
--schema or WEIR_SCHEMA. On SIGINT or SIGTERM the server stops accepting
connections, ends result long polls (they answer closed=false) and lets
in-flight requests finish.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServer(cmd.Context(), g, opts)
		},
	}
	addServerFlags(cmd, g, opts, serverAddrDefault)
	return cmd
}

// migrateUp applies every pending migration and says so as who.
func migrateUp(ctx context.Context, g *globals, pool *pgxpool.Pool, who string) error {
	migrator, err := migrations.New(pool, &migrations.Config{Logger: g.logger(), Schema: g.schema})
	if err != nil {
		return err
	}
	res, err := migrator.Up(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	fmt.Fprintf(g.stdout, "%s: schema current (%d versions applied now)\n", who, len(res.Versions))
	return nil
}

func runServer(ctx context.Context, g *globals, opts *serverOpts) error {
	config, err := opts.config(g)
	if err != nil {
		return err
	}
	if len(config.Tokens) == 0 {
		return usageError(errors.New("no API tokens: set WEIR_TOKENS or pass --token NAME:ROLE:NAMESPACES:SECRET (weir dev serves without tokens on loopback)"))
	}
	pool, err := g.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if opts.migrate {
		if err := migrateUp(ctx, g, pool, "weir server"); err != nil {
			return err
		}
	}
	srv, err := server.New(pool, config)
	if err != nil {
		return usageError(err)
	}
	defer srv.Close()
	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", opts.addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", opts.addr, err)
	}
	fmt.Fprintf(g.stdout, "weir server: serving http://%s (UI /ui/, River UI /riverui/, API /api/v1, %d tokens; /healthz, /readyz, /metrics)\n",
		listener.Addr(), len(config.Tokens))
	if err := srv.Serve(ctx, listener); err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, "weir server: stopped")
	return nil
}
