// Package migrations holds weir's embedded SQL and the migrator that brings a
// database to the schema a build needs, in one call:
//
//	migrator, err := migrations.New(pool, &migrations.Config{Schema: "jobs"})
//	...
//	_, err = migrator.Up(ctx, nil) // River's main line, then fencing, then weir
//
// There are three lines, each versioned on its own in River's river_migration
// table and applied through River's rivermigrate (so the same table tells River
// UI, the river CLI and weir where a database stands):
//
//   - main: River's own schema, exactly as riverpgxv5 ships it;
//   - fencing: lease tokens on river_job (see package fencing);
//   - weir: the workflow engine's weir_* tables.
//
// Up and Down take a Postgres advisory lock keyed on the schema, so two
// processes migrating the same database at once both succeed: one applies the
// versions, the other waits and finds nothing left. River's rivermigrate takes
// no lock; Lock runs it under the same one. Each version runs in its
// own transaction. Steps that touch River's live tables set a lock_timeout so
// that a busy river_job makes the step fail fast (rerun it) instead of stalling
// every worker; they never rewrite the table.
//
// Down removes versions in the reverse order of the lines, and refuses to
// remove fencing versions under a running fenced fleet unless forced.
//
// Verify tells a readiness check (and worker.Start) whether the database is
// behind what this build requires; a database ahead of the build (a newer deploy migrated it) is
// fine and shows up in Status as Unknown versions.
package migrations
