package otel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	weirotel "github.com/weirhq/weir/otel"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// --- a workflow whose first activity fails once and whose second is held ---

type FlakyArgs struct{}

func (FlakyArgs) Kind() string { return "flaky" }

// FlakyActivity fails its first attempt.
type FlakyActivity struct {
	activity.Defaults[FlakyArgs, string]
}

func (a *FlakyActivity) Execute(ctx context.Context, _ FlakyArgs) (string, error) {
	info, _ := activity.GetInfo(ctx)
	if info.Attempt == 1 {
		return "", errors.New("bank unavailable")
	}
	return "charged", nil
}

type HeldArgs struct {
	Key string `json:"key"`
}

func (HeldArgs) Kind() string { return "held" }

// gate holds an activity's first attempt until the test releases it.
type gate struct {
	entered chan int64 // the held attempt's job ID
	release chan struct{}
}

// gates are per test, by key (activities are shared by type).
var gates sync.Map

// HeldActivity holds its first attempt, ignoring its context, as a stuck
// worker would; later attempts return at once.
type HeldActivity struct {
	activity.Defaults[HeldArgs, string]
}

func (a *HeldActivity) Execute(ctx context.Context, args HeldArgs) (string, error) {
	info, _ := activity.GetInfo(ctx)
	if info.Attempt == 1 {
		g, _ := gates.Load(args.Key)
		g.(*gate).entered <- info.JobID
		<-g.(*gate).release
	}
	return fmt.Sprintf("attempt %d", info.Attempt), nil
}

type ObedientArgs struct {
	Key string `json:"key"`
}

func (ObedientArgs) Kind() string { return "obedient" }

// ObedientActivity waits in its first attempt until its context ends and
// returns the context's error, as well-behaved code does when its lease is
// lost; later attempts return at once.
type ObedientActivity struct {
	activity.Defaults[ObedientArgs, string]
}

func (a *ObedientActivity) Execute(ctx context.Context, args ObedientArgs) (string, error) {
	info, _ := activity.GetInfo(ctx)
	if info.Attempt == 1 {
		g, _ := gates.Load(args.Key)
		g.(*gate).entered <- info.JobID
		<-ctx.Done()
		return "", ctx.Err()
	}
	return fmt.Sprintf("attempt %d", info.Attempt), nil
}

type ObedientWorkflow struct {
	workflow.Defaults[ObedientArgs, string]
}

func (*ObedientWorkflow) Run(ctx workflow.Context, args ObedientArgs) (string, error) {
	return workflow.ExecuteActivity[string](ctx, args, &workflow.ActivityOpts{
		RetryPolicy: &workflow.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaximumAttempts: 5},
	}).Get(ctx)
}

type TracedArgs struct {
	Key string `json:"key"`
}

func (TracedArgs) Kind() string { return "traced" }

type ParentArgs struct{}

func (ParentArgs) Kind() string { return "otel_parent" }

type ChildArgs struct {
	N int `json:"n"`
}

func (ChildArgs) Kind() string { return "otel_child" }

// ParentWorkflow runs a child workflow and doubles its result.
type ParentWorkflow struct {
	workflow.Defaults[ParentArgs, int]
}

func (*ParentWorkflow) Run(ctx workflow.Context, _ ParentArgs) (int, error) {
	n, err := workflow.ExecuteChildWorkflow[int](ctx, ChildArgs{N: 21}, nil).Get(ctx)
	return 2 * n, err
}

type ChildWorkflow struct {
	workflow.Defaults[ChildArgs, int]
}

func (*ChildWorkflow) Run(_ workflow.Context, args ChildArgs) (int, error) { return args.N, nil }

type WaitArgs struct{}

func (WaitArgs) Kind() string { return "otel_wait" }

type GoSignal struct {
	Value string `json:"value"`
}

func (GoSignal) Kind() string { return "otel_go" }

// WaitWorkflow returns the value of the signal it waits for.
type WaitWorkflow struct {
	workflow.Defaults[WaitArgs, string]
}

func (*WaitWorkflow) Run(ctx workflow.Context, _ WaitArgs) (string, error) {
	sig, err := workflow.GetSignalChannel[GoSignal](ctx).Receive(ctx)
	return sig.Value, err
}

type TracedWorkflow struct {
	workflow.Defaults[TracedArgs, string]
}

