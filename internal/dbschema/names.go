// Package dbschema names weir's and River's tables in a configured Postgres
// schema. It is the one place that builds qualified identifiers, so every
// query honours the schema option the same way River's Config.Schema does.
// It also holds the plan settings that weir's batched transactions share
// (GenericPlansSQL).
package dbschema

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/jackc/pgx/v5"
)

// Names are sanitized, schema-qualified table names, ready to splice into SQL.
type Names struct {
	// Schema is the schema as configured ("" for the search_path's first).
	Schema string

	Activity string
	// Backfill holds durable schedule backfills.
	Backfill string
	Event    string
	// History is the view of weir_event with folded boundaries unfolded:
	// one row per event, for SQL written by hand.
	History   string
	Inbox     string
	Namespace string
	Query     string
	RiverJob  string
	Schedule  string
	Run       string
	Update    string
	Worker    string
	Workflow  string
}

// New returns the names of the tables in schema; an empty schema leaves names
// unqualified, to be resolved through the search_path.
func New(schema string) *Names {
	return &Names{
		Schema:    schema,
		Activity:  Qualify(schema, "weir_activity"),
		Backfill:  Qualify(schema, "weir_backfill"),
		Event:     Qualify(schema, "weir_event"),
		History:   Qualify(schema, "weir_history"),
		Inbox:     Qualify(schema, "weir_inbox"),
		Namespace: Qualify(schema, "weir_namespace"),
		Query:     Qualify(schema, "weir_query"),
		RiverJob:  Qualify(schema, "river_job"),
		Schedule:  Qualify(schema, "weir_schedule"),
		Run:       Qualify(schema, "weir_run"),
		Update:    Qualify(schema, "weir_update"),
		Worker:    Qualify(schema, "weir_worker"),
		Workflow:  Qualify(schema, "weir_workflow"),
	}
}

// Qualify returns table in schema, sanitized.
func Qualify(schema, table string) string {
	if schema == "" {
		return pgx.Identifier{table}.Sanitize()
	}
	return pgx.Identifier{schema, table}.Sanitize()
}

// LISTEN/NOTIFY channels (see Channel for their names in a schema).
const (
	// RunClosedChannel carries a run's ID when the run closes.
	RunClosedChannel = "weir_run_closed"

	// QueryChannel carries a query's ID when a client asks it.
	QueryChannel = "weir_query"

	// QueryAnsweredChannel carries a query's ID when a worker answered it.
	QueryAnsweredChannel = "weir_query_answered"

	// WorkerChannel carries a worker's ID when it started or stopped
	// serving.
	WorkerChannel = "weir_worker"

	// UpdateDoneChannel carries "<run ID>/<update ID>" when an update was
	// rejected or completed.
	UpdateDoneChannel = "weir_update_done"
)

// Channel is the LISTEN/NOTIFY channel name for name in schema. Channels
// are per database, so the schema is part of the name; a name too long for
// Postgres (63 bytes) ends in a hash of the schema instead.
func Channel(schema, name string) string {
	if schema == "" {
		return name
	}
	channel := schema + "." + name
	if len(channel) <= 63 {
		return channel
	}
	sum := sha256.Sum256([]byte(schema))
	return name + "." + hex.EncodeToString(sum[:8])
}
