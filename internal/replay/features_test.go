package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

func TestExecuteSideEffect(t *testing.T) {
	t.Parallel()

	calls := 0
	var seen []int
	def := define(func(ctx workflow.Context, args OrderArgs) (int, error) {
		n := workflow.SideEffect(ctx, func() int { calls++; return 40 + calls })
		seen = append(seen, n)
		v, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID, Step: n}, nil).Get(ctx)
		return n + v, err
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.replayOnly = true // its code records what it does
	out := r.task()
	require.Equal(t, []history.EventType{history.EventWorkflowTaskStarted, history.EventMarkerRecorded, history.EventActivityScheduled}, eventTypes(out.Events))
	marker, err := history.Decode[*history.MarkerRecordedAttributes](out.Events[1])
	require.NoError(t, err)
	require.Equal(t, history.MarkerSideEffect, marker.Name)
	require.JSONEq(t, "41", string(marker.Data))

	out = r.task(completed(t, 4, 1))
	require.Equal(t, 42, decodeResult[int](t, out))
	require.Equal(t, 1, calls, "replay must return the recorded value, not run fn again")
	require.Equal(t, []int{41, 41}, seen)
}

func TestExecuteNowIsTheTaskTime(t *testing.T) {
	t.Parallel()

	type times struct{ Before, After time.Time }
	var observed []time.Time
	def := define(func(ctx workflow.Context, args OrderArgs) (times, error) {
		before := workflow.Now(ctx)
		observed = append(observed, before)
		_, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx)
		after := workflow.Now(ctx)
		observed = append(observed, after)
		return times{Before: before, After: after}, err
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.replayOnly = true // its code records what it does, and its identity changes
	r.task()
	out := r.task(completed(t, 3, 1))
	got := decodeResult[times](t, out)
	require.True(t, taskTime(1).Equal(got.Before))
	require.True(t, taskTime(2).Equal(got.After))
	// Task 2 replayed task 1: Now was task 1's recorded time again.
	require.Len(t, observed, 3)
	require.True(t, taskTime(1).Equal(observed[0]))
	require.True(t, taskTime(1).Equal(observed[1]))
	require.True(t, taskTime(2).Equal(observed[2]))
}

func TestExecuteSelector(t *testing.T) {
	t.Parallel()

	// race schedules a charge and a shipment and returns the kind of the
	// first to finish, as the Selector saw it.
	race := func(ctx workflow.Context, args OrderArgs) ([]string, error) {
		charge := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil)
		ship := workflow.ExecuteActivity[int](ctx, ShipArgs{Order: args.ID}, nil)
		var order []string
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(charge, func() { order = append(order, "charge") })
		sel.AddFuture(ship, func() { order = append(order, "ship") })
		for sel.HasPending() {
			sel.Select(ctx)
			if len(order) == 1 {
				// A decision that depends on who won: schedule a follow-up.
				workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: order[0], Step: 99}, nil)
			}
		}
		return order, nil
	}

	tests := []struct {
		name    string
		batches [][]int64 // scheduled event IDs completing together
		want    []string
	}{
		{name: "ChargeFirst", batches: [][]int64{{3}, {4}}, want: []string{"charge", "ship"}},
		{name: "ShipFirst", batches: [][]int64{{4}, {3}}, want: []string{"ship", "charge"}},
		{name: "SameTaskShipArrivedFirst", batches: [][]int64{{4, 3}}, want: []string{"ship", "charge"}},
		{name: "SameTaskChargeArrivedFirst", batches: [][]int64{{3, 4}}, want: []string{"charge", "ship"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			r := newRun(t, define(race), OrderArgs{ID: "o-1"})
			r.task()
			var out *replay.Outcome
			for _, batch := range tt.batches {
				var inputs []history.Event
				for _, id := range batch {
					inputs = append(inputs, completed(t, id, 1))
				}
				out = r.task(inputs...)
			}
			// Replaying the whole history once more decides the same way.
			require.NoError(t, replay.Replay(context.Background(), r.def, &replay.ExecuteParams{History: r.history}))
			require.Equal(t, tt.want, decodeResult[[]string](t, out))
			followUp := 0
			for _, ev := range r.history {
				if ev.Type == history.EventActivityScheduled {
					a, err := history.Decode[*history.ActivityScheduledAttributes](ev)
					require.NoError(t, err)
					if strings.Contains(string(a.Args), `"step":99`) {
						require.JSONEq(t, fmt.Sprintf(`{"order":%q,"step":99}`, tt.want[0]), string(a.Args))
						followUp++
					}
				}
			}
			require.Equal(t, 1, followUp)
		})
	}
}

