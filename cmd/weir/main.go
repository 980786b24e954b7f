// Command weir is weir's CLI: a zero-config local start (weir dev), schema
// migrations (weir migrate up|down|status), the HTTP server (weir server) and
// the commands that drive workflows through it (weir workflow …).
//
// The database comes from --database-url or DATABASE_URL; the schema from
// --schema or WEIR_SCHEMA. weir workflow talks to a server at --address
// (WEIR_ADDRESS) with the token in WEIR_TOKEN.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runEnv(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv))
}

// exitError carries a specific exit code out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError is a command-line mistake: exit code 2.
func usageError(err error) error { return &exitError{code: exitUsage, err: err} }

// exactArgs is cobra.ExactArgs with exit code 2.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError(err)
		}
		return nil
	}
}

// runEnv executes the CLI, reading the environment through getenv, and
// returns the process exit code.
func runEnv(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	root := newRootCommand(stdout, stderr, getenv)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "weir:", err)
	var exitErr *exitError
	if errors.As(err, &exitErr) {
		return exitErr.code
	}
	return 1
}

// globals are the flags every command shares.
type globals struct {
	databaseURL string
	getenv      func(string) string
	schema      string
	stderr      io.Writer
	stdout      io.Writer
	verbose     bool
}

func newRootCommand(stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	g := &globals{getenv: getenv, stderr: stderr, stdout: stdout}
	root := &cobra.Command{
		Use:           "weir",
		Short:         "Durable workflows for Go on River and Postgres",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&g.databaseURL, "database-url", getenv("DATABASE_URL"),
		"Postgres connection URL (env DATABASE_URL)")
	root.PersistentFlags().StringVar(&g.schema, "schema", getenv("WEIR_SCHEMA"),
		"Postgres schema for River's and weir's tables (env WEIR_SCHEMA; default: the search_path's first)")
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose", "v", false, "log more")

	workflow, schedule := newWorkflowCommand(g), newScheduleCommand(g)
	root.AddCommand(newDevCommand(g), newMigrateCommand(g), newServerCommand(g), workflow, schedule, newFencingCommand(g))
	refuseUnknownSubcommands(root)
	hideDatabaseFlags(workflow)
	hideDatabaseFlags(schedule)
	return root
}

// refuseUnknownSubcommands makes every command that only groups others
// (cmd and those below it) fail with a usage error on an unknown
// subcommand, where cobra would print help and succeed; with no argument
// it still prints its help.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if !cmd.HasSubCommands() || cmd.Runnable() {
		return
	}
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return usageError(fmt.Errorf("unknown command %q for %q; see %s --help", args[0], cmd.CommandPath(), cmd.CommandPath()))
	}
}

// hideDatabaseFlags keeps --database-url and --schema out of the help of
// cmd and its subcommands, which talk to a server over HTTP and never to
// the database.
func hideDatabaseFlags(cmd *cobra.Command) {
	help := cmd.HelpFunc()
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		for _, name := range []string{"database-url", "schema"} {
			if f := c.Root().PersistentFlags().Lookup(name); f != nil && !f.Hidden {
				f.Hidden = true
				defer func() { f.Hidden = false }()
			}
		}
		help(c, args)
	})
}

// env is the environment variable name, or fallback when it is unset.
func (g *globals) env(name, fallback string) string {
	if v := g.getenv(name); v != "" {
		return v
	}
	return fallback
}

func (g *globals) logger() *slog.Logger {
	level := slog.LevelWarn
	if g.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
}

// errNoDatabaseURL is returned by commands that need a database when none is
// configured.
var errNoDatabaseURL = errors.New("no database: set DATABASE_URL or pass --database-url (or run `weir dev`, which starts a local Postgres)")

func (g *globals) pool(ctx context.Context) (*pgxpool.Pool, error) {
	if g.databaseURL == "" {
		return nil, errNoDatabaseURL
	}
	return openPool(ctx, g.databaseURL)
}

// openPool opens a pool on databaseURL and checks that it connects.
func openPool(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parsing database URL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to Postgres: %w", err)
	}
	return pool, nil
}
