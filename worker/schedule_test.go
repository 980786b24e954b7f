package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type TickArgs struct {
	Hold bool `json:"hold"`
}

func (TickArgs) Kind() string { return "tick" }

// TickWorkflow returns at once, or with Hold waits for "done".
type TickWorkflow struct {
	workflow.Defaults[TickArgs, string]
}

func (w *TickWorkflow) Run(ctx workflow.Context, args TickArgs) (string, error) {
	if args.Hold {
		if _, err := workflow.GetSignalChannel[DoneSignal](ctx).Receive(ctx); err != nil {
			return "", err
		}
	}
	return "tick", nil
}

func TestSchedules(t *testing.T) {
	t.Parallel()

	startWorkers := func(ctx context.Context, t *testing.T, b *testBundle, n int) {
		t.Helper()
		for range n {
			w, err := worker.New(b.pool, &worker.Config{Schema: b.schema})
			require.NoError(t, err)
			worker.AddWorkflow(w, &TickWorkflow{})
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() {
				stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				require.NoError(t, w.Stop(stopCtx))
			})
		}
	}
	runsOf := func(ctx context.Context, t *testing.T, b *testBundle, prefix string) []*client.RunSummary {
		t.Helper()
		page, err := b.client.List(ctx, &client.ListOpts{Kind: "tick", Limit: 1000, WorkflowIDPrefix: prefix})
		require.NoError(t, err)
		return page.Runs
	}

	t.Run("BackfillStartsOnlyLiveDueTimes", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)

		s, err := b.client.CreateSchedule(ctx, &client.ScheduleParams{ID: "every", Every: time.Second, Paused: true, Workflow: TickArgs{}})
		require.NoError(t, err)
		require.NotNil(t, s.NextRunAt)
		require.Equal(t, s.Anchor.Add(time.Second), *s.NextRunAt, "the live schedule's first due time")

		// Before its creation the live schedule fires nothing.
		runs, err := b.client.BackfillSchedule(ctx, "every", s.CreatedAt.Add(-10*time.Second), s.CreatedAt.Add(time.Nanosecond))
		require.NoError(t, err)
		require.Empty(t, runs)

		// Through its first due times: exactly those.
		runs, err = b.client.BackfillSchedule(ctx, "every", s.CreatedAt.Add(-10*time.Second), s.NextRunAt.Add(2500*time.Millisecond))
		require.NoError(t, err)
		var ids []string
		for _, r := range runs {
			ids = append(ids, r.WorkflowID)
		}
		require.Equal(t, []string{
			client.ScheduleWorkflowID("every", *s.NextRunAt),
			client.ScheduleWorkflowID("every", s.NextRunAt.Add(time.Second)),
			client.ScheduleWorkflowID("every", s.NextRunAt.Add(2*time.Second)),
		}, ids)
	})

	t.Run("OneStartPerDueTimeUnderCompetingWorkers", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorkers(ctx, t, b, 2)

		_, err := b.client.CreateSchedule(ctx, &client.ScheduleParams{ID: "every", Every: 200 * time.Millisecond, Workflow: TickArgs{}})
		require.NoError(t, err)
		requireEventually(t, func() bool { return len(runsOf(ctx, t, b, "every/")) >= 5 })
		_, err = b.client.UpdateSchedule(ctx, "every", &client.ScheduleUpdate{Paused: new(true)})
		require.NoError(t, err)

		seen := map[string]bool{}
		for _, r := range runsOf(ctx, t, b, "every/") {
			require.False(t, seen[r.WorkflowID], "one run per due time")
			seen[r.WorkflowID] = true
			require.Equal(t, int64(1), r.Generation, "no due time started twice")
		}
		desc, err := b.client.DescribeSchedule(ctx, "every")
		require.NoError(t, err)
		require.True(t, desc.Paused)
		require.NotNil(t, desc.LastRunID)
	})

	t.Run("OverlapPolicies", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorkers(ctx, t, b, 1)

		for _, policy := range []client.OverlapPolicy{client.OverlapSkip, client.OverlapBufferOne, client.OverlapAllowAll} {
			_, err := b.client.CreateSchedule(ctx, &client.ScheduleParams{
				ID: string(policy), Every: 150 * time.Millisecond, OverlapPolicy: policy, Workflow: TickArgs{Hold: true},
			})
			require.NoError(t, err)
		}
		// Let several due times pass while the first runs hold.
		requireEventually(t, func() bool { return len(runsOf(ctx, t, b, "allow_all/")) >= 4 })
		for _, policy := range []client.OverlapPolicy{client.OverlapSkip, client.OverlapBufferOne} {
			_, err := b.client.UpdateSchedule(ctx, string(policy), &client.ScheduleUpdate{Paused: new(true)})
			require.NoError(t, err)
		}
		require.Len(t, runsOf(ctx, t, b, "skip/"), 1, "skip: nothing starts while the run holds")
		require.Len(t, runsOf(ctx, t, b, "buffer_one/"), 1, "buffer_one: one start waits")

		// The held buffer_one run closes: its one buffered start goes.
		first := runsOf(ctx, t, b, "buffer_one/")[0]
		require.NoError(t, b.client.Signal(ctx, first.WorkflowID, uuid.Nil, DoneSignal{}, nil))
		_, err := b.client.UpdateSchedule(ctx, "buffer_one", &client.ScheduleUpdate{Paused: new(false)})
		require.NoError(t, err)
		requireEventually(t, func() bool { return len(runsOf(ctx, t, b, "buffer_one/")) == 2 })
	})

	t.Run("PauseAndResume", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorkers(ctx, t, b, 1)

		_, err := b.client.CreateSchedule(ctx, &client.ScheduleParams{ID: "pr", Every: 100 * time.Millisecond, Paused: true, Workflow: TickArgs{}})
		require.NoError(t, err)

		// A pause in a transaction that rolls back leaves it as it was.
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		s, err := b.client.ResumeScheduleTx(ctx, tx, "pr")
		require.NoError(t, err)
		require.False(t, s.Paused)
		require.NoError(t, tx.Rollback(ctx))
		s, err = b.client.DescribeSchedule(ctx, "pr")
		require.NoError(t, err)
		require.True(t, s.Paused)

		s, err = b.client.ResumeSchedule(ctx, "pr")
		require.NoError(t, err)
		require.False(t, s.Paused)
		require.NotNil(t, s.NextRunAt)
		requireEventually(t, func() bool { return len(runsOf(ctx, t, b, "pr/")) >= 2 })

		s, err = b.client.PauseSchedule(ctx, "pr")
		require.NoError(t, err)
		require.True(t, s.Paused)
		s, err = b.client.DescribeSchedule(ctx, "pr")
		require.NoError(t, err)
		require.True(t, s.Paused)
		_, err = b.client.PauseSchedule(ctx, "nosuch")
		require.ErrorIs(t, err, client.ErrScheduleNotFound)
	})

	t.Run("TriggerAndBackfill", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorkers(ctx, t, b, 1)

		s, err := b.client.CreateSchedule(ctx, &client.ScheduleParams{
			ID: "hourly", Cron: "@hourly", Workflow: TickArgs{}, Paused: true, Note: "paused on purpose",
		})
		require.NoError(t, err)
		require.Equal(t, "paused on purpose", s.Note)

		run, err := b.client.TriggerSchedule(ctx, "hourly")
		require.NoError(t, err)
		result, err := getWithin[string](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, "tick", result)

		from := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
		var mu sync.Mutex
		var backfilled []*client.Run
		for range 2 { // twice: the same due times start once
			runs, err := b.client.BackfillSchedule(ctx, "hourly", from, from.Add(3*time.Hour))
			require.NoError(t, err)
			mu.Lock()
			backfilled = append(backfilled, runs...)
			mu.Unlock()
		}
		require.Len(t, backfilled, 6)
		created := 0
		for _, r := range backfilled {
			if r.Created {
				created++
			}
		}
		require.Equal(t, 3, created, "three due times, three runs")

		list, err := b.client.ListSchedules(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.NoError(t, b.client.DeleteSchedule(ctx, "hourly"))
		require.ErrorIs(t, b.client.DeleteSchedule(ctx, "hourly"), client.ErrScheduleNotFound)
		_, err = b.client.CreateSchedule(ctx, &client.ScheduleParams{ID: "bad", Cron: "not cron", Workflow: TickArgs{}})
		require.Error(t, err)
	})
}