func TestExecuteGoAndAwait(t *testing.T) {
	t.Parallel()

	def := define(func(ctx workflow.Context, args OrderArgs) ([]string, error) {
		var log []string
		results := map[string]int{}
		for _, name := range []string{"a", "b", "c"} {
			workflow.Go(ctx, func(ctx workflow.Context) {
				v, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: name}, nil).Get(ctx)
				if err != nil {
					panic(err)
				}
				results[name] = v
				log = append(log, name)
			})
		}
		future, settable := workflow.NewFuture[int](ctx)
		workflow.Go(ctx, func(ctx workflow.Context) {
			workflow.Await(ctx, func() bool { return len(results) == 3 })
			settable.Set(results["a"]+results["b"]+results["c"], nil)
		})
		sum, err := future.Get(ctx)
		log = append(log, fmt.Sprint("sum=", sum))
		return log, err
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	out := r.task()
	require.Len(t, out.Activities, 3)
	out = r.task(completed(t, 5, 3))
	require.False(t, out.Completed)
	out = r.task(completed(t, 4, 2), completed(t, 3, 1))
	// Coroutines resume in creation order, whatever the input order.
	require.Equal(t, []string{"c", "a", "b", "sum=6"}, decodeResult[[]string](t, out))
}

func TestExecuteNonDeterminism(t *testing.T) {
	t.Parallel()

	// Each case runs sequential for two tasks, then replays with changed code.
	changed := map[string]func(ctx workflow.Context, args OrderArgs) (Receipt, error){
		"DifferentActivityKind": func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
			_, err := workflow.ExecuteActivity[int](ctx, ShipArgs{Order: args.ID}, nil).Get(ctx)
			return Receipt{}, err
		},
		"FewerCommands": func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
			workflow.Await(ctx, func() bool { return false })
			return Receipt{}, nil
		},
		"MoreCommands": func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
			workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil)
			return sequential(ctx, args)
		},
		"ReturnsEarly": func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
			return Receipt{}, nil
		},
		"SideEffectInstead": func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
			workflow.SideEffect(ctx, func() int { return 1 })
			return sequential(ctx, args)
		},
	}
	wantEvent := map[string]int64{
		"DifferentActivityKind": 3, "FewerCommands": 3, "MoreCommands": 2,
		"ReturnsEarly": 3, "SideEffectInstead": 3,
	}
	for name, code := range changed {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			r := newRun(t, define(sequential), OrderArgs{ID: "o-1"})
			r.task()
			r.task(completed(t, 3, 10))
			before := len(r.history)

			r.def = define(code)
			_, err := r.try(completed(t, 6, 20))
			require.ErrorIs(t, err, workflow.ErrNonDeterminism)
			var ndErr *workflow.NonDeterminismError
			require.ErrorAs(t, err, &ndErr)
			require.Equal(t, wantEvent[name], ndErr.EventID, "%v", err)
			require.Len(t, r.history, before, "a failed task appends nothing")

			require.ErrorIs(t, replay.Replay(context.Background(), r.def, &replay.ExecuteParams{History: r.history}), workflow.ErrNonDeterminism)
		})
	}
}

func TestExecutePanic(t *testing.T) {
	t.Parallel()

	def := define(func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		workflow.Go(ctx, func(ctx workflow.Context) {
			workflow.Await(ctx, func() bool { return false }) // left blocked: must be torn down
		})
		_, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx)
		if err == nil {
			explode(args.ID)
		}
		return Receipt{}, err
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task()
	_, err := r.try(completed(t, 3, 1))
	require.ErrorIs(t, err, workflow.ErrPanic)
	var panicErr *workflow.PanicError
	require.ErrorAs(t, err, &panicErr)
	require.Equal(t, "exploding o-1", panicErr.Value)
	require.Contains(t, panicErr.Stack, "replay_test.explode")
	require.Len(t, r.history, 3)
}

func explode(id string) { panic("exploding " + id) }

