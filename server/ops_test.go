package server_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/server"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type opsNapArgs struct{}

func (opsNapArgs) Kind() string { return "ops_nap" }

// opsNapWorkflow sleeps for a day.
type opsNapWorkflow struct {
	workflow.Defaults[opsNapArgs, int]
}

func (*opsNapWorkflow) Run(ctx workflow.Context, _ opsNapArgs) (int, error) {
	return 0, workflow.Sleep(ctx, 24*time.Hour)
}

type opsParentArgs struct{}

func (opsParentArgs) Kind() string { return "ops_parent" }

// opsParentWorkflow starts a sleeping child, ops-child, and waits for it.
type opsParentWorkflow struct {
	workflow.Defaults[opsParentArgs, int]
}

func (*opsParentWorkflow) Run(ctx workflow.Context, _ opsParentArgs) (int, error) {
	return workflow.ExecuteChildWorkflow[int](ctx, opsNapArgs{}, &workflow.ChildWorkflowOpts{WorkflowID: "ops-child"}).Get(ctx)
}

type opsPanicArgs struct{}

func (opsPanicArgs) Kind() string { return "ops_panic" }

// opsPanicWorkflow's code panics every time: its task retries for ever.
type opsPanicWorkflow struct {
	workflow.Defaults[opsPanicArgs, int]
}

func (*opsPanicWorkflow) Run(workflow.Context, opsPanicArgs) (int, error) {
	panic("inventory went negative")
}

// startOn starts a run of kind on queue through the API.
func (b *uiBundle) startOn(t *testing.T, kind, workflowID, queue string) {
	t.Helper()
	status := b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/workflows", writerSecret,
		&server.StartRequest{Kind: kind, Queue: queue, WorkflowID: workflowID}, nil)
	require.Equal(t, http.StatusCreated, status)
}

func (b *uiBundle) describe(t *testing.T, workflowID string) *server.DescribeResponse {
	t.Helper()
	var d server.DescribeResponse
	require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodGet, "/api/v1/namespaces/default/workflows/"+workflowID, readerSecret, nil, &d))
	return &d
}

// startOpsWorker starts a second worker, on a queue of its own
// (ops-panics), for the panicking, the sleeping and the parent workflow.
func (b *uiBundle) startOpsWorker(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	w, err := worker.New(dbtest.Pool(ctx, t), &worker.Config{Schema: b.schema, Queues: map[string]river.QueueConfig{"ops-panics": {MaxWorkers: 2}}})
	require.NoError(t, err)
	worker.AddWorkflow(w, &opsPanicWorkflow{})
	worker.AddWorkflow(w, &opsNapWorkflow{})
	worker.AddWorkflow(w, &opsParentWorkflow{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) })
}

