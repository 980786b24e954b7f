package fencing

import (
	"errors"
	"io/fs"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivershared/baseservice"
	"github.com/riverqueue/river/rivershared/riverpilot"

	"github.com/weirhq/weir/migrations"
)

// MigrationLine is the name of the migration line that installs fencing
// (lease columns on river_job, the attempt log and the lease trigger). The
// Driver offers it to rivermigrate next to River's own lines.
const MigrationLine = migrations.LineFencing

// Driver is River's riverpgxv5 driver with lease-token fencing. Use it
// wherever riverpgxv5.New(pool) is used (river.NewClient, rivermigrate.New,
// river.JobCompleteTx[*fencing.Driver]) and put Driver.Plugin first in
// river.Config.Plugins.
//
// A Driver serves one River client: give each client its own.
type Driver struct {
	*riverpgxv5.Driver

	archetype *baseservice.Archetype
	config    *Config
	counters  *counters
	keeper    *leaseKeeper
	pilot     *pilot
	plugin    *Plugin
	pool      *pgxpool.Pool
}

// NewDriver returns a fencing driver over pool. A nil config means defaults.
func NewDriver(pool *pgxpool.Pool, config *Config) (*Driver, error) {
	if config == nil {
		config = &Config{}
	}
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	d := &Driver{
		Driver:   riverpgxv5.New(pool),
		config:   config,
		counters: &counters{observer: config.Observer},
		pool:     pool,
	}
	d.keeper = newLeaseKeeper(d)
	d.pilot = newPilot(d)
	d.plugin = &Plugin{driver: d}
	return d, nil
}

// Plugin returns the worker plugin that gives each attempt its lease, renews
// it and cancels the attempt when it is lost. Put it first in
// river.Config.Plugins of the client using this Driver.
func (d *Driver) Plugin() *Plugin { return d.plugin }

// Stats returns running totals of lease events.
func (d *Driver) Stats() Stats { return d.counters.snapshot() }

// PluginInit is called by river.NewClient. It is part of River's internal
// driver plugin seam, not meant to be called by users.
func (d *Driver) PluginInit(archetype *baseservice.Archetype) { d.archetype = archetype }

// PluginPilot returns the fencing Pilot; River routes fetches and state
// writes through it. Part of River's internal driver plugin seam.
func (d *Driver) PluginPilot() riverpilot.Pilot { return d.pilot }

// GetMigrationDefaultLines adds the fencing line to River's default lines.
func (d *Driver) GetMigrationDefaultLines() []string {
	return appendLine(d.Driver.GetMigrationDefaultLines())
}

// GetMigrationLines adds the fencing line to River's lines, so that
// rivermigrate.New(driver, &rivermigrate.Config{Line: fencing.MigrationLine})
// works.
func (d *Driver) GetMigrationLines() []string { return appendLine(d.Driver.GetMigrationLines()) }

// GetMigrationFS returns the migration files of line.
func (d *Driver) GetMigrationFS(line string) fs.FS {
	if line == MigrationLine {
		return migrations.FS(line)
	}
	return d.Driver.GetMigrationFS(line)
}

// GetMigrationTruncateTables returns the tables holding rows at version of
// line.
func (d *Driver) GetMigrationTruncateTables(line string, version int) []string {
	if line == MigrationLine {
		return migrations.TruncateTables(line, version)
	}
	return d.Driver.GetMigrationTruncateTables(line, version)
}

// GetExecutor returns an executor on the pool whose JobUpdate is fenced for
// calls made from inside a job's attempt.
func (d *Driver) GetExecutor() riverdriver.Executor {
	return &executor{Executor: d.Driver.GetExecutor(), driver: d}
}

// UnwrapExecutor returns an executor on tx whose JobUpdate is fenced for calls
// made from inside a job's attempt.
//
// Like riverpgxv5's, it may be called on a nil *Driver (River's test helpers,
// rivertest.RequireInsertedTx[*fencing.Driver], call it on the type
// parameter's zero value): it then returns riverpgxv5's executor on tx,
// which has no fencing to do outside a client.
func (d *Driver) UnwrapExecutor(tx pgx.Tx) riverdriver.ExecutorTx {
	if d == nil {
		return (*riverpgxv5.Driver)(nil).UnwrapExecutor(tx)
	}
	return &executorTx{ExecutorTx: d.Driver.UnwrapExecutor(tx), driver: d}
}

// UnwrapTx returns the pgx.Tx under an executor made by this driver (or by
// riverpgxv5). Like riverpgxv5's, it may be called on a nil *Driver.
func (d *Driver) UnwrapTx(execTx riverdriver.ExecutorTx) pgx.Tx {
	if wrapped, ok := execTx.(*executorTx); ok {
		execTx = wrapped.ExecutorTx
	}
	var inner *riverpgxv5.Driver
	if d != nil {
		inner = d.Driver
	}
	return inner.UnwrapTx(execTx)
}

func appendLine(lines []string) []string {
	if slices.Contains(lines, MigrationLine) {
		return lines
	}
	return append(slices.Clone(lines), MigrationLine)
}

var errNoPool = errors.New("fencing: driver has no pool")

func (d *Driver) logger() *slog.Logger {
	if d.archetype != nil && d.archetype.Logger != nil {
		return d.archetype.Logger
	}
	return slog.New(slog.DiscardHandler)
}
