package replay_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

var update = flag.Bool("update", false, "rewrite the golden histories in testdata/replay")

// goldenScenario is a workflow driven through a fixed sequence of tasks.
type goldenScenario struct {
	def  *replay.Definition
	args any
	// inputs returns the inputs of each task after the first; pending maps
	// the activities still waiting (event ID → kind) when it is called.
	tasks []func(t testing.TB, pending map[int64]string) []history.Event
}

// goldenFile is what testdata/replay/<name>.json holds.
type goldenFile struct {
	Description string          `json:"description"`
	Kind        string          `json:"kind"`
	History     []history.Event `json:"history"`
}

func completeAll(result any) func(t testing.TB, pending map[int64]string) []history.Event {
	return func(t testing.TB, pending map[int64]string) []history.Event {
		var inputs []history.Event
		for id := range int64(len(pending)) * 1000 { // in ID order
			if _, ok := pending[id]; ok {
				inputs = append(inputs, completed(t, id, result))
			}
		}
		return inputs
	}
}

func completeIDs(result any, ids ...int64) func(t testing.TB, pending map[int64]string) []history.Event {
	return func(t testing.TB, _ map[int64]string) []history.Event {
		var inputs []history.Event
		for _, id := range ids {
			inputs = append(inputs, completed(t, id, result))
		}
		return inputs
	}
}

func goldenScenarios() map[string]struct {
	description string
	scenario    goldenScenario
} {
	parallel := define(func(ctx workflow.Context, args OrderArgs) (int, error) {
		var futures []workflow.Future[int]
		for i := range 10 {
			futures = append(futures, workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID, Step: i}, nil))
		}
		total := 0
		for _, f := range futures {
			v, err := f.Get(ctx)
			if err != nil {
				return 0, err
			}
			total += v
		}
		return total, nil
	})
	race := define(func(ctx workflow.Context, args OrderArgs) (string, error) {
		charge := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil)
		ship := workflow.ExecuteActivity[int](ctx, ShipArgs{Order: args.ID}, &workflow.ActivityOpts{Queue: "shipping"})
		winner := ""
		workflow.NewSelector(ctx).
			AddFuture(charge, func() { winner = "charge" }).
			AddFuture(ship, func() { winner = "ship" }).
			Select(ctx)
		token := workflow.SideEffect(ctx, func() string { return "token-" + winner })
		_, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: token}, nil).Get(ctx)
		return winner, err
	})
	cancelable := define(func(ctx workflow.Context, args OrderArgs) (string, error) {
		_, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx)
		if err == nil {
			return "charged", nil
		}
		cleanup := workflow.NewDisconnectedContext(ctx)
		if _, err := workflow.ExecuteActivity[int](cleanup, ShipArgs{Order: "undo-" + args.ID}, nil).Get(cleanup); err != nil {
			return "", err
		}
		return "", err
	})
	deadline := define(func(ctx workflow.Context, args OrderArgs) (string, error) {
		actCtx, cancelActivity := workflow.WithCancel(ctx)
		charge := workflow.ExecuteActivity[int](actCtx, ChargeArgs{Order: args.ID}, nil)
		timer := workflow.NewTimer(ctx, 10*time.Minute)
		winner := ""
		workflow.NewSelector(ctx).
			AddFuture(timer, func() { winner = "timer"; cancelActivity() }).
			AddFuture(charge, func() { winner = "charge" }).
			Select(ctx)
		if err := workflow.Sleep(ctx, time.Second); err != nil {
			return "", err
		}
		return winner, nil
	})
	failing := define(func(ctx workflow.Context, args OrderArgs) (int, error) {
		return workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx)
	})

	return map[string]struct {
		description string
		scenario    goldenScenario
	}{
		"activity_failure": {
			description: "an activity fails for good; the workflow returns its error",
			scenario: goldenScenario{def: failing, args: OrderArgs{ID: "o-3"}, tasks: []func(testing.TB, map[int64]string) []history.Event{
				func(t testing.TB, _ map[int64]string) []history.Event {
					return []history.Event{failed(t, 3, history.Failure{Message: "card declined", Type: "CardDeclined", NonRetryable: true})}
				},
			}},
		},
		"signals": {
			description: "signals buffered and received through a Selector, interleaved with an activity by arrival order",
			scenario: goldenScenario{def: define(approval), args: OrderArgs{ID: "o-7"}, tasks: []func(testing.TB, map[int64]string) []history.Event{
				func(t testing.TB, _ map[int64]string) []history.Event {
					return []history.Event{signal(t, "add_note", `{"note":"gift wrap"}`)}
				},
				func(t testing.TB, _ map[int64]string) []history.Event {
					return []history.Event{completed(t, 3, 12), signal(t, "approve", `{"by":"ann"}`)}
				},
			}},
		},
		"timer_deadline": {
			description: "an activity raced against a durable timer; the timer fires first and the activity is cancelled; then a sleep",
			scenario: goldenScenario{def: deadline, args: OrderArgs{ID: "o-6"}, tasks: []func(testing.TB, map[int64]string) []history.Event{
				func(t testing.TB, _ map[int64]string) []history.Event { return []history.Event{timerFired(t, 4)} },
				func(t testing.TB, _ map[int64]string) []history.Event { return []history.Event{timerFired(t, 7)} },
			}},
		},
		"workflow_cancel": {
			description: "a cancel request cancels the pending activity; cleanup runs on a disconnected context; the run ends cancelled",
			scenario: goldenScenario{def: cancelable, args: OrderArgs{ID: "o-5"}, tasks: []func(testing.TB, map[int64]string) []history.Event{
				func(t testing.TB, _ map[int64]string) []history.Event { return []history.Event{cancelRequested(t)} },
				completeAll(1),
			}},
		},
		"parallel": {
			description: "ten activities at once, outcomes arriving in three out-of-order batches",
			scenario: goldenScenario{def: parallel, args: OrderArgs{ID: "o-2"}, tasks: []func(testing.TB, map[int64]string) []history.Event{
				completeIDs(1, 12, 4, 7),
				completeIDs(1, 3, 5),
				completeIDs(1, 11, 10, 9, 8, 6),
			}},
		},
		"selector_side_effect": {
			description: "a Selector race decided by arrival order, then a side effect that depends on the winner",
			scenario: goldenScenario{def: race, args: OrderArgs{ID: "o-4"}, tasks: []func(testing.TB, map[int64]string) []history.Event{
				completeIDs(1, 4, 3),
				completeAll(1),
			}},
		},
		"sequential": {
			description: "three activities one after the other, one task each",
			scenario: goldenScenario{def: define(sequential), args: OrderArgs{ID: "o-1"}, tasks: []func(testing.TB, map[int64]string) []history.Event{
				completeAll(10), completeAll(20), completeAll(30),
			}},
		},
	}
}

