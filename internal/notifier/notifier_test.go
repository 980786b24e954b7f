package notifier_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/notifier"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// listen LISTENs on a channel of its own and returns it with the payloads
// received on it; its connection closes when the test ends.
func listen(ctx context.Context, t *testing.T) (string, <-chan string) {
	t.Helper()
	channel := "weir_notifier_test_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	conn, err := pgx.Connect(ctx, dbtest.URL(ctx, t))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "LISTEN "+channel)
	require.NoError(t, err)
	got := make(chan string, 10_000)
	listenCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.WaitForNotification(listenCtx)
			if err != nil {
				return
			}
			got <- n.Payload
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = conn.Close(context.Background())
	})
	return channel, got
}

// receive collects payloads until want distinct ones came, failing after a
// while; it fails on a payload received twice.
func receive(t *testing.T, got <-chan string, want int) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	timeout := time.After(30 * time.Second)
	for len(seen) < want {
		select {
		case p := <-got:
			require.False(t, seen[p], "payload %q received twice", p)
			seen[p] = true
		case <-timeout:
			t.Fatalf("received %d of %d notifications", len(seen), want)
		}
	}
	return seen
}

// sendCounter counts the notifier's statements on a pool.
type sendCounter struct{ sends atomic.Int64 }

func (c *sendCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "pg_notify") {
		c.sends.Add(1)
	}
	return ctx
}

func (*sendCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Every notification is delivered exactly once, from many goroutines at
// once, and those that come while a send is in flight share the next send.
func TestNotifyDeliversEachOnceInFewSends(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	counter := &sendCounter{}
	n := notifier.New(dbtest.TracedPool(ctx, t, counter), nil)
	channel, got := listen(ctx, t)

	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				n.Notify(channel, fmt.Sprintf("%d/%d", g, i))
			}
		})
	}
	wg.Wait()
	seen := receive(t, got, goroutines*each)
	require.NoError(t, n.Close(ctx))
	require.Len(t, seen, goroutines*each)
	sends := counter.sends.Load()
	require.Positive(t, sends)
	require.Less(t, sends, int64(goroutines*each/4), "notifications that came during a send went together")
	t.Logf("%d notifications in %d sends", goroutines*each, sends)
}

// Close sends what is pending before it returns; a notification after Close
// is dropped.
func TestNotifyCloseSendsPending(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	n := notifier.New(pool, nil)
	channel, got := listen(ctx, t)

	for i := range 100 {
		n.Notify(channel, fmt.Sprint(i))
	}
	require.NoError(t, n.Close(ctx))
	receive(t, got, 100)

	n.Notify(channel, "after close")
	// A marker sent later, by hand: had the late one been sent, it would
	// have come first.
	_, err := pool.Exec(ctx, "SELECT pg_notify($1, 'marker')", channel)
	require.NoError(t, err)
	require.Equal(t, "marker", <-got)
}

// A failed send is logged and does not hold up Close.
func TestNotifySendFailureIsLogged(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.TracedPool(ctx, t, &sendCounter{})
	pool.Close() // every send fails
	var logs syncBuffer
	n := notifier.New(pool, slog.New(slog.NewTextHandler(&logs, nil)))
	n.Notify("weir_notifier_test_nobody", "x")
	require.NoError(t, n.Close(ctx))
	require.Contains(t, logs.String(), "sending notifications failed")
	require.Contains(t, logs.String(), "notifications=1")
}

// Close gives up when its context ends first.
func TestNotifyCloseHonoursContext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	config, err := pgxpool.ParseConfig(dbtest.URL(ctx, t))
	require.NoError(t, err)
	config.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	defer pool.Close()
	conn, err := pool.Acquire(ctx) // the send waits for this connection
	require.NoError(t, err)

	n := notifier.New(pool, slog.New(slog.DiscardHandler))
	n.Notify("weir_notifier_test_nobody", "x")
	closeCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, n.Close(closeCtx), context.DeadlineExceeded)
	conn.Release() // the send goes, and the notifier's goroutine ends
	require.NoError(t, n.Close(ctx))
}

// syncBuffer is a bytes.Buffer safe for a logger's goroutine and the test's.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
