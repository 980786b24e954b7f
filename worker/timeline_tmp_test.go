package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/worker"
)

func TestTimelineTmp(t *testing.T) {
	ctx := context.Background()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	names := dbschema.New(schema)
	w, err := worker.New(pool, &worker.Config{Schema: schema})
	require.NoError(t, err)
	worker.AddWorkflow(w, &ThreeStepWorkflow{})
	worker.AddActivity(w, &StepActivity{})
	require.NoError(t, w.Start(ctx))
	defer w.Stop(ctx)
	c, err := client.New(pool, &client.Config{Schema: schema})
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	for i := range 5 {
		begin := time.Now()
		run, err := c.Start(ctx, ThreeStepArgs{N: i}, nil)
		require.NoError(t, err)
		started := time.Since(begin)
		_, err = client.GetResult[int](ctx, run)
		require.NoError(t, err)
		t.Logf("start %v, result after %v", started, time.Since(begin))
		rows, _ := pool.Query(ctx, "SELECT kind, extract(epoch from created_at - $2)*1000, extract(epoch from attempted_at - $2)*1000, extract(epoch from finalized_at - $2)*1000 FROM "+names.RiverJob+" WHERE args->>'run_id' = $1 OR metadata->'weir'->>'run_id' = $1 ORDER BY id", run.RunID.String(), begin)
		for rows.Next() {
			var kind string
			var c, a, f *float64
			_ = rows.Scan(&kind, &c, &a, &f)
			t.Logf("  %s created %.1f attempted %.1f finalized %.1f", kind, *c, *a, *f)
		}
		rows.Close()
		var closed float64
		_ = pool.QueryRow(ctx, "SELECT extract(epoch from closed_at - $2)*1000 FROM "+names.Run+" WHERE run_id = $1", run.RunID, begin).Scan(&closed)
		t.Logf("  closed %.1f", closed)
		time.Sleep(100 * time.Millisecond)
	}
}