func (w *TracedWorkflow) Run(ctx workflow.Context, args TracedArgs) (string, error) {
	retry := &workflow.ActivityOpts{RetryPolicy: &workflow.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaximumAttempts: 5}}
	charged, err := workflow.ExecuteActivity[string](ctx, FlakyArgs{}, retry).Get(ctx)
	if err != nil {
		return "", err
	}
	held, err := workflow.ExecuteActivity[string](ctx, HeldArgs(args), retry).Get(ctx)
	if err != nil {
		return "", err
	}
	return charged + ", " + held, nil
}

// --- harness ---

// endSignal is a span processor that tells waiters whenever a span ends.
type endSignal struct {
	sdktrace.SpanProcessor
	ended chan struct{}
}

func (e *endSignal) OnEnd(sdktrace.ReadOnlySpan) {
	select {
	case e.ended <- struct{}{}:
	default:
	}
}

// staleSignal is a fencing observer that tells the test of rejected stale
// writes (after the otel observer has seen them: it is chained after it).
type staleSignal struct {
	next     fencing.Observer
	rejected chan struct{}
}

func (s *staleSignal) FencingEvent(ctx context.Context, event *fencing.Event) {
	s.next.FencingEvent(ctx, event)
	if event.Kind == fencing.EventStaleWriteRejected {
		select {
		case s.rejected <- struct{}{}:
		default:
		}
	}
}

type testBundle struct {
	client   *client.Client
	ended    *endSignal
	names    *dbschema.Names
	pool     *pgxpool.Pool
	reader   *sdkmetric.ManualReader
	recorder *tracetest.SpanRecorder
	rejected chan struct{}
}

func setup(ctx context.Context, t *testing.T, tpOpts ...sdktrace.TracerProviderOption) *testBundle {
	t.Helper()
	return setupFencing(ctx, t, fencing.Config{}, tpOpts...)
}

// setupFencing is setup with the worker's fencing configured (its
// observer is the test's).
func setupFencing(ctx context.Context, t *testing.T, fencingConfig fencing.Config, tpOpts ...sdktrace.TracerProviderOption) *testBundle {
	t.Helper()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)

	recorder := tracetest.NewSpanRecorder()
	ended := &endSignal{SpanProcessor: recorder, ended: make(chan struct{}, 1)}
	tp := sdktrace.NewTracerProvider(append(tpOpts, sdktrace.WithSpanProcessor(recorder), sdktrace.WithSpanProcessor(ended))...)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.WithoutCancel(ctx))
		_ = mp.Shutdown(context.WithoutCancel(ctx))
	})

	clientConfig := &client.Config{PollInterval: 200 * time.Millisecond, Schema: schema}
	require.NoError(t, weirotel.InstallClient(clientConfig, tp, mp))
	c, err := client.New(pool, clientConfig)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	// The held activity ignores its context on purpose: no deadlock check.
	workerConfig := &worker.Config{DeadlockTimeout: -1, Fencing: &fencingConfig, Schema: schema, SweepInterval: 50 * time.Millisecond}
	require.NoError(t, weirotel.InstallWorker(workerConfig, tp, mp))
	rejected := make(chan struct{}, 1)
	workerConfig.Fencing.Observer = &staleSignal{next: workerConfig.Fencing.Observer, rejected: rejected}
	w, err := worker.New(pool, workerConfig)
	require.NoError(t, err)
	worker.AddWorkflow(w, &TracedWorkflow{})
	worker.AddWorkflow(w, &ParentWorkflow{})
	worker.AddWorkflow(w, &ChildWorkflow{})
	worker.AddWorkflow(w, &WaitWorkflow{})
	worker.AddActivity(w, &FlakyActivity{})
	worker.AddActivity(w, &HeldActivity{})
	worker.AddWorkflow(w, &ObedientWorkflow{})
	worker.AddActivity(w, &ObedientActivity{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = w.Stop(stopCtx)
	})

	return &testBundle{
		client: c, ended: ended, names: dbschema.New(schema), pool: pool, reader: reader, recorder: recorder, rejected: rejected,
	}
}

