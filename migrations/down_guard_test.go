package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
)

// TestDownFencingGuards: Down refuses to remove fencing versions in the
// wrong order (the weir line installed) or under a running fenced fleet
// (live leases), before removing anything, unless forced.
func TestDownFencingGuards(t *testing.T) {
	t.Parallel()

	current := func(ctx context.Context, t *testing.T, m *migrations.Migrator, line string) int {
		t.Helper()
		statuses, err := m.Status(ctx)
		require.NoError(t, err)
		for _, s := range statuses {
			if s.Line == line {
				return s.Current
			}
		}
		t.Fatalf("no line %s", line)
		return 0
	}

	// holdLease inserts a running job with a live lease, as a fenced
	// process's fetch leaves it.
	holdLease := func(ctx context.Context, t *testing.T, schema string) {
		t.Helper()
		_, err := dbtest.Pool(ctx, t).Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "river_job"}.Sanitize()+
			" (kind, args, max_attempts, queue, state, attempt, attempted_at, attempted_by, lease_token, lease_expires_at)"+
			" VALUES ('report', '{}', 25, 'default', 'running', 1, now(), '{worker-1}', gen_random_uuid(), now() + interval '5 minutes')")
		require.NoError(t, err)
	}

	t.Run("LiveLeases", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		schema, m := dbtest.SchemaAt(ctx, t, migrations.LineWeir, 0)
		_, err := m.Down(ctx, &migrations.DownOpts{Line: migrations.LineWeir, TargetVersion: -1})
		require.NoError(t, err)
		fencing := current(ctx, t, m, migrations.LineFencing)
		holdLease(ctx, t, schema)

		_, err = m.Down(ctx, &migrations.DownOpts{Line: migrations.LineFencing, TargetVersion: -1})
		require.ErrorIs(t, err, migrations.ErrLiveLeases)
		var live *migrations.LiveLeasesError
		require.ErrorAs(t, err, &live)
		require.Equal(t, int64(1), live.Jobs)
		require.Equal(t, fencing, current(ctx, t, m, migrations.LineFencing), "nothing removed")

		res, err := m.Down(ctx, &migrations.DownOpts{Line: migrations.LineFencing, TargetVersion: -1, Force: true})
		require.NoError(t, err)
		require.Len(t, res.Versions, fencing)
		require.Zero(t, current(ctx, t, m, migrations.LineFencing))
	})

	t.Run("LiveLeasesStopEverythingBeforeAnyRemoval", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		schema, m := dbtest.SchemaAt(ctx, t, migrations.LineWeir, 0)
		weir := current(ctx, t, m, migrations.LineWeir)
		holdLease(ctx, t, schema)

		_, err := m.Down(ctx, &migrations.DownOpts{TargetVersion: -1})
		require.ErrorIs(t, err, migrations.ErrLiveLeases)
		require.Equal(t, weir, current(ctx, t, m, migrations.LineWeir), "weir's line stays too")
	})

	t.Run("WeirInstalled", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, m := dbtest.SchemaAt(ctx, t, migrations.LineWeir, 0)
		fencing := current(ctx, t, m, migrations.LineFencing)

		for _, opts := range []*migrations.DownOpts{
			{Line: migrations.LineFencing},
			{Line: migrations.LineFencing, TargetVersion: -1},
		} {
			_, err := m.Down(ctx, opts)
			require.ErrorIs(t, err, migrations.ErrLineDependency)
			var dependency *migrations.LineDependencyError
			require.ErrorAs(t, err, &dependency)
			require.Equal(t, migrations.LineWeir, dependency.Requires)
			require.Contains(t, err.Error(), "weir migrate down --line weir --all")
			require.Equal(t, fencing, current(ctx, t, m, migrations.LineFencing), "nothing removed")
		}

		// The documented order removes both lines entirely.
		_, err := m.Down(ctx, &migrations.DownOpts{Line: migrations.LineWeir, TargetVersion: -1})
		require.NoError(t, err)
		res, err := m.Down(ctx, &migrations.DownOpts{Line: migrations.LineFencing, TargetVersion: -1})
		require.NoError(t, err)
		require.Len(t, res.Versions, fencing)
		require.Zero(t, current(ctx, t, m, migrations.LineFencing))
		require.Zero(t, current(ctx, t, m, migrations.LineWeir))
	})

	t.Run("WeirInstalledForced", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, m := dbtest.SchemaAt(ctx, t, migrations.LineWeir, 0)
		fencing := current(ctx, t, m, migrations.LineFencing)
		res, err := m.Down(ctx, &migrations.DownOpts{Line: migrations.LineFencing, Force: true})
		require.NoError(t, err)
		require.Len(t, res.Versions, 1)
		require.Equal(t, fencing-1, current(ctx, t, m, migrations.LineFencing))
	})
}
