package migrations

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
)

// LineStatus is where one line stands in the database against this build.
type LineStatus struct {
	// Applied are the versions recorded in river_migration, ascending.
	Applied []int

	// Current is the highest applied version; 0 when none is.
	Current int

	// Latest is the highest version this build ships, which is also the
	// version it requires.
	Latest int

	// Line is the line's name.
	Line string

	// Pending are versions this build ships that are not applied.
	Pending []int

	// Unknown are applied versions this build does not ship: a newer build
	// migrated this database. Not an error: a rolling deploy looks like this.
	Unknown []int
}

// Behind reports whether the database lacks versions this build requires.
func (s *LineStatus) Behind() bool { return len(s.Pending) > 0 }

// querier is what status queries need: a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Status reports every line, in Lines order.
func (m *Migrator) Status(ctx context.Context) ([]*LineStatus, error) {
	applied, err := m.appliedVersions(ctx, m.pool)
	if err != nil {
		return nil, err
	}
	out := make([]*LineStatus, 0, len(Lines()))
	for _, line := range Lines() {
		out = append(out, m.statusOf(line, applied[line]))
	}
	return out, nil
}

// Verify returns nil when every line is at least at the version this build
// requires, and otherwise a *SchemaBehindError (errors.Is ErrSchemaBehind)
// naming the lines that are behind. Readiness checks use it.
func (m *Migrator) Verify(ctx context.Context) error {
	statuses, err := m.Status(ctx)
	if err != nil {
		return err
	}
	return CheckStatus(m.config.Schema, statuses)
}

// CheckStatus is Verify's check over statuses that Status returned for
// schema: a *SchemaBehindError naming the lines that are behind, or nil.
// Readiness checks that report the statuses too use it (weir server's
// /readyz), as does worker.Start through Verify.
func CheckStatus(schema string, statuses []*LineStatus) error {
	var behind []*LineStatus
	for _, status := range statuses {
		if status.Behind() {
			behind = append(behind, status)
		}
	}
	if len(behind) > 0 {
		return &SchemaBehindError{Lines: behind, Schema: schema}
	}
	return nil
}

func (m *Migrator) statusOf(line string, applied []int) *LineStatus {
	status := &LineStatus{Applied: applied, Line: line}
	if len(applied) > 0 {
		status.Current = slices.Max(applied)
	}
	for _, migration := range m.migrators[line].AllVersions() {
		status.Latest = max(status.Latest, migration.Version)
		if !slices.Contains(applied, migration.Version) {
			status.Pending = append(status.Pending, migration.Version)
		}
	}
	for _, version := range applied {
		if version > status.Latest {
			status.Unknown = append(status.Unknown, version)
		}
	}
	return status
}

// appliedVersions reads river_migration, which may not exist yet, or may
// predate River's line column (main line below version 5).
func (m *Migrator) appliedVersions(ctx context.Context, q querier) (map[string][]int, error) {
	name := dbschema.Qualify(m.config.Schema, "river_migration")

	var hasTable, hasLine bool
	err := q.QueryRow(ctx, `
		SELECT to_regclass($1) IS NOT NULL,
		       EXISTS (SELECT 1 FROM pg_attribute
		               WHERE attrelid = to_regclass($1) AND attname = 'line' AND NOT attisdropped)`,
		name).Scan(&hasTable, &hasLine)
	if err != nil {
		return nil, fmt.Errorf("checking for %s: %w", name, err)
	}
	if !hasTable {
		return map[string][]int{}, nil
	}

	query := "SELECT line, version FROM " + name + " ORDER BY line, version"
	if !hasLine {
		query = "SELECT 'main', version FROM " + name + " ORDER BY version"
	}
	rows, err := q.Query(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	applied := map[string][]int{}
	var (
		line    string
		version int
	)
	_, err = pgx.ForEachRow(rows, []any{&line, &version}, func() error {
		applied[line] = append(applied[line], version)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return applied, nil
}