// recoverJob does what the fencing reaper does to a job whose lease expired,
// with the reaper's error text: back to available; the attempt's token is
// revoked.
func recoverJob(ctx context.Context, t *testing.T, b *testBundle, jobID int64) {
	t.Helper()
	tag, err := b.pool.Exec(ctx, "UPDATE "+b.names.RiverJob+" SET state = 'available', scheduled_at = now(),"+
		" errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt, 'error',"+
		" format('fencing: lease of attempt %s expired at %s without renewal; the job was recovered', attempt, lease_expires_at), 'trace', ''))"+
		", lease_expires_at = NULL WHERE id = $1 AND state = 'running'", jobID)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())
}

// awaitSpans waits until cond holds for the ended spans, or a minute passes.
func awaitSpans(t *testing.T, b *testBundle, cond func([]sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		spans := b.recorder.Ended()
		if cond(spans) {
			return spans
		}
		select {
		case <-b.ended.ended:
		case <-timeout:
			for _, s := range spans {
				t.Logf("span %s %s attrs %v", s.Name(), s.SpanContext().SpanID(), s.Attributes())
			}
			t.Fatal("the expected spans never ended")
		}
	}
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return out
}

func attempt(t *testing.T, spans []sdktrace.ReadOnlySpan, name string, n int) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range named(spans, name) {
		if attr(s, weirotel.AttrAttempt).AsInt64() == int64(n) {
			return s
		}
	}
	t.Fatalf("no span %s of attempt %d", name, n)
	return nil
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	return slices.ContainsFunc(s.Events(), func(e sdktrace.Event) bool { return e.Name == name })
}

func linkedTo(s sdktrace.ReadOnlySpan, to trace.SpanContext) bool {
	return slices.ContainsFunc(s.Links(), func(l sdktrace.Link) bool {
		return l.SpanContext.SpanID() == to.SpanID() && l.SpanContext.TraceID() == to.TraceID()
	})
}

// runTraced runs TracedWorkflow with its held activity's attempt 1 recovered
// and then fenced, and returns the spans once the stale attempt's has ended.
func runTraced(ctx context.Context, t *testing.T, b *testBundle) (*client.Run, []sdktrace.ReadOnlySpan) {
	t.Helper()
	key := t.Name()
	g := &gate{entered: make(chan int64, 1), release: make(chan struct{})}
	gates.Store(key, g)

	run, err := b.client.Start(ctx, TracedArgs{Key: key}, &client.StartOpts{WorkflowID: "traced-" + key})
	require.NoError(t, err)
	var heldJobID int64
	select {
	case heldJobID = <-g.entered:
	case <-time.After(time.Minute):
		t.Fatal("the held attempt never started")
	}
	// Attempt 1 is stuck; its lease "expires", attempt 2 finishes the run.
	recoverJob(ctx, t, b, heldJobID)
	getCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	result, err := client.GetResult[string](getCtx, run)
	require.NoError(t, err)
	require.Equal(t, "charged, attempt 2", result)

	// Attempt 1 comes back and tries to complete: fenced out.
	close(g.release)
	select {
	case <-b.rejected:
	case <-time.After(time.Minute):
		t.Fatal("the stale write was never rejected")
	}
	// The closing task's span may end after the client saw the result.
	spans := awaitSpans(t, b, func(spans []sdktrace.ReadOnlySpan) bool {
		return len(named(spans, "Activity:held")) == 2 && slices.ContainsFunc(named(spans, "WorkflowTask:traced"), func(s sdktrace.ReadOnlySpan) bool {
			return attr(s, weirotel.AttrState).AsString() != ""
		})
	})
	return run, spans
}

