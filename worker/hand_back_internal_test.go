package worker

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

// TestHandBacksCoalesce: many hand-backs at once cost their queue at most
// one insert notification per slot (a few, not one per job), each sent
// after the snoozes it covers end; Stop drops those still pending.
func TestHandBacksCoalesce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	w, err := New(pool, &Config{Schema: schema})
	require.NoError(t, err)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{schema + ".river_insert"}.Sanitize())
	require.NoError(t, err)

	begin := time.Now()
	const jobs = 40
	for range jobs {
		var snooze *river.JobSnoozeError
		require.ErrorAs(t, w.returns.returnToQueue("hb_queue"), &snooze)
		require.GreaterOrEqual(t, snooze.Duration, time.Second)
		require.Less(t, snooze.Duration, 2*time.Second)
	}
	w.returns.mu.Lock()
	pending := len(w.returns.pending)
	w.returns.mu.Unlock()
	require.LessOrEqual(t, pending, 5, "one notification per slot of the one-to-two-second spread")

	got := 0
	for {
		waitCtx, cancel := context.WithTimeout(ctx, 2500*time.Millisecond-time.Since(begin))
		n, err := conn.Conn().WaitForNotification(waitCtx)
		cancel()
		if err != nil {
			break
		}
		require.JSONEq(t, `{"queue":"hb_queue"}`, n.Payload)
		require.GreaterOrEqual(t, time.Since(begin), time.Second, "no notification before a snooze could end")
		got++
	}
	require.Equal(t, pending, got, "every slot announced once")

	require.Error(t, w.returns.returnToQueue("hb_queue"))
	w.returns.stop()
	w.returns.mu.Lock()
	defer w.returns.mu.Unlock()
	require.Empty(t, w.returns.pending, "stop drops what is pending")
}
