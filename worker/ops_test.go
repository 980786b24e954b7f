package worker_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

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
