package migrations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/weirhq/weir/internal/dbschema"
)

// Config configures a Migrator. The zero value works.
type Config struct {
	// Logger receives a line per applied version. Defaults to discarding.
	Logger *slog.Logger

	// Schema is the Postgres schema that holds River's and weir's tables,
	// created by Up if missing. It must match river.Config.Schema and weir's
	// own schema settings; at most SchemaNameMax bytes (New returns a
	// *SchemaNameError otherwise). Defaults to empty: the first schema on the
	// connection's search_path.
	Schema string
}

func (c *Config) withDefaults() *Config {
	out := *c
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return &out
}

// Migrator brings a database to the schema this build needs: River's main
// line, weir's fencing line and weir's weir line, applied through River's
// rivermigrate. Every Up and Down holds a Postgres advisory lock for its
// schema, so migrators in many processes can run at once: one does the work,
// the others wait and then find nothing left to do.
type Migrator struct {
	config    *Config
	migrators map[string]*rivermigrate.Migrator[pgx.Tx]
	pool      *pgxpool.Pool
}

// New returns a Migrator over pool. A nil config means defaults. A schema
// name River cannot use is refused here (*SchemaNameError), not when a
// worker starts.
func New(pool *pgxpool.Pool, config *Config) (*Migrator, error) {
	if pool == nil {
		return nil, errors.New("migrations: pool is required")
	}
	if config == nil {
		config = &Config{}
	}
	config = config.withDefaults()
	if len(config.Schema) > SchemaNameMax {
		return nil, &SchemaNameError{Schema: config.Schema}
	}

	driver := &lineDriver{Driver: riverpgxv5.New(pool)}
	migrators := make(map[string]*rivermigrate.Migrator[pgx.Tx], len(Lines()))
	for _, line := range Lines() {
		migrator, err := rivermigrate.New(driver, &rivermigrate.Config{
			Line:   line,
			Logger: config.Logger,
			Schema: config.Schema,
		})
		if err != nil {
			return nil, fmt.Errorf("loading migration line %s: %w", line, err)
		}
		migrators[line] = migrator
	}
	return &Migrator{config: config, migrators: migrators, pool: pool}, nil
}

// Schema is the configured schema ("" for the search_path's first).
func (m *Migrator) Schema() string { return m.config.Schema }

// UpOpts are options for Up. A nil *UpOpts brings every line to its latest
// version.
type UpOpts struct {
	// Line limits the run to one line. Defaults to every line, in Lines order.
	Line string

	// MaxSteps caps how many versions are applied; only with Line.
	// Defaults to no cap.
	MaxSteps int

	// TargetVersion applies versions up to and including this one; only with
	// Line. Defaults to the latest.
	TargetVersion int
}

// DownOpts are options for Down; they are required, so nothing is removed by
// accident.
type DownOpts struct {
	// Line is the line to migrate down. Empty means every line, dependents
	// first (weir, fencing, then main), and then TargetVersion must be -1.
	Line string

	// MaxSteps is how many versions to remove. Defaults to 1 when
	// TargetVersion is 0.
	MaxSteps int

	// TargetVersion removes versions above it, leaving the line at this
	// version; -1 removes the line entirely.
	TargetVersion int

	// Force removes fencing versions even while the weir line is installed
	// or jobs hold live fencing leases (fenced processes are running), which
	// Down otherwise refuses: those processes then fail every fetch.
	// Defaults to false.
	Force bool
}

// MigrateResult lists the versions an Up or Down applied, in order.
type MigrateResult struct {
	// Direction is "up" or "down".
	Direction string

	// Versions are the versions applied (up) or removed (down).
	Versions []MigrateVersion
}

// MigrateVersion is one applied or removed version.
type MigrateVersion struct {
	Duration time.Duration
	Line     string
	Name     string
	Version  int
}

