package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
)

// tripTracer records the round trips of its pool's connections, but for
// the notifications sent after commits: each batch's statements, or a
// statement sent by itself.
type tripTracer struct {
	mu    sync.Mutex
	trips [][]string
}

func (tr *tripTracer) record(sqls ...string) {
	for _, sql := range sqls {
		if strings.Contains(sql, "pg_notify") {
			return
		}
	}
	tr.mu.Lock()
	tr.trips = append(tr.trips, sqls)
	tr.mu.Unlock()
}

// take returns the round trips recorded since the last take.
func (tr *tripTracer) take() [][]string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	trips := tr.trips
	tr.trips = nil
	return trips
}

func (tr *tripTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	tr.record(data.SQL)
	return ctx
}

func (*tripTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (tr *tripTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	sqls := make([]string, 0, len(data.Batch.QueuedQueries))
	for _, qq := range data.Batch.QueuedQueries {
		sqls = append(sqls, qq.SQL)
	}
	tr.record(sqls...)
	return ctx
}

func (*tripTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*tripTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestQueuedStartInOneRoundTrip: a start alone whose first task goes
// through River's queue sends its lock, its lookup and insert and its
// COMMIT in one round trip, and so does a start that replays it (its
// request ID's run) or is refused (the workflow ID's live run): those
// insert nothing.
func TestQueuedStartInOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema := dbtest.TestSchema(ctx, t)
	tracer := &tripTracer{}
	pool := dbtest.TracedPool(ctx, t, tracer)
	c, err := client.New(pool, &client.Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	_ = tracer.take() // the client's own set-up

	oneTrip := func(what string) {
		t.Helper()
		trips := tracer.take()
		require.Len(t, trips, 1, "%s: one round trip, not %d", what, len(trips))
		require.Equal(t, "COMMIT", trips[0][len(trips[0])-1], "%s: its COMMIT rides in it", what)
	}
	run, err := c.Start(ctx, orderArgs{ID: "o1", Cents: 100}, &client.StartOpts{WorkflowID: "order-1", RequestID: "r1"})
	require.NoError(t, err)
	require.True(t, run.Created)
	oneTrip("a new workflow ID")

	again, err := c.Start(ctx, orderArgs{ID: "o1", Cents: 100}, &client.StartOpts{WorkflowID: "order-1", RequestID: "r1"})
	require.NoError(t, err)
	require.False(t, again.Created)
	require.Equal(t, run.RunID, again.RunID)
	oneTrip("its replay")

	_, err = c.Start(ctx, orderArgs{ID: "o2", Cents: 200}, &client.StartOpts{WorkflowID: "order-1", RequestID: "r2"})
	var started *client.WorkflowAlreadyStartedError
	require.ErrorAs(t, err, &started)
	require.Equal(t, run.RunID, started.RunID)
	oneTrip("a start refused")

	var runs, jobs int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "weir_run"}.Sanitize()).Scan(&runs))
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" WHERE kind LIKE 'weir.workflow:%' AND state = 'available'").Scan(&jobs))
	require.Equal(t, []int{1, 1}, []int{runs, jobs}, "one run, its first task queued; nothing for the replay and the refusal")
}

// BenchmarkStartAlone measures starts made one at a time, no worker linked:
// each goes alone, so its time is its round trips' and its statements'.
//
//	go test -run '^$' -bench StartAlone ./client/
func BenchmarkStartAlone(b *testing.B) {
	ctx := context.Background()
	c, err := client.New(dbtest.Pool(ctx, b), &client.Config{Schema: dbtest.TestSchema(ctx, b)})
	require.NoError(b, err)
	defer c.Close()
	i := 0
	for b.Loop() {
		i++
		_, err := c.Start(ctx, orderArgs{ID: fmt.Sprint(i), Cents: 7}, nil)
		require.NoError(b, err)
	}
}
