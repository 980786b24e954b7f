package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"github.com/google/uuid"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type ChattyArgs struct {
	Marker string `json:"marker"`
}

func (ChattyArgs) Kind() string { return "chatty" }

// ChattyWorkflow logs through workflow.GetLogger around an activity, so its
// first line is replayed once the activity's outcome arrives.
type ChattyWorkflow struct {
	workflow.Defaults[ChattyArgs, int64]
}

func (w *ChattyWorkflow) Run(ctx workflow.Context, args ChattyArgs) (int64, error) {
	workflow.GetLogger(ctx).Info("chatty before", slog.String("marker", args.Marker))
	charge, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: args.Marker, Cents: 3}, nil).Get(ctx)
	if err != nil {
		return 0, err
	}
	workflow.GetLogger(ctx).Info("chatty after", slog.String("marker", args.Marker))
	return charge.Cents, nil
}

// syncBuffer is a bytes.Buffer that handlers of many goroutines write.
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

// Not parallel: it swaps slog's default logger, which workers created
// meanwhile would pick up.
func TestWorkflowLogsReachSlogDefault(t *testing.T) {
	ctx := t.Context()
	b := setup(ctx, t)
	var out syncBuffer
	previous := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() { slog.SetDefault(previous) })

	startWith(ctx, t, b, func(w *worker.Worker) {
		worker.AddWorkflow(w, &ChattyWorkflow{})
		worker.AddActivity(w, b.charge)
	})
	// Without eager dispatch the outcome reaches a new task, which replays
	// the first line: it must still be logged once.
	run, err := b.client.Start(ctx, ChattyArgs{Marker: "m-1"}, nil)
	require.NoError(t, err)
	cents, err := getWithin[int64](ctx, t, run)
	require.NoError(t, err)
	require.Equal(t, int64(3), cents)

	logged := out.String()
	require.Equal(t, 1, strings.Count(logged, `msg="chatty before" workflow_kind=chatty workflow_id=`+run.WorkflowID+` run_id=`+run.RunID.String()+` marker=m-1`), logged)
	require.Equal(t, 1, strings.Count(logged, `msg="chatty after" workflow_kind=chatty workflow_id=`+run.WorkflowID+` run_id=`+run.RunID.String()+` marker=m-1`), logged)
}

// A workflow task that an activity's outcome runs at once (a continuation)
// is its task's first attempt, whatever attempt of the activity it follows.
func TestContinuationTaskAttemptIsItsOwn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	b.charge.failures.Store(2)
	startWorker(ctx, t, b, nil)

	run, err := b.client.Start(ctx, retryingArgs(), nil)
	require.NoError(t, err)
	_, err = getWithin[Receipt](ctx, t, run)
	require.NoError(t, err)
	require.Equal(t, int64(3), b.charge.calls.Load())

	page, err := b.client.History(ctx, run.WorkflowID, run.RunID, nil)
	require.NoError(t, err)
	tasks := 0
	for _, e := range page.Events {
		if e.Type != client.EventWorkflowTaskStarted {
			continue
		}
		tasks++
		attrs, err := client.DecodeAttributes[struct {
			Attempt int `json:"attempt"`
		}](e)
		require.NoError(t, err)
		require.Equal(t, 1, attrs.Attempt, "event %d: no workflow task failed", e.ID)
	}
	require.GreaterOrEqual(t, tasks, 2)
}

type GhostArgs struct{}

func (GhostArgs) Kind() string { return "ghost" }

type PanickyArgs struct{}

func (PanickyArgs) Kind() string { return "panicky" }

// PanickyWorkflow's code panics every time it runs: its task retries for
// ever, with nothing in the run's history.
type PanickyWorkflow struct {
	workflow.Defaults[PanickyArgs, int]
}

func (w *PanickyWorkflow) Run(workflow.Context, PanickyArgs) (int, error) {
	panic("the ledger is upside down")
}

