package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// ReportArgs are a River job's args that ask for their own queue, priority,
// tags and max attempts.
type ReportArgs struct {
	Month string `json:"month"`
}

func (ReportArgs) Kind() string { return "report" }

func (ReportArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 3, Priority: 2, Queue: "reports", Tags: []string{"monthly"}}
}

type ReportWorker struct {
	river.WorkerDefaults[ReportArgs]
}

func (*ReportWorker) Work(context.Context, *river.Job[ReportArgs]) error { return nil }

type ReportWorkflow struct {
	workflow.Defaults[ReportArgs, string]
}

func (*ReportWorkflow) Run(ctx workflow.Context, args ReportArgs) (string, error) {
	if _, err := workflow.ExecuteActivity[struct{}](ctx, args, nil).Get(ctx); err != nil {
		return "", err
	}
	// The workflow's options still win over the args'.
	if _, err := workflow.ExecuteActivity[struct{}](ctx, args, &workflow.ActivityOpts{Priority: 4, Tags: []string{"override"}}).Get(ctx); err != nil {
		return "", err
	}
	return "reported " + args.Month, nil
}

// PendingArgs ask for what an activity's job cannot honour.
type PendingArgs struct{}

func (PendingArgs) Kind() string                 { return "pending_report" }
func (PendingArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Pending: true} }

type PendingWorker struct {
	river.WorkerDefaults[PendingArgs]
}

func (*PendingWorker) Work(context.Context, *river.Job[PendingArgs]) error { return nil }

// TestRiverWorkerInsertOpts: a River worker used as an activity keeps its
// args' InsertOpts (queue, priority, tags, max attempts), and args whose
// InsertOpts cannot hold are refused at registration.
func TestRiverWorkerInsertOpts(t *testing.T) {
	t.Parallel()

	t.Run("Honoured", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		w, err := worker.New(b.pool, &worker.Config{
			Schema: b.schema, SweepInterval: 50 * time.Millisecond,
			Queues: map[string]river.QueueConfig{client.QueueDefault: {MaxWorkers: 5}, "reports": {MaxWorkers: 1}},
		})
		require.NoError(t, err)
		worker.AddWorkflow(w, &ReportWorkflow{})
		worker.AddRiverWorker(w, &ReportWorker{})
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(stopCtx))
		})

		run, err := b.client.Start(ctx, ReportArgs{Month: "2026-11"}, nil)
		require.NoError(t, err)
		got, err := getWithin[string](ctx, t, run)
		require.NoError(t, err)
		require.Equal(t, "reported 2026-11", got)

		rows, err := b.pool.Query(ctx, "SELECT queue, priority, max_attempts, tags FROM "+b.names.RiverJob+" WHERE kind = 'report' ORDER BY id")
		require.NoError(t, err)
		type job struct {
			Queue       string
			Priority    int
			MaxAttempts int
			Tags        []string
		}
		var jobs []job
		for rows.Next() {
			var j job
			require.NoError(t, rows.Scan(&j.Queue, &j.Priority, &j.MaxAttempts, &j.Tags))
			jobs = append(jobs, j)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []job{
			{Queue: "reports", Priority: 2, MaxAttempts: 3, Tags: []string{"monthly"}},
			{Queue: "reports", Priority: 4, MaxAttempts: 3, Tags: []string{"override"}},
		}, jobs)
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		w, err := worker.New(b.pool, &worker.Config{Schema: b.schema})
		require.NoError(t, err)
		defer func() {
			recovered := recover()
			err, ok := recovered.(error)
			require.True(t, ok, "AddRiverWorker did not refuse: %v", recovered)
			require.ErrorIs(t, err, worker.ErrInsertOptsUnsupported)
			require.Contains(t, err.Error(), "pending_report")
			require.Contains(t, err.Error(), "Pending")
		}()
		worker.AddRiverWorker(w, &PendingWorker{})
	})
}
