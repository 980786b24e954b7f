package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// announceFixture is a client whose pool records notifications sent inside
// a transaction, and a connection that listens on River's insert channel.
type announceFixture struct {
	c      *client.Client
	conn   *pgx.Conn
	schema string
	tracer *notifyTracer
}

func newAnnounceFixture(t *testing.T) *announceFixture {
	ctx := t.Context()
	f := &announceFixture{schema: dbtest.TestSchema(ctx, t), tracer: &notifyTracer{}}
	pool := dbtest.TracedPool(ctx, t, f.tracer)
	var err error
	f.c, err = client.New(pool, &client.Config{Schema: f.schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.c.Close()) })

	f.conn, err = pgx.Connect(ctx, dbtest.URL(ctx, t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.conn.Close(context.WithoutCancel(ctx)) })
	_, err = f.conn.Exec(ctx, `LISTEN "`+f.schema+`.river_insert"`)
	require.NoError(t, err)
	return f
}

// announced waits for the announcement of queue.
func (f *announceFixture) announced(t *testing.T, queue, what string) {
	t.Helper()
	waitCtx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	n, err := f.conn.WaitForNotification(waitCtx)
	require.NoError(t, err, "%s announced its queue", what)
	require.JSONEq(t, `{"queue": "`+queue+`"}`, n.Payload, what)
}

// noneInTx checks that no transaction of the client sent a notification.
func (f *announceFixture) noneInTx(t *testing.T) {
	t.Helper()
	f.tracer.mu.Lock()
	defer f.tracer.mu.Unlock()
	require.Empty(t, f.tracer.violations, "no notification sent inside the client's transactions")
}

// TestStartAnnouncesAfterCommit: Start's transaction sends no notification
// (a NOTIFY in a transaction serializes commits), yet River's workers of
// the run's queue are told of its task job once Start returns: a LISTEN on
// River's insert channel gets the queue, for each of starts made one after
// another (River's own notification, in the transaction, is throttled per
// queue).
func TestStartAnnouncesAfterCommit(t *testing.T) {
	t.Parallel()
	f := newAnnounceFixture(t)
	for i := range 3 {
		_, err := f.c.Start(t.Context(), orderArgs{ID: "announced", Cents: int64(i)}, &client.StartOpts{Queue: "announced"})
		require.NoError(t, err)
		f.announced(t, "announced", fmt.Sprintf("start %d", i))
	}
	f.noneInTx(t)
}

// TestOwnTransactionsAnnounceAfterCommit: every call that queues a
// workflow task in a transaction of the client's own (SignalWithStart, and
// a signal, cancellation or update to a run with no task queued) sends no
// notification inside it, and announces the task's queue once it
// committed.
func TestOwnTransactionsAnnounceAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newAnnounceFixture(t)
	opts := &client.StartOpts{Queue: "announced", WorkflowID: "signalled"}
	run, err := f.c.SignalWithStart(ctx, orderArgs{ID: "o"}, opts, orderArgs{ID: "s"}, nil)
	require.NoError(t, err)
	require.True(t, run.Created)
	f.announced(t, "announced", "SignalWithStart")

	// The run's task ran, as far as the run knows: the next item queues one.
	idle := func() {
		_, err := f.conn.Exec(ctx, `UPDATE "`+f.schema+`".weir_run SET task_job_id = NULL WHERE run_id = $1`, run.RunID)
		require.NoError(t, err)
	}
	idle()
	require.NoError(t, f.c.Signal(ctx, run.WorkflowID, run.RunID, orderArgs{ID: "s2"}, nil))
	f.announced(t, "announced", "Signal")
	idle()
	require.NoError(t, f.c.Cancel(ctx, run.WorkflowID, run.RunID, "test"))
	f.announced(t, "announced", "Cancel")
	idle()
	updateCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = f.c.Update(updateCtx, run.WorkflowID, run.RunID, orderArgs{ID: "u"}, nil, nil) }() // no worker answers
	f.announced(t, "announced", "Update")
	f.noneInTx(t)
}