func TestOperatorsSeeWhatIsWrong(t *testing.T) {
	t.Parallel()
	b := setupUI(t, nil)
	br := b.browser(t)
	br.login(readerSecret)
	b.startOpsWorker(t)

	t.Run("Workers", func(t *testing.T) {
		var list server.WorkerListResponse
		require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodGet, "/api/v1/namespaces/default/workers", readerSecret, nil, &list))
		require.Len(t, list.Workers, 2)
		byQueue := map[string]*server.WorkerJSON{}
		for _, w := range list.Workers {
			byQueue[w.Queues[0]] = w
		}
		require.Contains(t, byQueue["weir"].WorkflowKinds, "ui_order")
		require.Contains(t, byQueue["weir"].ActivityKinds, "reserve_stock")
		require.Equal(t, []string{"ops_nap", "ops_panic", "ops_parent"}, byQueue["ops-panics"].WorkflowKinds)

		resp, page := br.get("/ui/namespaces/default/workers")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `id="workers"`)
		require.Contains(t, page, "<code>ui_order</code>")
		require.Contains(t, page, "<code>"+list.Workers[0].Identity+"</code>")
		require.Contains(t, page, "<code>ops-panics</code>")

		admin := b.browser(t)
		admin.login(adminSecret)
		_, page = admin.get("/ui/namespaces/billing/workers")
		require.Contains(t, page, "No live worker serves this namespace")
	})

	t.Run("NoWorkerOnQueue", func(t *testing.T) {
		b.startOn(t, "echo", "ops-elsewhere", "nobody-polls")
		d := b.describe(t, "ops-elsewhere")
		require.NotNil(t, d.TaskWorkers)
		require.Zero(t, d.TaskWorkers.OnQueue)
		require.Contains(t, d.TaskWorkers.Problem, `No live worker serves queue "nobody-polls"`)

		_, page := br.get("/ui/namespaces/default/workflows/ops-elsewhere")
		require.Contains(t, page, `id="no-workers"`)
		require.Contains(t, page, "No live worker serves queue &#34;nobody-polls&#34;")
	})

	t.Run("UnknownKind", func(t *testing.T) {
		b.startOn(t, "nobody_registers_this", "ops-unknown-kind", "")
		d := b.describe(t, "ops-unknown-kind")
		require.Equal(t, 1, d.TaskWorkers.OnQueue)
		require.Zero(t, d.TaskWorkers.Serving)
		require.Contains(t, d.TaskWorkers.Problem, "none registers workflow nobody_registers_this")

		_, page := br.get("/ui/namespaces/default/workflows/ops-unknown-kind")
		require.Contains(t, page, `id="no-workers"`)
	})

	t.Run("ServedRunHasNoBanner", func(t *testing.T) {
		b.start(t, "wait_for_go", "ops-served", nil)
		d := b.describe(t, "ops-served")
		require.Equal(t, 1, d.TaskWorkers.Serving)
		require.Empty(t, d.TaskWorkers.Problem)
		_, page := br.get("/ui/namespaces/default/workflows/ops-served")
		require.NotContains(t, page, `id="no-workers"`)
		require.NotContains(t, page, `id="task-failure"`)
	})

	t.Run("TaskFailure", func(t *testing.T) {
		b.startOn(t, "ops_panic", "ops-panics", "ops-panics")
		var d *server.DescribeResponse
		require.Eventually(t, func() bool {
			d = b.describe(t, "ops-panics")
			return d.TaskFailure != nil
		}, 30*time.Second, 20*time.Millisecond)
		require.Contains(t, d.TaskFailure.Message, "inventory went negative")
		require.Contains(t, d.TaskFailure.Stack, "opsPanicWorkflow")
		require.Zero(t, d.HistoryLength)

		_, page := br.get("/ui/namespaces/default/workflows/ops-panics")
		require.Contains(t, page, `id="task-failure"`)
		require.Contains(t, page, "inventory went negative")
		require.Contains(t, page, "opsPanicWorkflow")
	})

	t.Run("PendingTimers", func(t *testing.T) {
		b.startOn(t, "ops_nap", "ops-nap", "ops-panics")
		var d *server.DescribeResponse
		require.Eventually(t, func() bool {
			d = b.describe(t, "ops-nap")
			return len(d.PendingTimers) == 1
		}, 30*time.Second, 20*time.Millisecond)
		require.WithinDuration(t, d.CreatedAt.Add(24*time.Hour), d.PendingTimers[0].FireAt, time.Minute)

		_, page := br.get("/ui/namespaces/default/workflows/ops-nap")
		require.Contains(t, page, `id="pending-timers"`)
		require.Contains(t, page, d.PendingTimers[0].FireAt.UTC().Format("2006-01-02 15:04:05"))
		require.Regexp(t, `<td>in (23h|1d)`, page)
	})

	t.Run("ParentLink", func(t *testing.T) {
		b.startOn(t, "ops_parent", "ops-parent", "ops-panics")
		var child *server.DescribeResponse
		require.Eventually(t, func() bool {
			var d server.DescribeResponse
			if b.apiCall(t, http.MethodGet, "/api/v1/namespaces/default/workflows/ops-child", readerSecret, nil, &d) != http.StatusOK {
				return false
			}
			child = &d
			return true
		}, 30*time.Second, 20*time.Millisecond)
		parent := b.describe(t, "ops-parent")
		require.Equal(t, &server.RunRefJSON{RunID: parent.RunID, WorkflowID: "ops-parent"}, child.Parent)
		require.Nil(t, parent.Parent)

		_, page := br.get("/ui/namespaces/default/workflows/ops-child")
		require.Contains(t, page, `<dd id="parent"><a href="/ui/namespaces/default/workflows/ops-parent?run_id=`+parent.RunID.String()+`">ops-parent</a>`)
		_, page = br.get("/ui/namespaces/default/workflows/ops-parent")
		require.Contains(t, page, `<dd id="children"><a href="/ui/namespaces/default/workflows/ops-child">ops-child</a>`)
	})

	t.Run("Schedules", func(t *testing.T) {
		_, page := br.get("/ui/namespaces/default/schedules")
		require.Contains(t, page, "No schedules in this namespace.")

		require.Equal(t, http.StatusCreated, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/schedules", adminSecret,
			&server.ScheduleRequest{ScheduleID: "ops-hourly", Kind: "echo", Every: "1h", Paused: true}, nil))
		resp, page := br.get("/ui/namespaces/default/schedules")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, `id="schedules"`)
		require.Contains(t, page, "ops-hourly")
		require.Contains(t, page, "every 1h0m0s")
		require.Contains(t, page, ">paused<")
		require.Contains(t, page, `href="/ui/namespaces/default/schedules">Schedules</a>`)
	})

	t.Run("DescribeShowsArgsAndResult", func(t *testing.T) {
		b.start(t, "echo", "ops-echo", map[string]string{"msg": "hi"})
		b.await(t, "ops-echo")
		d := b.describe(t, "ops-echo")
		require.JSONEq(t, `{"msg":"hi"}`, string(d.Args))
		require.JSONEq(t, string(d.Args), string(d.Result))
		require.Nil(t, d.TaskWorkers, "a closed run needs no worker")
	})
}

// syncBuffer is a bytes.Buffer that a server's handlers write.
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

// A caller that gives up a long poll is no error of the server's.
func TestCancelledLongPollLogsNoError(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	b := setupUI(t, &server.Config{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Tokens: []*server.Token{
			{Name: "admin", Namespaces: []string{server.NamespaceAll}, Role: server.RoleAdmin, Secret: adminSecret},
			{Name: "writer", Namespaces: []string{"default"}, Role: server.RoleWrite, Secret: writerSecret},
		},
	})
	b.start(t, "wait_for_go", "ops-long-poll", nil)

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+"/api/v1/namespaces/default/workflows/ops-long-poll/result?wait=30s", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminSecret)
	_, err = http.DefaultClient.Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "cancelled by its caller") }, 10*time.Second, 10*time.Millisecond)
	require.NotContains(t, logs.String(), "level=ERROR")
}