func TestExecuteLoggerIsSilentWhileReplaying(t *testing.T) {
	t.Parallel()

	var buf bytes.Buffer
	def := define(func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		logger := workflow.GetLogger(ctx).With("order", args.ID)
		for step := 1; step <= 3; step++ {
			logger.Info("charging", "step", step, "replaying", workflow.IsReplaying(ctx))
			if _, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID, Step: step}, nil).Get(ctx); err != nil {
				return Receipt{}, err
			}
		}
		logger.WithGroup("done").Info("charged")
		return Receipt{}, nil
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.replayOnly = true // its code records what it does
	r.params.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	r.task()
	r.task(completed(t, 3, 1))
	r.task(completed(t, 6, 1))
	r.task(completed(t, 9, 1))
	require.Equal(t, strings.Join([]string{
		`level=INFO msg=charging workflow_kind=order workflow_id=wf-1 run_id=run-1 order=o-1 step=1 replaying=false`,
		`level=INFO msg=charging workflow_kind=order workflow_id=wf-1 run_id=run-1 order=o-1 step=2 replaying=false`,
		`level=INFO msg=charging workflow_kind=order workflow_id=wf-1 run_id=run-1 order=o-1 step=3 replaying=false`,
		`level=INFO msg=charged workflow_kind=order workflow_id=wf-1 run_id=run-1 order=o-1`,
		``,
	}, "\n"), buf.String())
}

func TestExecuteInfo(t *testing.T) {
	t.Parallel()

	var infos []workflow.Info
	def := define(func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		infos = append(infos, workflow.GetInfo(ctx))
		_, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{}, nil).Get(ctx)
		infos = append(infos, workflow.GetInfo(ctx))
		return Receipt{}, err
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.replayOnly = true // its code records what it does
	r.task()
	r.params.Info = replay.Info{RunID: "run-from-worker"}
	r.task(completed(t, 3, 1))
	require.Equal(t, []workflow.Info{
		{Generation: 1, Kind: "order", RunID: "run-1", TaskAttempt: 1, WorkflowID: "wf-1"},
		{Generation: 1, Kind: "order", RunID: "run-from-worker", TaskAttempt: 1, WorkflowID: "wf-1"},
		{Generation: 1, Kind: "order", RunID: "run-from-worker", TaskAttempt: 1, WorkflowID: "wf-1"},
	}, infos)
}

func TestExecuteActivityOpts(t *testing.T) {
	t.Parallel()

	type OptsWorkflow struct {
		funcWorkflow[OrderArgs, Receipt]
	}
	def := define(func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		workflow.ExecuteActivity[int](ctx, ChargeArgs{Step: 1}, nil)
		ctx = workflow.WithActivityOpts(ctx, &workflow.ActivityOpts{Queue: "payments", StartToCloseTimeout: 5 * time.Second})
		workflow.ExecuteActivity[int](ctx, ChargeArgs{Step: 2}, &workflow.ActivityOpts{
			HeartbeatTimeout: time.Second, Priority: 3, ScheduleToCloseTimeout: time.Hour,
			RetryPolicy: &workflow.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{"CardDeclined"}},
		})
		_, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Step: 3}, &workflow.ActivityOpts{Priority: 9}).Get(ctx)
		return Receipt{}, err
	})
	_ = OptsWorkflow{}
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	out := r.task()
	require.Len(t, out.Activities, 2)
	require.Equal(t, &history.ActivityScheduledAttributes{
		Kind: "charge", Args: []byte(`{"order":"","step":1}`), Queue: "weir", Priority: 1,
		StartToCloseTimeout: history.Duration(time.Minute),
		RetryPolicy: &history.RetryPolicy{
			InitialInterval: history.Duration(time.Second), BackoffCoefficient: 2,
			MaximumInterval: history.Duration(100 * time.Second), MaximumAttempts: 25,
		},
	}, out.Activities[0].Attributes)
	require.Equal(t, &history.ActivityScheduledAttributes{
		Kind: "charge", Args: []byte(`{"order":"","step":2}`), Queue: "payments", Priority: 3,
		StartToCloseTimeout: history.Duration(5 * time.Second), ScheduleToCloseTimeout: history.Duration(time.Hour),
		HeartbeatTimeout: history.Duration(time.Second),
		RetryPolicy: &history.RetryPolicy{
			InitialInterval: history.Duration(time.Second), BackoffCoefficient: 2,
			MaximumInterval: history.Duration(100 * time.Second), MaximumAttempts: 3,
			NonRetryableErrorTypes: []string{"CardDeclined"},
		},
	}, out.Activities[1].Attributes)
	// The invalid third activity was never scheduled; its error ended the run.
	require.True(t, out.Completed)
	require.Contains(t, out.Failure.Message, "Priority 9")
}