func TestTraceShape(t *testing.T) {
	t.Parallel()

	t.Run("WithIDGenerator", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, sdktrace.WithIDGenerator(weirotel.NewIDGenerator()))
		run, spans := runTraced(ctx, t, b)

		// The start span is the root; every task and attempt is its child.
		starts := named(spans, "StartWorkflow:traced")
		require.Len(t, starts, 1)
		start := starts[0]
		require.False(t, start.Parent().IsValid())
		require.Equal(t, run.RunID.String(), attr(start, weirotel.AttrRunID).AsString())
		require.Equal(t, int64(1), attr(start, weirotel.AttrGeneration).AsInt64())

		tasks := named(spans, "WorkflowTask:traced")
		require.GreaterOrEqual(t, len(tasks), 3, "one task to start, one per activity outcome")
		flaky := named(spans, "Activity:flaky")
		require.Len(t, flaky, 2, "attempt 1 failed, attempt 2 completed")
		held := named(spans, "Activity:held")
		require.Len(t, held, 2, "attempt 1 fenced, attempt 2 completed")
		for _, s := range slices.Concat(tasks, flaky, held) {
			require.Equal(t, start.SpanContext().TraceID(), s.SpanContext().TraceID(), s.Name())
			require.Equal(t, start.SpanContext().SpanID(), s.Parent().SpanID(), s.Name())
			require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
			require.Equal(t, run.RunID.String(), attr(s, weirotel.AttrRunID).AsString(), s.Name())
			require.Equal(t, run.WorkflowID, attr(s, weirotel.AttrWorkflowID).AsString(), s.Name())
			require.Positive(t, attr(s, weirotel.AttrJobID).AsInt64(), s.Name())
			require.Positive(t, attr(s, weirotel.AttrAttempt).AsInt64(), s.Name())
			require.Equal(t, "weir", attr(s, weirotel.AttrQueue).AsString(), s.Name())
		}
		for _, s := range slices.Concat(tasks, flaky, held) {
			require.Equal(t, int64(1), attr(s, weirotel.AttrGeneration).AsInt64(), s.Name())
		}
		var closing []sdktrace.ReadOnlySpan
		for _, s := range tasks {
			if attr(s, weirotel.AttrState).AsString() != "" {
				closing = append(closing, s)
			}
		}
		require.Len(t, closing, 1, "one task closed the run")
		require.Equal(t, "completed", attr(closing[0], weirotel.AttrState).AsString())

		// The failed attempt and its retry, linked.
		flaky1, flaky2 := attempt(t, spans, "Activity:flaky", 1), attempt(t, spans, "Activity:flaky", 2)
		require.Equal(t, codes.Error, flaky1.Status().Code)
		require.Equal(t, weirotel.OutcomeRetry, attr(flaky1, weirotel.AttrOutcome).AsString())
		require.Equal(t, weirotel.OutcomeCompleted, attr(flaky2, weirotel.AttrOutcome).AsString())
		require.Equal(t, attr(flaky1, weirotel.AttrJobID), attr(flaky2, weirotel.AttrJobID))
		require.True(t, linkedTo(flaky2, flaky1.SpanContext()), "a retry links to the attempt before it")
		require.False(t, linkedTo(flaky1, flaky2.SpanContext()))

		// The stale attempt: fenced, with the rejected write on its span; the
		// recovering attempt links to it and says why it ran.
		held1, held2 := attempt(t, spans, "Activity:held", 1), attempt(t, spans, "Activity:held", 2)
		require.Equal(t, weirotel.OutcomeFenced, attr(held1, weirotel.AttrOutcome).AsString())
		require.Equal(t, codes.Error, held1.Status().Code)
		require.True(t, hasEvent(held1, weirotel.EventStaleWriteRejected), "the fenced write is a span event")
		require.Equal(t, weirotel.OutcomeCompleted, attr(held2, weirotel.AttrOutcome).AsString())
		require.True(t, linkedTo(held2, held1.SpanContext()), "a recovery links to the attempt it replaced")
		require.True(t, hasEvent(held2, weirotel.EventLeaseExpired), "the recovery says the lease expired")

		// Metrics.
		var rm metricdata.ResourceMetrics
		require.NoError(t, b.reader.Collect(ctx, &rm))
		require.Equal(t, int64(1), sumOf(t, rm, weirotel.MetricWorkflowsStarted, nil))
		require.Equal(t, int64(1), sumOf(t, rm, weirotel.MetricActivityAttempts, map[attribute.Key]string{
			weirotel.AttrActivityKind: "flaky", weirotel.AttrOutcome: weirotel.OutcomeRetry,
		}))
		require.Equal(t, int64(1), sumOf(t, rm, weirotel.MetricActivityAttempts, map[attribute.Key]string{
			weirotel.AttrActivityKind: "held", weirotel.AttrOutcome: weirotel.OutcomeFenced,
		}))
		require.Equal(t, int64(2), sumOf(t, rm, weirotel.MetricActivityAttempts, map[attribute.Key]string{
			weirotel.AttrOutcome: weirotel.OutcomeCompleted,
		}))
		require.GreaterOrEqual(t, sumOf(t, rm, weirotel.MetricStaleWritesRejected, nil), int64(1))
		require.Equal(t, int64(1), sumOf(t, rm, weirotel.MetricWorkflowClosed, map[attribute.Key]string{
			weirotel.AttrState: "completed", weirotel.AttrWorkflowKind: "traced", weirotel.AttrNamespace: "default",
		}))
		require.Equal(t, uint64(1), histogramCount(t, rm, weirotel.MetricWorkflowDuration))
		require.GreaterOrEqual(t, sumOf(t, rm, weirotel.MetricTaskAttempts, map[attribute.Key]string{
			weirotel.AttrOutcome: weirotel.OutcomeCompleted, weirotel.AttrNamespace: "default",
		}), int64(3))
		for _, name := range []string{
			weirotel.MetricTaskDuration, weirotel.MetricTaskReplay, weirotel.MetricTaskScheduleToStart, weirotel.MetricActivityExecution,
			weirotel.MetricActivityScheduleToStart, weirotel.MetricActivityScheduleToClose,
		} {
			require.Positive(t, histogramCount(t, rm, name), name)
		}
	})

	t.Run("WithoutIDGenerator", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		_, spans := runTraced(ctx, t, b)

		// Both attempts ran in this process: the retry still links.
		flaky1, flaky2 := attempt(t, spans, "Activity:flaky", 1), attempt(t, spans, "Activity:flaky", 2)
		require.True(t, linkedTo(flaky2, flaky1.SpanContext()))
		held1 := attempt(t, spans, "Activity:held", 1)
		require.True(t, hasEvent(held1, weirotel.EventStaleWriteRejected))
		start := named(spans, "StartWorkflow:traced")[0]
		require.Equal(t, start.SpanContext().SpanID(), held1.Parent().SpanID())
	})
}

