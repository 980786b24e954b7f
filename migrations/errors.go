package migrations

import (
	"errors"
	"fmt"
	"strings"
)

// ErrSchemaBehind is matched (errors.Is) by a *SchemaBehindError.
var ErrSchemaBehind = errors.New("migrations: database schema is behind this build")

// SchemaBehindError says which lines lack versions this build requires.
type SchemaBehindError struct {
	// Lines are the lines that are behind, each with its pending versions.
	Lines []*LineStatus

	// Schema is the Postgres schema checked ("" for the search_path's first).
	Schema string
}

func (e *SchemaBehindError) Error() string {
	parts := make([]string, 0, len(e.Lines))
	for _, line := range e.Lines {
		parts = append(parts, fmt.Sprintf("%s at %d of %d (pending %v)", line.Line, line.Current, line.Latest, line.Pending))
	}
	what := "database schema"
	if e.Schema != "" {
		what = "schema " + e.Schema
	}
	return fmt.Sprintf("migrations: %s is behind this build: %s; run `weir migrate up`", what, strings.Join(parts, ", "))
}

// Is makes errors.Is(err, ErrSchemaBehind) true.
func (e *SchemaBehindError) Is(target error) bool { return target == ErrSchemaBehind }

// ErrUnknownLine is matched (errors.Is) by an *UnknownLineError.
var ErrUnknownLine = errors.New("migrations: unknown migration line")

// UnknownLineError names a line this build does not have.
type UnknownLineError struct {
	Line string
}

func (e *UnknownLineError) Error() string {
	return fmt.Sprintf("migrations: unknown migration line %q (lines: %s)", e.Line, strings.Join(Lines(), ", "))
}

// Is makes errors.Is(err, ErrUnknownLine) true.
func (e *UnknownLineError) Is(target error) bool { return target == ErrUnknownLine }

// ErrLineDependency is matched (errors.Is) by a *LineDependencyError.
var ErrLineDependency = errors.New("migrations: migration line depends on another")

// LineDependencyError means a line cannot move because of another: fencing
// and weir need River's main line at its latest version, and River's main
// line cannot go down while they are applied.
type LineDependencyError struct {
	// Line is the line that was asked to move.
	Line string

	// Reason says what to do first.
	Reason string

	// Requires is the line in the way.
	Requires string
}

func (e *LineDependencyError) Error() string { return "migrations: " + e.Reason }

// Is makes errors.Is(err, ErrLineDependency) true.
func (e *LineDependencyError) Is(target error) bool { return target == ErrLineDependency }

// SchemaNameMax is the longest schema name River accepts (its
// notification channels are named "<schema>.<topic>", within Postgres's 63
// bytes).
const SchemaNameMax = 46

// ErrSchemaName is matched (errors.Is) by a *SchemaNameError.
var ErrSchemaName = errors.New("migrations: schema name not usable")

// SchemaNameError names a schema River cannot use.
type SchemaNameError struct {
	// Schema is the refused name.
	Schema string
}

func (e *SchemaNameError) Error() string {
	return fmt.Sprintf("migrations: schema name %q is %d bytes; River allows at most %d", e.Schema, len(e.Schema), SchemaNameMax)
}

// Is makes errors.Is(err, ErrSchemaName) true.
func (e *SchemaNameError) Is(target error) bool { return target == ErrSchemaName }

// ErrLiveLeases is matched (errors.Is) by a *LiveLeasesError.
var ErrLiveLeases = errors.New("migrations: jobs hold live fencing leases")

// LiveLeasesError means Down refused to remove fencing versions because
// jobs hold live leases: fenced processes are running, and without the
// fencing line they fail every fetch.
type LiveLeasesError struct {
	// Jobs is how many running jobs hold a live lease.
	Jobs int64

	// Schema is the Postgres schema checked ("" for the search_path's first).
	Schema string
}

func (e *LiveLeasesError) Error() string {
	return fmt.Sprintf("migrations: %d running jobs hold live fencing leases: fenced processes are running; "+
		"deploy riverpgxv5.New (or stop them), wait for their leases to expire, then migrate down (or force)", e.Jobs)
}

// Is makes errors.Is(err, ErrLiveLeases) true.
func (e *LiveLeasesError) Is(target error) bool { return target == ErrLiveLeases }