func TestExecuteWorkflowOptsActivityDefaults(t *testing.T) {
	t.Parallel()

	def := replay.Bind(&queueWorkflow{})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	out := r.task()
	require.Len(t, out.Activities, 2)
	require.Equal(t, "orders", out.Activities[0].Attributes.Queue)
	require.Equal(t, "override", out.Activities[1].Attributes.Queue)
	require.Equal(t, 2, out.Activities[1].Attributes.Priority)
}

type queueWorkflow struct {
	workflow.Defaults[OrderArgs, Receipt]
}

func (*queueWorkflow) Opts() *workflow.Opts {
	return &workflow.Opts{ActivityOpts: &workflow.ActivityOpts{Queue: "orders", Priority: 2}}
}

func (*queueWorkflow) Run(ctx workflow.Context, args OrderArgs) (Receipt, error) {
	workflow.ExecuteActivity[int](ctx, ChargeArgs{}, nil)
	_, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{}, &workflow.ActivityOpts{Queue: "override"}).Get(ctx)
	return Receipt{}, err
}

func TestExecuteInvalid(t *testing.T) {
	t.Parallel()

	valid := newRun(t, define(sequential), OrderArgs{ID: "o-1"})
	valid.task()
	good := valid.history // WorkflowStarted, WorkflowTaskStarted, ActivityScheduled

	with := func(mutate func(h []history.Event) []history.Event) []history.Event {
		h := append([]history.Event(nil), good...)
		return mutate(h)
	}
	tests := map[string]struct {
		history []history.Event
		inputs  []history.Event
		wantErr error
	}{
		"Gap": {history: with(func(h []history.Event) []history.Event {
			h[2].ID = 4
			return h
		}), wantErr: replay.ErrInvalidHistory},
		"NoWorkflowStarted": {history: good[1:], wantErr: replay.ErrInvalidHistory},
		"UndecodableAttributes": {history: with(func(h []history.Event) []history.Event {
			h[2].Attributes = []byte(`{"kind":`)
			return h
		}), wantErr: history.ErrInvalidEvent},
		"UnknownType": {history: with(func(h []history.Event) []history.Event {
			h[2].Type = "Nope"
			return h
		}), wantErr: history.ErrInvalidEvent},
		"CommandWithoutTask": {history: with(func(h []history.Event) []history.Event {
			h[1], h[2] = h[2], h[1]
			h[1].ID, h[2].ID = 2, 3
			return h
		}), wantErr: replay.ErrInvalidHistory},
		"CommandAsInput":        {history: good, inputs: []history.Event{good[2]}, wantErr: replay.ErrInvalidHistory},
		"SecondWorkflowStarted": {history: good, inputs: []history.Event{good[0]}, wantErr: replay.ErrInvalidHistory},
		"OtherWorkflowKind": {history: with(func(h []history.Event) []history.Event {
			h[0].Attributes = []byte(`{"kind":"refund","args":{}}`)
			return h
		}), wantErr: replay.ErrInvalidHistory},
		"UndecodableArgs": {history: with(func(h []history.Event) []history.Event {
			h[0].Attributes = []byte(`{"kind":"order","args":{"id":7}}`)
			return h
		}), wantErr: replay.ErrPayload},
		"Empty": {wantErr: replay.ErrInvalidHistory},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			_, err := replay.Execute(context.Background(), valid.def, &replay.ExecuteParams{
				History: tt.history, Inputs: tt.inputs, Now: taskTime(9),
			})
			require.ErrorIs(t, err, tt.wantErr)
		})
	}

	t.Run("NoNow", func(t *testing.T) {
		t.Parallel()
		_, err := replay.Execute(context.Background(), valid.def, &replay.ExecuteParams{History: good})
		require.Error(t, err)
	})
	t.Run("NoDefinition", func(t *testing.T) {
		t.Parallel()
		_, err := replay.Execute(context.Background(), &replay.Definition{}, &replay.ExecuteParams{History: good, Now: taskTime(9)})
		require.Error(t, err)
	})
	t.Run("CanceledContext", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := replay.Execute(ctx, valid.def, &replay.ExecuteParams{History: good, Now: taskTime(9)})
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestExecuteStartsFromWorkflowStartedInput(t *testing.T) {
	t.Parallel()

	r := newRun(t, define(sequential), OrderArgs{ID: "o-1"})
	started := r.history[0]
	started.ID = 0
	out, err := replay.Execute(context.Background(), r.def, &replay.ExecuteParams{Inputs: []history.Event{started}, Now: taskTime(1)})
	require.NoError(t, err)
	require.Equal(t, []history.EventType{history.EventWorkflowStarted, history.EventWorkflowTaskStarted, history.EventActivityScheduled}, eventTypes(out.Events))
	require.Equal(t, int64(1), out.Events[0].ID)
}

func TestExecuteResultEncodingFailsTheTask(t *testing.T) {
	t.Parallel()

	def := define(func(ctx workflow.Context, args OrderArgs) (func(), error) { return func() {}, nil })
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	_, err := r.try()
	require.ErrorIs(t, err, replay.ErrPayload)
}

func TestExecuteWorkflowCodeOutsideEngine(t *testing.T) {
	t.Parallel()

	require.PanicsWithValue(t, workflow.ErrNotInWorkflow, func() { workflow.Now(nil) })
	require.PanicsWithValue(t, workflow.ErrNotInWorkflow, func() {
		workflow.ExecuteActivity[int](fakeContext{}, ChargeArgs{}, nil)
	})
}

type fakeContext struct{}

func (fakeContext) Done() workflow.Readier { return nil }
func (fakeContext) Err() error             { return nil }
func (fakeContext) Value(any) any          { return nil }

func TestExecuteSelectorDefault(t *testing.T) {
	t.Parallel()

	def := define(func(ctx workflow.Context, args OrderArgs) ([]string, error) {
		charge := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil)
		var log []string
		sel := workflow.NewSelector(ctx).
			AddFuture(charge, func() { log = append(log, "charged") }).
			AddDefault(func() { log = append(log, "not yet") })
		sel.Select(ctx) // nothing ready: the default runs, without blocking
		_, err := charge.Get(ctx)
		sel.Select(ctx)
		return log, err
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task()
	out := r.task(completed(t, 3, 1))
	require.Equal(t, []string{"not yet", "charged"}, decodeResult[[]string](t, out))
}

func TestExecutePayloadLimit(t *testing.T) {
	t.Parallel()

	big := strings.Repeat("x", 100)

	t.Run("ActivityArgs", func(t *testing.T) {
		t.Parallel()

		var seen error
		def := define(func(ctx workflow.Context, args OrderArgs) (string, error) {
			_, seen = workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: big}, nil).Get(ctx)
			return "done", nil
		})
		r := newRun(t, def, OrderArgs{ID: "o-1"})
		r.params.MaxPayloadBytes = 64
		out := r.task()
		require.Empty(t, out.Activities)
		require.ErrorIs(t, seen, workflow.ErrPayloadTooLarge)
		var tooLarge *workflow.PayloadTooLargeError
		require.ErrorAs(t, seen, &tooLarge)
		require.Equal(t, 64, tooLarge.Limit)
		require.Equal(t, `args of activity "charge"`, tooLarge.What)
	})

	t.Run("NoLimit", func(t *testing.T) {
		t.Parallel()

		def := define(func(ctx workflow.Context, args OrderArgs) (string, error) { return big, nil })
		r := newRun(t, def, OrderArgs{ID: "o-1"})
		r.params.MaxPayloadBytes = -1
		require.Equal(t, big, decodeResult[string](t, r.task()))
	})

	t.Run("SideEffect", func(t *testing.T) {
		t.Parallel()

		def := define(func(ctx workflow.Context, args OrderArgs) (string, error) {
			return workflow.SideEffect(ctx, func() string { return big }), nil
		})
		r := newRun(t, def, OrderArgs{ID: "o-1"})
		r.params.MaxPayloadBytes = 64
		_, err := r.try()
		require.ErrorIs(t, err, workflow.ErrPanic)
		require.ErrorIs(t, err, workflow.ErrPayloadTooLarge)
	})

	t.Run("WorkflowResult", func(t *testing.T) {
		t.Parallel()

		def := define(func(ctx workflow.Context, args OrderArgs) (string, error) { return big, nil })
		r := newRun(t, def, OrderArgs{ID: "o-1"})
		r.params.MaxPayloadBytes = 64
		out := r.task()
		require.True(t, out.Completed)
		require.Equal(t, replay.FailureTypePayload, out.Failure.Type)
		require.True(t, out.Failure.NonRetryable)
	})
}

