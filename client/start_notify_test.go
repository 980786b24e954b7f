package client_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
)

// notifyTracer records the notifications its pool's connections send
// inside a transaction: a pg_notify in a statement run in one, or in a
// batch that begins one.
type notifyTracer struct {
	mu         sync.Mutex
	violations []string
}

func (tr *notifyTracer) check(conn *pgx.Conn, sqls ...string) {
	inTx := conn.PgConn().TxStatus() != 'I'
	notifies := false
	for _, sql := range sqls {
		inTx = inTx || strings.HasPrefix(strings.ToLower(strings.TrimSpace(sql)), "begin")
		notifies = notifies || strings.Contains(sql, "pg_notify")
	}
	if inTx && notifies {
		tr.mu.Lock()
		tr.violations = append(tr.violations, strings.Join(sqls, "; "))
		tr.mu.Unlock()
	}
}

func (tr *notifyTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	tr.check(conn, data.SQL)
	return ctx
}

func (*notifyTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (tr *notifyTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, qq := range data.Batch.QueuedQueries {
		sqls = append(sqls, qq.SQL)
	}
	tr.check(conn, sqls...)
	return ctx
}

func (*notifyTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*notifyTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestStartAnnouncesAfterCommit: Start's transaction sends no notification
// (a NOTIFY in a transaction serializes commits), yet River's workers of
// the run's queue are told of its task job once Start returns: a LISTEN on
// River's insert channel gets the queue, for each of starts made one after
// another (River's own notification, in the transaction, is throttled per
// queue).
func TestStartAnnouncesAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	schema := dbtest.TestSchema(ctx, t)
	config, err := pgxpool.ParseConfig(dbtest.URL(ctx, t))
	require.NoError(t, err)
	tracer := &notifyTracer{}
	config.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := client.New(pool, &client.Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	conn, err := pgx.Connect(ctx, dbtest.URL(ctx, t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(ctx)) })
	_, err = conn.Exec(ctx, `LISTEN "`+schema+`.river_insert"`)
	require.NoError(t, err)

	for i := range 3 {
		_, err := c.Start(ctx, orderArgs{ID: "announced", Cents: int64(i)}, &client.StartOpts{Queue: "announced"})
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		n, err := conn.WaitForNotification(waitCtx)
		cancel()
		require.NoError(t, err, "start %d announced its queue", i)
		require.JSONEq(t, `{"queue": "announced"}`, n.Payload)
	}
	tracer.mu.Lock()
	defer tracer.mu.Unlock()
	require.Empty(t, tracer.violations, "no notification sent inside a start's transaction")
}
