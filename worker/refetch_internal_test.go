package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/store"
)

// listenInserts returns a connection that LISTENs on River's insert channel
// of the fixture's schema.
func (f *stepFixture) listenInserts(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := t.Context()
	conn, err := pgx.ConnectConfig(ctx, f.pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(ctx)) })
	channel, err := f.c.w.insertChannel(ctx)
	require.NoError(t, err)
	require.Equal(t, f.c.w.config.Schema+"."+store.RiverInsertTopic, channel)
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	return conn
}

// task is a fetched workflow task of queue in the group committer: it
// writes id as record does.
func (f *stepFixture) task(t *testing.T, queue, id string) error {
	t.Helper()
	return f.c.do(&groupMember{ctx: t.Context(), runID: uuid.New(), task: true, queue: queue, fn: f.record(id)})
}

// holdAs is hold, its outcome writing id.
func (f *stepFixture) holdAs(t *testing.T, wg *sync.WaitGroup, release <-chan struct{}, id string) {
	t.Helper()
	running := make(chan struct{})
	wg.Go(func() {
		body := f.record(id)
		assertNoError(t, f.c.commit(t.Context(), uuid.New(), func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
			close(running)
			<-release
			return body(ctx, tx, cont)
		}))
	})
	<-running
}

// payloads returns the payloads of the notifications conn receives within
// wait.
func payloads(t *testing.T, conn *pgx.Conn, wait time.Duration) []string {
	t.Helper()
	var got []string
	for {
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		n, err := conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			return got
		}
		got = append(got, n.Payload)
	}
}

// TestStepCommitterAnnouncesFreedTaskSlots: a group that commits several
// fetched workflow tasks announces each of their queues once on River's
// insert channel, with River's payload, so that producers fetch for the
// slots the tasks freed; a lone task, a group of outcomes and a group that
// rolled back announce nothing.
func TestStepCommitterAnnouncesFreedTaskSlots(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	conn := f.listenInserts(t)

	var wg sync.WaitGroup
	release := make(chan struct{})
	f.hold(t, &wg, release)
	for i, queue := range []string{"q-a", "q-b", "q-a"} {
		wg.Go(func() { assertNoError(t, f.task(t, queue, "task-"+string(rune('0'+i)))) })
	}
	wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), uuid.New(), f.record("outcome"))) })
	f.queued(t, 4)
	close(release)
	wg.Wait()
	got := f.xids(t)
	require.Equal(t, got["task-0"], got["task-1"], "the tasks committed in one group")
	require.Equal(t, got["task-0"], got["outcome"])
	require.ElementsMatch(t, []string{`{"queue": "q-a"}`, `{"queue": "q-b"}`}, payloads(t, conn, time.Second))

	require.NoError(t, f.task(t, "q-a", "lone"))
	release = make(chan struct{})
	f.holdAs(t, &wg, release, "held-2")
	wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), uuid.New(), f.record("outcome-1"))) })
	wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), uuid.New(), f.record("outcome-2"))) })
	f.queued(t, 2)
	close(release)
	wg.Wait()
	require.Empty(t, payloads(t, conn, 200*time.Millisecond), "a lone task or outcomes announce nothing")

	// A group that rolls back (a duplicate key at COMMIT) announces nothing:
	// its tasks run again alone, each a lone task.
	release = make(chan struct{})
	f.holdAs(t, &wg, release, "held-3")
	for _, id := range []string{"twice", "twice"} {
		wg.Go(func() { _ = f.task(t, "q-c", id) })
	}
	f.queued(t, 2)
	close(release)
	wg.Wait()
	require.Empty(t, payloads(t, conn, 200*time.Millisecond), "a group that rolled back announces nothing")
	require.Equal(t, int64(1), f.c.rolledBack.Load())
}