func TestWorkersAnnounceThemselves(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	w, err := worker.New(b.pool, &worker.Config{Schema: b.schema, Identity: "test-worker", AnnounceInterval: time.Hour})
	require.NoError(t, err)
	worker.AddWorkflow(w, &SequentialWorkflow{})
	worker.AddActivity(w, b.charge)
	require.NoError(t, w.Start(ctx))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			require.NoError(t, w.Stop(context.WithoutCancel(ctx)))
		}
	})

	workers, err := b.client.ListWorkers(ctx)
	require.NoError(t, err)
	require.Len(t, workers, 1)
	require.Equal(t, "test-worker", workers[0].Identity)
	require.Equal(t, client.NamespaceDefault, workers[0].Namespace)
	require.Equal(t, []string{"weir"}, workers[0].Queues)
	require.Equal(t, []string{"order"}, workers[0].WorkflowKinds)
	require.Equal(t, []string{"charge"}, workers[0].ActivityKinds)
	require.True(t, workers[0].ExpiresAt.After(workers[0].LastSeenAt))

	describe := func(run *client.Run) *client.TaskWorkers {
		t.Helper()
		d, err := b.client.Describe(ctx, run.WorkflowID, run.RunID)
		require.NoError(t, err)
		return d.TaskWorkers
	}

	// The served run stays open while it is described: a closed run has
	// no task workers to describe, and its charge keeps failing.
	b.charge.failures.Store(1 << 30)
	served, err := b.client.Start(ctx, OrderArgs{ID: "served", Cents: []int64{1}}, nil)
	require.NoError(t, err)
	tw := describe(served)
	require.Equal(t, 1, tw.Serving)
	require.Empty(t, tw.Problem())

	elsewhere, err := b.client.Start(ctx, OrderArgs{ID: "elsewhere"}, &client.StartOpts{Queue: "nobody-polls-this"})
	require.NoError(t, err)
	tw = describe(elsewhere)
	require.Equal(t, &client.TaskWorkers{Kind: "order", Namespace: "default", Queue: "nobody-polls-this"}, tw)
	require.Equal(t, `No live worker serves queue "nobody-polls-this": the run waits until a worker that registers workflow order polls it.`, tw.Problem())

	ghost, err := b.client.Start(ctx, GhostArgs{}, nil)
	require.NoError(t, err)
	tw = describe(ghost)
	require.Equal(t, &client.TaskWorkers{Kind: "ghost", Namespace: "default", Queue: "weir", OnQueue: 1}, tw)
	require.Equal(t, `1 live worker serves queue "weir", but none registers workflow ghost: the run waits until one does.`, tw.Problem())

	// A stopped worker withdraws its announcement.
	stopped = true
	require.NoError(t, w.Stop(ctx))
	workers, err = b.client.ListWorkers(ctx)
	require.NoError(t, err)
	require.Empty(t, workers)
	require.Equal(t, 0, describe(ghost).OnQueue)

	// A worker that dies stops counting once its announcement expires. Its
	// interval is long so that no renewal lands between the expiry written
	// here and the describe that reads it.
	w2, err := worker.New(b.pool, &worker.Config{Schema: b.schema, AnnounceInterval: time.Hour})
	require.NoError(t, err)
	worker.AddWorkflow(w2, &GhostWorkflowStub{})
	require.NoError(t, w2.Start(ctx))
	require.Equal(t, 1, describe(ghost).Serving)
	_, err = b.pool.Exec(ctx, "UPDATE "+b.names.Worker+" SET expires_at = now() - interval '1 second'")
	require.NoError(t, err)
	require.Equal(t, 0, describe(ghost).Serving, "an expired announcement is not live")
	require.NoError(t, w2.Stop(ctx))
}

// GhostWorkflowStub serves the ghost kind and never closes, so that the run
// stays running (and described with its task workers) once it is served.
type GhostWorkflowStub struct {
	workflow.Defaults[GhostArgs, int]
}

func (*GhostWorkflowStub) Run(ctx workflow.Context, _ GhostArgs) (int, error) {
	return 0, workflow.Await(ctx, func() bool { return false })
}

func TestTaskFailureInDescribe(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	startWith(ctx, t, b, func(w *worker.Worker) { worker.AddWorkflow(w, &PanickyWorkflow{}) })

	run, err := b.client.Start(ctx, PanickyArgs{}, nil)
	require.NoError(t, err)
	// Every attempt panics: the task waits for its next attempt, or runs it
	// (no next attempt is scheduled then), and fails again.
	var d *client.Description
	require.Eventually(t, func() bool {
		d, err = b.client.Describe(ctx, run.WorkflowID, run.RunID)
		require.NoError(t, err)
		return d.TaskFailure != nil && d.TaskFailure.NextAttemptAt != nil
	}, 30*time.Second, 20*time.Millisecond, "a failed task waiting to retry says when")
	f := d.TaskFailure
	require.Equal(t, *d.TaskJobID, f.JobID)
	require.GreaterOrEqual(t, f.Attempt, 1)
	require.Contains(t, f.Message, "the ledger is upside down")
	require.NotContains(t, f.Message, "\n")
	require.Contains(t, f.Stack, "PanickyWorkflow")
	require.Zero(t, d.HistoryLength, "task failures stay out of history")
}

type WrapArgs struct{}

func (WrapArgs) Kind() string { return "wrap" }

// WrapWorkflow wraps its activity's error, as Go code does.
type WrapWorkflow struct {
	workflow.Defaults[WrapArgs, int]
}

func (w *WrapWorkflow) Run(ctx workflow.Context, _ WrapArgs) (int, error) {
	_, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: "w", Cents: -1}, nil).Get(ctx)
	return 0, fmt.Errorf("charging order w: %w", err)
}

