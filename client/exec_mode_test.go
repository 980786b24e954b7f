package client_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestStartsUnderEveryExecMode: starts made at once, in groups, and a
// start alone succeed whatever query exec mode the pool's connections use,
// the simple protocol included (pgx then gets no parameter types).
func TestStartsUnderEveryExecMode(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, mode := range dbtest.QueryExecModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := dbtest.ModePool(ctx, t, mode, 0)
			c, err := client.New(pool, &client.Config{Schema: dbtest.TestSchema(ctx, t)})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, c.Close()) })
			runs, errs := burst(16, func(i int) (*client.Run, error) {
				return c.Start(ctx, orderArgs{ID: fmt.Sprint(i), Cents: 7}, nil)
			})
			for i := range runs {
				require.NoError(t, errs[i])
				require.True(t, runs[i].Created)
			}
			again, err := c.Start(ctx, orderArgs{ID: "alone"}, nil)
			require.NoError(t, err)
			require.True(t, again.Created)
		})
	}
}