// explosiveError panics when asked for its message.
type explosiveError struct{}

func (explosiveError) Error() string { panic("no message for you") }

// explosiveContext panics when asked whether it is cancelled, after a while.
type explosiveContext struct {
	workflow.Context
	armed *bool
}

func (c explosiveContext) Err() error {
	if *c.armed {
		panic("no Err for you")
	}
	return nil
}

func TestExecuteUserCodePanicsOutsideCoroutines(t *testing.T) {
	t.Parallel()

	t.Run("ErrorMethod", func(t *testing.T) {
		t.Parallel()

		def := define(func(ctx workflow.Context, args OrderArgs) (string, error) { return "", explosiveError{} })
		_, err := newRun(t, def, OrderArgs{ID: "o-1"}).try()
		require.ErrorIs(t, err, workflow.ErrPanic)
	})

	t.Run("ContextErr", func(t *testing.T) {
		t.Parallel()

		def := define(func(ctx workflow.Context, args OrderArgs) (string, error) {
			armed := false
			ctx = explosiveContext{Context: ctx, armed: &armed}
			f := workflow.ExecuteActivity[int](ctx, ChargeArgs{}, nil)
			armed = true
			_, err := f.Get(ctx)
			return "", err
		})
		_, err := newRun(t, def, OrderArgs{ID: "o-1"}).try()
		require.ErrorIs(t, err, workflow.ErrPanic)
		require.ErrorContains(t, err, "no Err for you")
	})
}

