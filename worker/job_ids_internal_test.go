package worker

import (
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestJobIDs: reserved IDs come from river_job's sequence in blocks, each
// handed out once, and a block is reserved again only once one ran out
// (concurrent takers share them; the sequence never repeats).
func TestJobIDs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	ids := &jobIDs{schema: schema}

	seen := map[int64]bool{}
	var last int64
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for range jobIDBlock + 2 {
			id, err := ids.take(ctx, tx)
			require.NoError(t, err)
			require.False(t, seen[id], "ID %d handed out twice", id)
			require.Greater(t, id, last, "in the sequence's order")
			seen[id], last = true, id
		}
		return nil
	}))
	require.Len(t, ids.ids, jobIDBlock-2, "two blocks reserved, two IDs of the second taken")
	var next int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT nextval(pg_get_serial_sequence($1, 'id'))", dbschema.New(schema).RiverJob).Scan(&next))
	require.Greater(t, next, ids.ids[len(ids.ids)-1], "the sequence moved past every reserved ID")

	// Concurrent takers, each through its own transaction.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				for range 100 {
					id, err := ids.take(ctx, tx)
					if err != nil {
						return err
					}
					mu.Lock()
					require.False(t, seen[id], "ID %d handed out twice", id)
					seen[id] = true
					mu.Unlock()
				}
				return nil
			}))
		})
	}
	wg.Wait()
	require.Len(t, seen, jobIDBlock+2+400)
}
