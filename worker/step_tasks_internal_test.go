package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/limit"
	"github.com/weirhq/weir/workflow"
)

type firstTaskArgs struct {
	N     int  `json:"n"`
	Wait  bool `json:"wait"`
	Panic bool `json:"panic"` // in its task's first attempt
}

func (firstTaskArgs) Kind() string { return "first_task_wf" }

type firstTaskSignal struct {
	Add int `json:"add"`
}

func (firstTaskSignal) Kind() string { return "first_task_add" }

// firstTaskWorkflow returns its N in its first task, plus, when it waits,
// what the signal it takes adds; one that panics does so in its task's
// first attempt.
type firstTaskWorkflow struct {
	workflow.Defaults[firstTaskArgs, int]
}

func (*firstTaskWorkflow) Run(ctx workflow.Context, args firstTaskArgs) (int, error) {
	if args.Panic && workflow.GetInfo(ctx).TaskAttempt == 1 {
		panic("first attempt")
	}
	if !args.Wait {
		return args.N, nil
	}
	signal, err := workflow.GetSignalChannel[firstTaskSignal](ctx).Receive(ctx)
	return args.N + signal.Add, err
}

// TestStepGroupsRunFirstTasks: the first tasks of a burst of runs started
// the normal way (through River, no eager start), fetched together, commit
// in groups (one group at a time here, so that groups fill), as activity
// outcomes do; those whose run's inbox had a signal waiting take it, once,
// in the group; one whose code panics fails its task (recorded on its job,
// retried) without failing its group. Every run completes with its result,
// its task job completed and nothing left in its inbox.
func TestStepGroupsRunFirstTasks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	c, err := client.New(pool, &client.Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	const n = 40
	runs := make([]*client.Run, n)
	for i := range runs {
		runs[i], err = c.Start(ctx, firstTaskArgs{N: i, Wait: i%2 == 1, Panic: i == n/2}, nil)
		require.NoError(t, err)
		if i%2 == 1 {
			require.NoError(t, c.Signal(ctx, runs[i].WorkflowID, runs[i].RunID, firstTaskSignal{Add: 1000}, nil))
		}
	}

	w, err := New(pool, &Config{Schema: schema})
	require.NoError(t, err)
	w.stepGroups = limit.Fixed(1)
	AddWorkflow(w, &firstTaskWorkflow{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) })
	for i, run := range runs {
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		got, err := client.GetResult[int](waitCtx, run)
		cancel()
		require.NoError(t, err)
		want := i
		if i%2 == 1 {
			want += 1000
		}
		require.Equal(t, want, got, "workflow %d", i)
	}

	names := dbschema.New(schema)
	var inbox, tasks, signals int
	require.NoError(t, pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+names.Inbox+"),"+
		" (SELECT count(*) FROM "+names.Run+" WHERE task_job_id IS NOT NULL),"+
		" (SELECT count(*) FROM "+names.History+" WHERE type = 'SignalReceived')").Scan(&inbox, &tasks, &signals))
	require.Zero(t, inbox, "inbox items left")
	require.Zero(t, tasks, "runs still naming a task job")
	require.Equal(t, n/2, signals, "signals in history")
	require.Eventually(t, func() bool {
		var running int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+names.RiverJob+" WHERE state <> 'completed'").Scan(&running))
		return running == 0
	}, time.Minute, 10*time.Millisecond, "task jobs not completed")
	var errs int
	require.NoError(t, pool.QueryRow(ctx, "SELECT coalesce(array_length(errors, 1), 0) FROM "+names.RiverJob+" WHERE args->>'run_id' = $1",
		runs[n/2].RunID.String()).Scan(&errs))
	require.Equal(t, 1, errs, "the panic is recorded on the task's job")
	require.Positive(t, w.steps.grouped.Load(), "no first tasks committed in groups")
	require.Zero(t, w.steps.rolledBack.Load(), "groups rolled back")
	t.Logf("groups committed %d, tasks in groups %d", w.steps.committed.Load(), w.steps.grouped.Load())
}