// TestChildContinuesTrace: a child workflow's tasks are in its parent's
// trace, children of the parent's start span, with the child's own run ID.
// TestLeaseLostAttemptIsFenced: an attempt whose lease renewal was refused
// (its context's cause is ErrLeaseLost) ends fenced, whatever its code
// returned, in its span and in weir.activity.attempts.
func TestLeaseLostAttemptIsFenced(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupFencing(ctx, t, fencing.Config{HeartbeatInterval: 100 * time.Millisecond})
	key := t.Name()
	g := &gate{entered: make(chan int64, 1), release: make(chan struct{})}
	gates.Store(key, g)

	run, err := b.client.Start(ctx, ObedientArgs{Key: key}, nil)
	require.NoError(t, err)
	var jobID int64
	select {
	case jobID = <-g.entered:
	case <-time.After(time.Minute):
		t.Fatal("attempt 1 never started")
	}
	// Attempt 1's job is recovered: its next renewal is refused, its
	// context ends, it returns the context's error; attempt 2 finishes.
	recoverJob(ctx, t, b, jobID)
	getCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	result, err := client.GetResult[string](getCtx, run)
	require.NoError(t, err)
	require.Equal(t, "attempt 2", result)

	spans := awaitSpans(t, b, func(spans []sdktrace.ReadOnlySpan) bool { return len(named(spans, "Activity:obedient")) == 2 })
	first := attempt(t, spans, "Activity:obedient", 1)
	require.Equal(t, weirotel.OutcomeFenced, attr(first, weirotel.AttrOutcome).AsString())

	var rm metricdata.ResourceMetrics
	require.NoError(t, b.reader.Collect(ctx, &rm))
	require.Equal(t, int64(1), sumOf(t, rm, weirotel.MetricActivityAttempts, map[attribute.Key]string{
		weirotel.AttrActivityKind: "obedient", weirotel.AttrOutcome: weirotel.OutcomeFenced,
	}))
	require.Zero(t, sumOf(t, rm, weirotel.MetricActivityAttempts, map[attribute.Key]string{
		weirotel.AttrActivityKind: "obedient", weirotel.AttrOutcome: weirotel.OutcomeRetry,
	}))
}

