package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
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

// TestStepCommitterAnnouncesFreedTaskSlots: a group that commits more of a
// queue's fetched workflow tasks than River's next fetch of the queue asks
// for (the slots free before they return, and one) announces the queue once
// on River's insert channel, with River's payload, so that producers fetch
// for the slots the tasks freed; a group that frees no more, a lone task, a
// group of outcomes and a group that rolled back announce nothing.
func TestStepCommitterAnnouncesFreedTaskSlots(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	conn := f.listenInserts(t)
	f.c.w.refetches = newRefetcher(map[string]river.QueueConfig{
		"q-a": {MaxWorkers: 2}, "q-b": {MaxWorkers: 3}, "q-c": {MaxWorkers: 2}, "q-d": {MaxWorkers: 10}, "q-e": {MaxWorkers: 4},
	})
	// The slots the tasks below hold, and one more of q-e's.
	for queue, held := range map[string]int64{"q-a": 2, "q-b": 2, "q-d": 2, "q-e": 4} {
		f.c.w.refetches.held[queue].Store(held)
	}

	var wg sync.WaitGroup
	release := make(chan struct{})
	f.hold(t, &wg, release)
	tasks := []string{"q-a", "q-b", "q-a", "q-b", "q-d", "q-d", "q-e", "q-e", "q-e"}
	for i, queue := range tasks {
		wg.Go(func() { assertNoError(t, f.task(t, queue, "task-"+string(rune('0'+i)))) })
	}
	wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), uuid.New(), f.record("outcome"))) })
	f.queued(t, len(tasks)+1)
	close(release)
	wg.Wait()
	got := f.xids(t)
	require.Equal(t, got["task-0"], got["task-8"], "the tasks committed in one group")
	require.Equal(t, got["task-0"], got["outcome"])
	require.ElementsMatch(t, []string{`{"queue": "q-a"}`, `{"queue": "q-e"}`}, payloads(t, conn, time.Second),
		"q-a and q-e had no slot free; q-b's next fetch asks for both its tasks' slots, and q-d had 8 free")

	require.NoError(t, f.task(t, "q-a", "lone"), "its own slot is what River's next fetch asks for")
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
	f.c.w.refetches.held["q-c"].Store(2)
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

// TestRefetcherCountsHeldSlots: a job of a configured queue holds one of its
// slots while it runs, whatever it returns; other queues' jobs count nowhere.
func TestRefetcherCountsHeldSlots(t *testing.T) {
	t.Parallel()
	f := newRefetcher(map[string]river.QueueConfig{"q": {MaxWorkers: 3}})
	held := func() int64 { return f.held["q"].Load() }
	err := f.Work(t.Context(), &rivertype.JobRow{Queue: "q"}, func(ctx context.Context) error {
		require.Equal(t, int64(1), held())
		return f.Work(ctx, &rivertype.JobRow{Queue: "q"}, func(context.Context) error {
			require.Equal(t, int64(2), held())
			require.Equal(t, []string{"q"}, f.starved([]string{"q", "q", "q"}), "3 free a slot; the next fetch asks for 2")
			require.Empty(t, f.starved([]string{"q", "q"}))
			return errors.New("failed")
		})
	})
	require.EqualError(t, err, "failed")
	require.Equal(t, int64(0), held())
	require.NoError(t, f.Work(t.Context(), &rivertype.JobRow{Queue: "other"}, func(context.Context) error { return nil }))
	require.Empty(t, f.starved([]string{"other", "other", "other"}))
}

type slotArgs struct{}

func (slotArgs) Kind() string { return "slot_holder" }

type slotWorker struct {
	river.WorkerDefaults[slotArgs]
	running, release chan struct{}
}

func (s *slotWorker) Work(context.Context, *river.Job[slotArgs]) error {
	s.running <- struct{}{}
	<-s.release
	return nil
}

// TestWorkerCountsTheSlotsItsJobsHold: a River job a started worker runs
// holds one of its queue's slots in the count until it returns.
func TestWorkerCountsTheSlotsItsJobsHold(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	w, err := New(pool, &Config{Schema: dbtest.TestSchema(ctx, t)})
	require.NoError(t, err)
	slots := &slotWorker{running: make(chan struct{}), release: make(chan struct{})}
	AddRiverWorker(w, slots)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) })

	held := w.refetches.held[client.QueueDefault]
	_, err = w.riverClient.Insert(ctx, slotArgs{}, &river.InsertOpts{Queue: client.QueueDefault})
	require.NoError(t, err)
	<-slots.running
	whileRunning := held.Load()
	close(slots.release)
	require.Equal(t, int64(1), whileRunning)
	require.Eventually(t, func() bool { return held.Load() == 0 }, 10*time.Second, 5*time.Millisecond)
}
