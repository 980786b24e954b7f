package migrations

import (
	"embed"
	"io/fs"
	"slices"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// The migration lines, each versioned on its own in River's river_migration
// table (column line).
const (
	// LineMain is River's own schema (river_job, river_queue, …), shipped by
	// riverpgxv5.
	LineMain = riverdriver.MigrationLineMain

	// LineFencing is the lease-token fencing layer on top of River's tables.
	LineFencing = "fencing"

	// LineWeir is the workflow engine's tables (weir_*).
	LineWeir = "weir"
)

// Lines returns every line in the order Up applies them; Down of everything
// goes in reverse. The fencing and weir lines build on River's tables.
func Lines() []string { return []string{LineMain, LineFencing, LineWeir} }

// ownFS holds the lines weir ships, laid out as River's drivers lay out
// theirs (migration/<line>/NNN_name.{up,down}.sql) so rivermigrate reads them.
//
//go:embed migration/fencing/*.sql migration/weir/*.sql
var ownFS embed.FS

// FS returns the migration files of line in the layout rivermigrate reads
// (migration/<line>/NNN_name.{up,down}.sql), or nil for an unknown line. A
// driver that wraps riverpgxv5 returns it from GetMigrationFS so that
// rivermigrate (and the river CLI built on it) can apply weir's lines.
func FS(line string) fs.FS {
	switch line {
	case LineMain:
		return riverpgxv5.New(nil).GetMigrationFS(line)
	case LineFencing, LineWeir:
		return ownFS
	}
	return nil
}

// truncateTables lists, per weir line and version, the tables that version
// creates and that hold rows (not schema metadata).
var truncateTables = map[string]map[int][]string{
	LineFencing: {1: {"weir_job_attempt"}},
	LineWeir: {1: {"weir_activity", "weir_backfill", "weir_event", "weir_inbox", "weir_namespace", "weir_query", "weir_run",
		"weir_schedule", "weir_update", "weir_worker", "weir_workflow"}},
}

// TruncateTables returns the tables holding rows at version of line (0 means
// the latest), for test helpers that empty a schema between tests. It
// implements riverdriver.Driver's GetMigrationTruncateTables for every line.
func TruncateTables(line string, version int) []string {
	if line == LineMain {
		return riverdriver.MigrationLineMainTruncateTables(version)
	}
	byVersion, ok := truncateTables[line]
	if !ok {
		return nil
	}
	var tables []string
	for v, created := range byVersion {
		if version == 0 || v <= version {
			tables = append(tables, created...)
		}
	}
	slices.Sort(tables)
	return tables
}

// lineDriver is riverpgxv5 offering weir's lines too, which is how the
// migrator hands them to rivermigrate.
type lineDriver struct {
	*riverpgxv5.Driver
}

func (d *lineDriver) GetMigrationDefaultLines() []string { return Lines() }
func (d *lineDriver) GetMigrationLines() []string        { return Lines() }

func (d *lineDriver) GetMigrationFS(line string) fs.FS {
	if migrationFS := FS(line); migrationFS != nil {
		return migrationFS
	}
	panic("migration line does not exist: " + line)
}

func (d *lineDriver) GetMigrationTruncateTables(line string, version int) []string {
	return TruncateTables(line, version)
}