func TestChildContinuesTrace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t, sdktrace.WithIDGenerator(weirotel.NewIDGenerator()))
	run, err := b.client.Start(ctx, ParentArgs{}, &client.StartOpts{WorkflowID: "parent-" + uuid.NewString()})
	require.NoError(t, err)
	getCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n, err := client.GetResult[int](getCtx, run)
	require.NoError(t, err)
	require.Equal(t, 42, n)

	spans := awaitSpans(t, b, func(spans []sdktrace.ReadOnlySpan) bool {
		return len(named(spans, "WorkflowTask:otel_child")) >= 1 && len(named(spans, "WorkflowTask:otel_parent")) >= 2
	})
	start := named(spans, "StartWorkflow:otel_parent")
	require.Len(t, start, 1)
	children := named(spans, "WorkflowTask:otel_child")
	for _, s := range slices.Concat(named(spans, "WorkflowTask:otel_parent"), children) {
		require.Equal(t, start[0].SpanContext().TraceID(), s.SpanContext().TraceID(), s.Name())
		require.Equal(t, start[0].SpanContext().SpanID(), s.Parent().SpanID(), s.Name())
	}
	for _, s := range children {
		require.NotEqual(t, run.RunID.String(), attr(s, weirotel.AttrRunID).AsString(), "the child's own run")
		require.True(t, strings.HasPrefix(attr(s, weirotel.AttrWorkflowID).AsString(), run.WorkflowID), "a child's workflow ID derives from its parent's")
	}
}

// TestSignalLinksToSender: a signal is a span of its sender's trace
// (SignalWorkflow:<kind>), and the workflow task that delivers it links to it.
func TestSignalLinksToSender(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(ctx, t)
	run, err := b.client.Start(ctx, WaitArgs{}, &client.StartOpts{WorkflowID: "wait-" + uuid.NewString()})
	require.NoError(t, err)
	require.NoError(t, b.client.Signal(ctx, run.WorkflowID, uuid.Nil, GoSignal{Value: "now"}, &client.SignalOpts{RequestID: "sig-1"}))
	getCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got, err := client.GetResult[string](getCtx, run)
	require.NoError(t, err)
	require.Equal(t, "now", got)

	var delivering sdktrace.ReadOnlySpan
	spans := awaitSpans(t, b, func(spans []sdktrace.ReadOnlySpan) bool {
		senders := named(spans, "SignalWorkflow:otel_go")
		if len(senders) != 1 {
			return false
		}
		for _, s := range named(spans, "WorkflowTask:otel_wait") {
			if linkedTo(s, senders[0].SpanContext()) {
				delivering = s
				return true
			}
		}
		return false
	})
	sender := named(spans, "SignalWorkflow:otel_go")[0]
	require.Equal(t, "otel_go", attr(sender, weirotel.AttrSignalKind).AsString())
	require.Equal(t, "sig-1", attr(sender, weirotel.AttrRequestID).AsString())
	require.Equal(t, trace.SpanKindProducer, sender.SpanKind())
	for _, l := range delivering.Links() {
		if l.SpanContext.SpanID() == sender.SpanContext().SpanID() {
			require.Contains(t, l.Attributes, weirotel.AttrLink.String(weirotel.LinkSignal))
		}
	}
	start := named(spans, "StartWorkflow:otel_wait")[0]
	require.Equal(t, start.SpanContext().TraceID(), delivering.SpanContext().TraceID(), "the task stays in the run's trace")
	for _, s := range named(spans, "WorkflowTask:otel_wait") {
		if s != delivering {
			require.False(t, linkedTo(s, sender.SpanContext()), "only the task that delivered the signal links to it")
		}
	}
}

// sumOf adds up the points of the Int64 sum name whose attributes include
// want.
func sumOf(t *testing.T, rm metricdata.ResourceMetrics, name string, want map[attribute.Key]string) int64 {
	t.Helper()
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(t, ok, name)
			for _, p := range sum.DataPoints {
				if matches(p.Attributes, want) {
					total += p.Value
				}
			}
		}
	}
	return total
}

func histogramCount(t *testing.T, rm metricdata.ResourceMetrics, name string) uint64 {
	t.Helper()
	var total uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			h, ok := m.Data.(metricdata.Histogram[float64])
			require.True(t, ok, name)
			for _, p := range h.DataPoints {
				total += p.Count
			}
		}
	}
	return total
}

func matches(set attribute.Set, want map[attribute.Key]string) bool {
	for k, v := range want {
		got, ok := set.Value(k)
		if !ok || got.AsString() != v {
			return false
		}
	}
	return true
}