func TestErrorsReadAsSentences(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	startWith(ctx, t, b, func(w *worker.Worker) {
		worker.AddWorkflow(w, &WrapWorkflow{})
		worker.AddActivity(w, b.charge)
	})

	run, err := b.client.Start(ctx, WrapArgs{}, &client.StartOpts{WorkflowID: "wrap-1"})
	require.NoError(t, err)
	_, err = getWithin[int](ctx, t, run)
	require.EqualError(t, err, "weir: workflow wrap-1 run "+run.RunID.String()+
		" failed: charging order w: activity charge (event 3, attempt 1) failed: InvalidAmount: negative amount")

	_, err = b.client.Describe(ctx, "no-such-workflow", uuid.Nil)
	require.ErrorIs(t, err, client.ErrRunNotFound)
	require.EqualError(t, err, "weir: no workflow no-such-workflow")
}

// A terminated run's queued workflow task is cancelled, not left available.
func TestTerminateCancelsTheQueuedTask(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	startWorker(ctx, t, b, nil)

	run, err := b.client.Start(ctx, OrderArgs{ID: "t"}, &client.StartOpts{Queue: "nobody-polls-this"})
	require.NoError(t, err)
	d, err := b.client.Describe(ctx, run.WorkflowID, run.RunID)
	require.NoError(t, err)
	require.NotNil(t, d.TaskJobID)

	require.NoError(t, b.client.Terminate(ctx, run.WorkflowID, run.RunID, "enough"))
	var state string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT state::text FROM "+b.names.RiverJob+" WHERE id = $1", *d.TaskJobID).Scan(&state))
	require.Equal(t, "cancelled", state)
}

type LatePanicArgs struct{}

func (LatePanicArgs) Kind() string { return "late_panic" }

// LatePanicWorkflow panics once its activity's outcome arrives: in the
// continuation of the activity's attempt, when eager.
type LatePanicWorkflow struct {
	workflow.Defaults[LatePanicArgs, int]
}

func (w *LatePanicWorkflow) Run(ctx workflow.Context, _ LatePanicArgs) (int, error) {
	if _, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: "late", Cents: 1}, nil).Get(ctx); err != nil {
		return 0, err
	}
	panic("the charge came back odd")
}

// A task that fails where an activity's outcome continues the run is as
// visible as one that fails in a task job.
func TestTaskFailureAfterAnActivityInDescribe(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	startWith(ctx, t, b, func(w *worker.Worker) {
		worker.AddWorkflow(w, &LatePanicWorkflow{})
		worker.AddActivity(w, b.charge)
	})

	run, err := b.client.Start(ctx, LatePanicArgs{}, nil)
	require.NoError(t, err)
	var d *client.Description
	require.Eventually(t, func() bool {
		d, err = b.client.Describe(ctx, run.WorkflowID, run.RunID)
		require.NoError(t, err)
		return d.TaskFailure != nil
	}, 30*time.Second, 20*time.Millisecond)
	require.Contains(t, d.TaskFailure.Message, "the charge came back odd")
	require.Contains(t, d.TaskFailure.Stack, "LatePanicWorkflow")
	require.Eventually(t, func() bool {
		d, err = b.client.Describe(ctx, run.WorkflowID, run.RunID)
		require.NoError(t, err)
		return d.TaskFailure != nil && d.TaskFailure.Attempt >= 2
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, int64(1), b.charge.calls.Load(), "the workflow's failure never runs the activity again")
}

type TwoTimersArgs struct{}

func (TwoTimersArgs) Kind() string { return "two_timers" }

// TwoTimersWorkflow starts two timers, cancels the first and waits on the
// second.
type TwoTimersWorkflow struct {
	workflow.Defaults[TwoTimersArgs, int]
}

func (w *TwoTimersWorkflow) Run(ctx workflow.Context, _ TwoTimersArgs) (int, error) {
	first, cancel := workflow.WithCancel(ctx)
	workflow.NewTimer(first, time.Hour)
	second := workflow.NewTimer(ctx, 2*time.Hour)
	cancel()
	if _, err := second.Get(ctx); err != nil {
		return 0, err
	}
	return 2, nil
}

func TestDescribeShowsPendingTimers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	startWith(ctx, t, b, func(w *worker.Worker) { worker.AddWorkflow(w, &TwoTimersWorkflow{}) })

	run, err := b.client.Start(ctx, TwoTimersArgs{}, nil)
	require.NoError(t, err)
	var d *client.Description
	require.Eventually(t, func() bool {
		d, err = b.client.Describe(ctx, run.WorkflowID, run.RunID)
		require.NoError(t, err)
		return d.HistoryLength >= 5
	}, 30*time.Second, 20*time.Millisecond)
	require.Len(t, d.PendingTimers, 1, "the cancelled timer is not pending")
	timer := d.PendingTimers[0]
	require.WithinDuration(t, d.CreatedAt.Add(2*time.Hour), timer.FireAt, time.Minute)
	page, err := b.client.History(ctx, run.WorkflowID, run.RunID, nil)
	require.NoError(t, err)
	require.Equal(t, client.EventType("TimerStarted"), page.Events[timer.StartedEventID-1].Type)
}