// Up applies pending versions: with nil opts, every line to its latest
// version. Running it again, or from several processes at once, succeeds and
// changes nothing once the schema is current.
func (m *Migrator) Up(ctx context.Context, opts *UpOpts) (*MigrateResult, error) {
	if opts == nil {
		opts = &UpOpts{}
	}
	if opts.Line == "" && (opts.MaxSteps != 0 || opts.TargetVersion != 0) {
		return nil, errors.New("migrations: MaxSteps and TargetVersion need a Line")
	}
	lines := Lines()
	if opts.Line != "" {
		if err := m.checkLine(opts.Line); err != nil {
			return nil, err
		}
		lines = []string{opts.Line}
	}

	result := &MigrateResult{Direction: string(rivermigrate.DirectionUp)}
	err := lockSchema(ctx, m.pool, m.config.Schema, func(conn *pgxpool.Conn) error {
		if err := m.ensureSchema(ctx, conn); err != nil {
			return err
		}
		for _, line := range lines {
			if line != LineMain {
				if err := m.requireMainAtHead(ctx, conn, line); err != nil {
					return err
				}
			}
			res, err := m.migrators[line].Migrate(ctx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{
				MaxSteps:      opts.MaxSteps,
				TargetVersion: opts.TargetVersion,
			})
			if err != nil {
				return fmt.Errorf("migrating line %s up: %w", line, err)
			}
			result.Versions = append(result.Versions, versionsOf(line, res)...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return result, nil
}

// Down removes versions. Lines that build on River's tables must be removed
// before River's main line goes below its latest version; otherwise Down
// returns a *LineDependencyError. Unless opts.Force is set, it removes no
// fencing version while the weir line stays installed (a
// *LineDependencyError) or while jobs hold live fencing leases (a
// *LiveLeasesError): fenced processes, weir's workers among them, fail
// every fetch without the fencing line. It checks before removing anything.
func (m *Migrator) Down(ctx context.Context, opts *DownOpts) (*MigrateResult, error) {
	if opts == nil {
		return nil, errors.New("migrations: Down needs DownOpts")
	}
	lines := slices.Clone(Lines())
	slices.Reverse(lines)
	switch {
	case opts.Line != "":
		if err := m.checkLine(opts.Line); err != nil {
			return nil, err
		}
		lines = []string{opts.Line}
	case opts.TargetVersion != -1 || opts.MaxSteps != 0:
		return nil, errors.New("migrations: Down of every line needs TargetVersion -1 (remove everything); give a Line to step down")
	}

	result := &MigrateResult{Direction: string(rivermigrate.DirectionDown)}
	err := lockSchema(ctx, m.pool, m.config.Schema, func(conn *pgxpool.Conn) error {
		if slices.Contains(lines, LineFencing) && !opts.Force {
			if err := m.requireFencingUnused(ctx, conn, !slices.Contains(lines, LineWeir)); err != nil {
				return err
			}
		}
		for _, line := range lines {
			if line == LineMain {
				if err := m.requireNoDependents(ctx, conn); err != nil {
					return err
				}
			}
			res, err := m.migrators[line].Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{
				MaxSteps:      opts.MaxSteps,
				TargetVersion: opts.TargetVersion,
			})
			if err != nil {
				return fmt.Errorf("migrating line %s down: %w", line, err)
			}
			result.Versions = append(result.Versions, versionsOf(line, res)...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return result, nil
}

func (m *Migrator) checkLine(line string) error {
	if _, ok := m.migrators[line]; !ok {
		return &UnknownLineError{Line: line}
	}
	return nil
}

func (m *Migrator) requireMainAtHead(ctx context.Context, conn *pgxpool.Conn, line string) error {
	applied, err := m.appliedVersions(ctx, conn)
	if err != nil {
		return err
	}
	if status := m.statusOf(LineMain, applied[LineMain]); status.Behind() {
		return &LineDependencyError{Line: line, Requires: LineMain, Reason: fmt.Sprintf(
			"line %s needs River's main line at version %d first (it is at %d); run Up for every line", line, status.Latest, status.Current)}
	}
	return nil
}

func (m *Migrator) requireNoDependents(ctx context.Context, conn *pgxpool.Conn) error {
	applied, err := m.appliedVersions(ctx, conn)
	if err != nil {
		return err
	}
	for _, dependent := range []string{LineWeir, LineFencing} {
		if status := m.statusOf(dependent, applied[dependent]); status.Current > 0 {
			return &LineDependencyError{Line: LineMain, Requires: dependent, Reason: fmt.Sprintf(
				"line %s is at version %d and builds on River's tables; take it down to -1 first", dependent, status.Current)}
		}
	}
	return nil
}

// requireFencingUnused refuses to remove fencing versions while fenced
// processes may still use them: while the weir line stays installed (when
// weirStays) and while jobs hold live leases. Nothing to remove passes.
func (m *Migrator) requireFencingUnused(ctx context.Context, conn *pgxpool.Conn, weirStays bool) error {
	applied, err := m.appliedVersions(ctx, conn)
	if err != nil {
		return err
	}
	fencing, weir := m.statusOf(LineFencing, applied[LineFencing]), m.statusOf(LineWeir, applied[LineWeir])
	if fencing.Current == 0 {
		return nil
	}
	if weirStays && weir.Current > 0 {
		return &LineDependencyError{Line: LineFencing, Requires: LineWeir, Reason: fmt.Sprintf(
			"line weir is at version %d and its workers run on fencing; remove it first (`weir migrate down --line weir --all`), or force", weir.Current)}
	}
	var live int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+dbschema.Qualify(m.config.Schema, "river_job")+" WHERE state = 'running' AND lease_expires_at > now()").
		Scan(&live); err != nil {
		return fmt.Errorf("counting live fencing leases: %w", err)
	}
	if live > 0 {
		return &LiveLeasesError{Jobs: live, Schema: m.config.Schema}
	}
	return nil
}

func versionsOf(line string, res *rivermigrate.MigrateResult) []MigrateVersion {
	out := make([]MigrateVersion, 0, len(res.Versions))
	for _, v := range res.Versions {
		out = append(out, MigrateVersion{Duration: v.Duration, Line: line, Name: v.Name, Version: v.Version})
	}
	return out
}

// ensureSchema creates the configured schema if it is missing. It checks
// first, so a role without CREATE on the database can migrate a schema that
// an administrator made for it.
func (m *Migrator) ensureSchema(ctx context.Context, conn *pgxpool.Conn) error {
	if m.config.Schema == "" {
		return nil
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", m.config.Schema).Scan(&exists); err != nil {
		return fmt.Errorf("checking schema %s: %w", m.config.Schema, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{m.config.Schema}.Sanitize()); err != nil {
		return fmt.Errorf("creating schema %s: %w", m.config.Schema, err)
	}
	return nil
}

// Lock runs fn while holding the migration lock of schema ("" for the
// search_path's first), the lock every Up and Down of a Migrator holds. Run
// River's rivermigrate inside it (the fencing line, River's main line) to
// make it safe alongside Migrators and other rivermigrate runs wrapped
// alike; rivermigrate takes no lock of its own, so two unwrapped runs race
// and fail on river_migration's primary key:
//
//	err := migrations.Lock(ctx, pool, schema, func(ctx context.Context) error {
//		_, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
//		return err
//	})
//
// The lock is a session advisory lock keyed on the resolved schema, held on
// a connection of pool set aside for it while fn runs, so pool needs room
// for at least one more connection (rivermigrate runs each version in a
// transaction of its own). Lock waits as long as ctx allows.
func Lock(ctx context.Context, pool *pgxpool.Pool, schema string, fn func(ctx context.Context) error) error {
	if pool == nil {
		return errors.New("migrations: Lock needs a pool")
	}
	if pool.Config().MaxConns < 2 {
		return errors.New("migrations: Lock needs a pool of at least 2 connections: one holds the lock, others migrate")
	}
	return lockSchema(ctx, pool, schema, func(*pgxpool.Conn) error { return fn(ctx) })
}

// lockSchema runs fn while holding a session advisory lock keyed on the
// resolved schema, on a connection set aside for it (rivermigrate runs each
// version in a transaction of its own on other connections). Migrators of
// different schemas do not wait for each other.
func lockSchema(ctx context.Context, pool *pgxpool.Pool, schema string, fn func(conn *pgxpool.Conn) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquiring a connection for the migration lock: %w", err)
	}
	defer conn.Release()

	var key int64
	if err := conn.QueryRow(ctx,
		"SELECT hashtextextended('weir.migrations:' || coalesce(nullif($1::text, ''), current_schema(), ''), 0)",
		schema).Scan(&key); err != nil {
		return fmt.Errorf("computing the migration lock key: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		// The connection may be mid-wait on the lock; don't hand it back.
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
		return fmt.Errorf("taking the migration lock: %w", err)
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", key); err != nil {
			// Closing the session releases the lock too.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()

	return fn(conn)
}