func TestExecuteContinueAsNew(t *testing.T) {
	t.Parallel()

	def := define(func(ctx workflow.Context, args OrderArgs) (string, error) {
		if _, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx); err != nil {
			return "", err
		}
		if args.ID == "o-3" {
			return "done", nil
		}
		next := OrderArgs{ID: fmt.Sprintf("o-%d", int(args.ID[2]-'0')+1)}
		return "", fmt.Errorf("round over: %w", workflow.ContinueAsNew(ctx, next))
	})
	args := OrderArgs{ID: "o-1"}
	for round := 1; ; round++ {
		r := newRun(t, def, args)
		r.task()
		out := r.task(completed(t, 3, 1))
		require.True(t, out.Completed)
		if round == 3 {
			require.Nil(t, out.ContinuedAsNew)
			require.Equal(t, "done", decodeResult[string](t, out))
			break
		}
		require.NotNil(t, out.ContinuedAsNew)
		require.Nil(t, out.Failure)
		require.Equal(t, "order", out.ContinuedAsNew.Kind)
		require.Equal(t, history.EventWorkflowContinuedAsNew, out.Events[len(out.Events)-1].Type)
		require.NoError(t, json.Unmarshal(out.ContinuedAsNew.Args, &args))
		require.Equal(t, fmt.Sprintf("o-%d", round+1), args.ID)
	}
}

func TestExecuteChannel(t *testing.T) {
	t.Parallel()

	// Three workers take jobs from a channel and report on another one.
	def := define(func(ctx workflow.Context, args OrderArgs) ([]string, error) {
		jobs := workflow.NewChannel[int](ctx)
		results := workflow.NewChannel[string](ctx)
		for w := range 3 {
			workflow.Go(ctx, func(ctx workflow.Context) {
				for {
					job, ok := jobs.Receive(ctx)
					if !ok {
						return
					}
					v, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID, Step: job}, nil).Get(ctx)
					results.Send(fmt.Sprintf("worker %d job %d: %d %v", w, job, v, err))
				}
			})
		}
		for job := range 5 {
			jobs.Send(job)
		}
		jobs.Close()
		var log []string
		for range 5 {
			line, _ := results.Receive(ctx)
			log = append(log, line)
		}
		return log, nil
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	out := r.task()
	require.Len(t, out.Activities, 3) // one job per worker at a time
	out = r.task(completed(t, 4, 2), completed(t, 3, 1))
	require.Len(t, out.Activities, 2)
	out = r.task(completed(t, 5, 3), completed(t, 10, 5), completed(t, 9, 4))
	// Coroutines resume in creation order, whatever order outcomes came in.
	require.Equal(t, []string{
		"worker 0 job 0: 1 <nil>",
		"worker 1 job 1: 2 <nil>",
		"worker 0 job 3: 4 <nil>",
		"worker 1 job 4: 5 <nil>",
		"worker 2 job 2: 3 <nil>",
	}, decodeResult[[]string](t, out))
	require.NoError(t, replay.Replay(context.Background(), def, &replay.ExecuteParams{History: r.history}))
}
