package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
)

// IdleArgs are the args of a workflow no test worker serves: a backfill's
// runs start and stay queued, so a test counts starts, not executions.
type IdleArgs struct{}

func (IdleArgs) Kind() string { return "idle" }

func TestDurableBackfill(t *testing.T) {
	t.Parallel()

	// startWorker starts a worker whose backfill attempts run one batch each,
	// so a stop lands between batches; stop stops it.
	startWorker := func(ctx context.Context, t *testing.T, b *testBundle) (stop func()) {
		t.Helper()
		w, err := worker.New(b.pool, &worker.Config{Schema: b.schema})
		require.NoError(t, err)
		worker.AddWorkflow(w, &TickWorkflow{})
		worker.SetBackfillSlice(w, 0)
		require.NoError(t, w.Start(ctx))
		stopped := false
		stop = func() {
			if stopped {
				return
			}
			stopped = true
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(stopCtx))
		}
		t.Cleanup(stop)
		return stop
	}
	// startsPerDueTime counts the runs of the schedule's due times: all of
	// them and the distinct workflow IDs.
	startsPerDueTime := func(ctx context.Context, t *testing.T, b *testBundle, id string) (runs, dueTimes int64) {
		t.Helper()
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT workflow_id) FROM "+b.names.Run+
			" WHERE workflow_id LIKE $1 || '/%'", id).Scan(&runs, &dueTimes))
		return runs, dueTimes
	}
	describe := func(ctx context.Context, t *testing.T, b *testBundle, bf *client.Backfill) *client.Backfill {
		t.Helper()
		got, err := b.client.DescribeBackfill(ctx, bf.ID)
		require.NoError(t, err)
		return got
	}

	t.Run("ResumesAfterAWorkerStopsEachDueTimeOnce", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)

		s, err := b.client.CreateSchedule(ctx, &client.ScheduleParams{ID: "every", Every: time.Second, Paused: true, Workflow: IdleArgs{}})
		require.NoError(t, err)
		const total = 1750 // four batches, the last one partial
		from, to := s.Anchor.Add(-time.Hour), s.Anchor.Add(total*time.Second+time.Millisecond)
		bf, err := b.client.CreateBackfill(ctx, "every", from, to)
		require.NoError(t, err)
		require.Equal(t, client.BackfillRunning, bf.State)
		require.EqualValues(t, total, bf.Total)
		require.Zero(t, bf.Started)
		require.Equal(t, s.Anchor.Add(time.Second), *bf.NextDueAt, "the first due time after the anchor")

		stop := startWorker(ctx, t, b)
		requireEventually(t, func() bool { return describe(ctx, t, b, bf).Started > 0 })
		stop()

		// Stopped mid-way: the progress says how far, and the runs agree.
		mid := describe(ctx, t, b, bf)
		require.Equal(t, client.BackfillRunning, mid.State, "one batch an attempt: the worker stopped before the end")
		require.Less(t, mid.Started, int64(total))
		require.Zero(t, mid.Started%500, "progress moves by whole batches")
		require.Equal(t, s.Anchor.Add(time.Duration(mid.Started+1)*time.Second), *mid.NextDueAt)
		runs, dueTimes := startsPerDueTime(ctx, t, b, "every")
		require.Equal(t, mid.Started, runs)
		require.Equal(t, runs, dueTimes)

		// Another worker resumes where the progress says.
		startWorker(ctx, t, b)
		requireEventually(t, func() bool { return describe(ctx, t, b, bf).State == client.BackfillCompleted })
		done := describe(ctx, t, b, bf)
		require.EqualValues(t, total, done.Started)
		require.Nil(t, done.NextDueAt)
		require.Empty(t, done.Error)
		runs, dueTimes = startsPerDueTime(ctx, t, b, "every")
		require.EqualValues(t, total, runs, "every due time started exactly once")
		require.Equal(t, runs, dueTimes)
		for _, due := range []time.Time{s.Anchor.Add(time.Second), s.Anchor.Add(total * time.Second)} {
			_, err := b.client.Describe(ctx, client.ScheduleWorkflowID("every", due), uuid.Nil)
			require.NoError(t, err, "the range's first and last due times started")
		}
	})

	t.Run("RepeatedRequestIsTheSameBackfill", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)

		s, err := b.client.CreateSchedule(ctx, &client.ScheduleParams{ID: "every", Every: time.Second, Paused: true, Workflow: IdleArgs{}})
		require.NoError(t, err)
		from, to := s.Anchor, s.Anchor.Add(1200*time.Second+time.Millisecond)
		first, err := b.client.CreateBackfill(ctx, "every", from, to)
		require.NoError(t, err)
		again, err := b.client.CreateBackfill(ctx, "every", from, to)
		require.NoError(t, err)
		require.Equal(t, first.ID, again.ID, "the same schedule and range are the same backfill")
		var jobs int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.RiverJob+" WHERE kind = $1", client.BackfillKind).Scan(&jobs))
		require.Equal(t, 1, jobs, "one job for both requests")

		startWorker(ctx, t, b)
		requireEventually(t, func() bool { return describe(ctx, t, b, first).State == client.BackfillCompleted })

		// Once done, the request still answers with that backfill and starts
		// nothing more.
		done, err := b.client.CreateBackfill(ctx, "every", from, to)
		require.NoError(t, err)
		require.Equal(t, first.ID, done.ID)
		require.Equal(t, client.BackfillCompleted, done.State)
		require.EqualValues(t, 1200, done.Started)
		runs, dueTimes := startsPerDueTime(ctx, t, b, "every")
		require.EqualValues(t, 1200, runs)
		require.Equal(t, runs, dueTimes)

		list, err := b.client.ListBackfills(ctx, "every")
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, first.ID, list[0].ID)
	})

	t.Run("OverlapsAnInlineBackfillWithoutSecondStarts", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)

		s, err := b.client.CreateSchedule(ctx, &client.ScheduleParams{ID: "every", Every: time.Second, Paused: true, Workflow: IdleArgs{}})
		require.NoError(t, err)
		inline, err := b.client.BackfillSchedule(ctx, "every", s.Anchor, s.Anchor.Add(300*time.Second+time.Millisecond))
		require.NoError(t, err)
		require.Len(t, inline, 300)
		bf, err := b.client.CreateBackfill(ctx, "every", s.Anchor, s.Anchor.Add(600*time.Second+time.Millisecond))
		require.NoError(t, err)
		startWorker(ctx, t, b)
		requireEventually(t, func() bool { return describe(ctx, t, b, bf).State == client.BackfillCompleted })
		runs, dueTimes := startsPerDueTime(ctx, t, b, "every")
		require.EqualValues(t, 600, runs)
		require.Equal(t, runs, dueTimes)
	})

	t.Run("DeletedScheduleFails", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)

		s, err := b.client.CreateSchedule(ctx, &client.ScheduleParams{ID: "every", Every: time.Second, Paused: true, Workflow: IdleArgs{}})
		require.NoError(t, err)
		bf, err := b.client.CreateBackfill(ctx, "every", s.Anchor, s.Anchor.Add(time.Hour))
		require.NoError(t, err)
		require.NoError(t, b.client.DeleteSchedule(ctx, "every"))
		startWorker(ctx, t, b)
		requireEventually(t, func() bool { return describe(ctx, t, b, bf).State == client.BackfillFailed })
		require.Contains(t, describe(ctx, t, b, bf).Error, "deleted")
	})
}
