package worker_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/worker"
)

// TestStartRefusesSchemaBehind: Start refuses a schema whose lines are
// behind this build, naming each line and its versions, instead of
// failing later in its tasks.
func TestStartRefusesSchemaBehind(t *testing.T) {
	t.Parallel()

	for _, line := range []string{migrations.LineFencing, migrations.LineWeir} {
		t.Run(line, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			schema, migrator := dbtest.SchemaAt(ctx, t, line, -1)
			w, err := worker.New(dbtest.Pool(ctx, t), &worker.Config{Schema: schema})
			require.NoError(t, err)
			worker.AddActivity(w, &ChargeActivity{})

			err = w.Start(ctx)
			behind, ok := errors.AsType[*migrations.SchemaBehindError](err)
			require.True(t, ok, "got %v", err)
			require.ErrorIs(t, err, migrations.ErrSchemaBehind)
			require.Len(t, behind.Lines, 1)
			require.Equal(t, line, behind.Lines[0].Line)
			require.Zero(t, behind.Lines[0].Current)
			require.Positive(t, behind.Lines[0].Latest)
			require.Contains(t, err.Error(), line+" at 0 of ")

			// Once migrated, the same worker starts.
			_, err = migrator.Up(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, w.Start(ctx))
			require.NoError(t, w.Stop(ctx))
		})
	}
}
