package worker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
)

// recordingInterceptor implements both worker.Interceptor and
// client.Interceptor.
type recordingInterceptor struct {
	mu         sync.Mutex
	name       string
	log        *sharedLog
	tasks      []*worker.TaskInfo
	activities []*activity.Info
	starts     []*client.StartInfo
	headers    map[string]string // set on starts, if not nil
}

func (r *recordingInterceptor) InterceptTask(ctx context.Context, info *worker.TaskInfo, next func(context.Context) error) error {
	r.mu.Lock()
	r.tasks = append(r.tasks, info)
	r.mu.Unlock()
	r.log.add(r.name + " task in")
	err := next(ctx)
	r.log.add(r.name + " task out")
	return err
}

// sharedLog is the one log that chained interceptors write in order.
type sharedLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *sharedLog) add(entry string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, entry)
}

// count is how many times entry is in entries.
func count(entries []string, entry string) int {
	n := 0
	for _, e := range entries {
		if e == entry {
			n++
		}
	}
	return n
}

func (l *sharedLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

func (r *recordingInterceptor) InterceptActivity(ctx context.Context, info *activity.Info, next func(context.Context) error) error {
	r.mu.Lock()
	r.activities = append(r.activities, info)
	r.mu.Unlock()
	return next(ctx)
}

func (r *recordingInterceptor) InterceptStart(ctx context.Context, info *client.StartInfo, next func(context.Context) (*client.Run, error)) (*client.Run, error) {
	r.mu.Lock()
	r.starts = append(r.starts, info)
	r.mu.Unlock()
	if r.headers != nil {
		info.Headers = r.headers
	}
	return next(ctx)
}

func (r *recordingInterceptor) InterceptSignal(ctx context.Context, info *client.SignalInfo, next func(context.Context) error) error {
	return next(ctx)
}

func TestInterceptors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)

	log := &sharedLog{}
	headers := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	outer := &recordingInterceptor{name: "outer", log: log, headers: headers}
	inner := &recordingInterceptor{name: "inner", log: log}
	startWorker(ctx, t, b, &worker.Config{Interceptors: []worker.Interceptor{outer, inner}})
	c, err := client.New(b.pool, &client.Config{Interceptors: []client.Interceptor{outer}, Schema: b.schema})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	run, err := c.Start(ctx, OrderArgs{ID: "i", Cents: []int64{1, 2}}, &client.StartOpts{WorkflowID: "intercepted"})
	require.NoError(t, err)
	_, err = getWithin[Receipt](ctx, t, run)
	require.NoError(t, err)

	// The closing task's interceptors may still be returning when the
	// client sees the result.
	requireEventually(t, func() bool {
		entries := log.snapshot()
		return count(entries, "outer task in") >= 3 && count(entries, "outer task out") == count(entries, "outer task in")
	})
	outer.mu.Lock()
	defer outer.mu.Unlock()
	require.Len(t, outer.starts, 1)
	require.Equal(t, "intercepted", outer.starts[0].WorkflowID)
	require.Equal(t, "order", outer.starts[0].Kind)

	for _, task := range outer.tasks {
		t.Logf("task job %d attempt %d", task.JobID, task.Attempt)
	}
	require.Len(t, outer.tasks, 3, "one task to start, one per activity outcome")
	for _, task := range outer.tasks {
		require.Equal(t, run.RunID, task.RunID)
		require.Equal(t, "intercepted", task.WorkflowID)
		require.Equal(t, "order", task.Kind)
		require.Positive(t, task.JobID)
		require.Equal(t, headers, task.Headers, "tasks see the headers stored at start")
	}
	require.Len(t, outer.activities, 2)
	for _, a := range outer.activities {
		require.Equal(t, run.RunID, a.RunID)
		require.Equal(t, "charge", a.ActivityKind)
		require.Equal(t, "order", a.WorkflowKind)
		require.Positive(t, a.MaxAttempts)
		require.Equal(t, int64(1), a.Generation)
		require.Positive(t, a.ScheduledEventID)
		require.Equal(t, headers, a.Headers, "activities see the headers stored at start")
	}
	require.Equal(t, []string{"outer task in", "inner task in", "inner task out", "outer task out"}, log.snapshot()[:4], "the first interceptor is outermost")
}

func TestInterceptorsWithoutHeaders(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)

	rec := &recordingInterceptor{name: "rec", log: &sharedLog{}}
	startWorker(ctx, t, b, &worker.Config{Interceptors: []worker.Interceptor{rec}})

	run, err := b.client.Start(ctx, OrderArgs{ID: "n", Cents: []int64{1}}, nil)
	require.NoError(t, err)
	_, err = getWithin[Receipt](ctx, t, run)
	require.NoError(t, err)

	var stored string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT trace_context::text FROM "+b.names.Run+" WHERE run_id = $1", run.RunID).Scan(&stored))
	require.JSONEq(t, "{}", stored)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, rec.tasks)
	require.NotEmpty(t, rec.activities)
	for _, task := range rec.tasks {
		require.Nil(t, task.Headers)
	}
	for _, a := range rec.activities {
		require.Nil(t, a.Headers)
	}
}

// deadlineInterceptor records how long each task's context had left when
// the task began.
type deadlineInterceptor struct {
	mu   sync.Mutex
	left []time.Duration // -1: no deadline
}

func (d *deadlineInterceptor) InterceptTask(ctx context.Context, _ *worker.TaskInfo, next func(context.Context) error) error {
	left := time.Duration(-1)
	if deadline, ok := ctx.Deadline(); ok {
		left = time.Until(deadline)
	}
	d.mu.Lock()
	d.left = append(d.left, left)
	d.mu.Unlock()
	return next(ctx)
}

func (d *deadlineInterceptor) InterceptActivity(ctx context.Context, _ *activity.Info, next func(context.Context) error) error {
	return next(ctx)
}

// A task is bounded by TaskTimeout although River's executor gives it no
// deadline (the task worker's Timeout is none, so that River watches no
// task for being stuck).
func TestTaskContextHasTaskTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)

	const timeout = 40 * time.Second
	rec := &deadlineInterceptor{}
	startWorker(ctx, t, b, &worker.Config{Interceptors: []worker.Interceptor{rec}, TaskTimeout: timeout})
	run, err := b.client.Start(ctx, OrderArgs{ID: "d", Cents: []int64{1}}, nil)
	require.NoError(t, err)
	_, err = getWithin[Receipt](ctx, t, run)
	require.NoError(t, err)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, rec.left)
	for _, left := range rec.left {
		require.Greater(t, left, timeout-10*time.Second, "a task's context ends TaskTimeout after it began")
		require.LessOrEqual(t, left, timeout)
	}
}