// TestGoldenHistories replays the committed histories of testdata/replay
// against today's code (catching changes that would break runs in flight) and
// checks that running the scenarios again writes the same histories. Run
// with -update to rewrite them after a deliberate change.
func TestGoldenHistories(t *testing.T) {
	t.Parallel()

	for name, tt := range goldenScenarios() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			r := newRun(t, tt.scenario.def, tt.scenario.args)
			out := r.task()
			for _, inputs := range tt.scenario.tasks {
				out = r.task(inputs(t, r.pendingActivities())...)
			}
			require.True(t, out.Completed, "the scenario must run to completion")

			path := filepath.Join("testdata", "replay", name+".json")
			if *update {
				raw, err := json.MarshalIndent(goldenFile{Description: tt.description, Kind: tt.scenario.def.Kind, History: r.history}, "", "  ")
				require.NoError(t, err)
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, append(raw, '\n'), 0o600))
			}

			raw, err := os.ReadFile(path)
			require.NoError(t, err, "run the tests with -update to create it")
			var golden goldenFile
			require.NoError(t, json.Unmarshal(raw, &golden))

			require.NoError(t, replay.Replay(context.Background(), tt.scenario.def, &replay.ExecuteParams{History: golden.History}))
			out, err = replay.Execute(context.Background(), tt.scenario.def, &replay.ExecuteParams{History: golden.History, Now: taskTime(99)})
			require.NoError(t, err)
			require.True(t, out.Completed)
			require.Empty(t, out.Events)

			requireSameHistory(t, golden.History, r.history)
		})
	}
}

func requireSameHistory(t *testing.T, want, got []history.Event) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i].ID, got[i].ID)
		require.Equal(t, want[i].Type, got[i].Type, "event %d", want[i].ID)
		require.JSONEq(t, string(want[i].Attributes), string(got[i].Attributes), "event %d", want[i].ID)
		require.True(t, want[i].Time.Equal(got[i].Time), "event %d", want[i].ID)
	}
}

// FuzzExecute mutates golden histories and inputs: whatever the bytes, the
// engine must not panic or leak, and must fail only with its typed errors.
func FuzzExecute(f *testing.F) {
	scenarios := goldenScenarios()
	names := []string{"activity_failure", "parallel", "selector_side_effect", "sequential", "signals", "timer_deadline", "workflow_cancel"}
	for i, name := range names {
		raw, err := os.ReadFile(filepath.Join("testdata", "replay", name+".json"))
		require.NoError(f, err)
		var golden goldenFile
		require.NoError(f, json.Unmarshal(raw, &golden))
		events, err := json.Marshal(golden.History)
		require.NoError(f, err)
		f.Add(uint8(i), events, 3)
		f.Add(uint8(i), events, -1)
	}
	f.Fuzz(func(t *testing.T, scenario uint8, eventsJSON []byte, cut int) {
		def := scenarios[names[int(scenario)%len(names)]].scenario.def
		var events []history.Event
		if json.Unmarshal(eventsJSON, &events) != nil {
			return
		}
		// Events after cut become inputs of the task.
		var inputs []history.Event
		if cut >= 0 && cut < len(events) {
			events, inputs = events[:cut], events[cut:]
		}
		out, err := replay.Execute(context.Background(), def, &replay.ExecuteParams{History: events, Inputs: inputs, Now: taskTime(1)})
		if err != nil {
			if !errors.Is(err, replay.ErrInvalidHistory) && !errors.Is(err, workflow.ErrNonDeterminism) &&
				!errors.Is(err, replay.ErrPayload) && !errors.Is(err, workflow.ErrPanic) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		require.NotNil(t, out)
		for i, ev := range out.Events {
			require.Equal(t, int64(len(events)+i+1), ev.ID)
		}
	})
}
