package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

// op is one step of a random workflow program.
type op struct {
	kind  int // see the switch in interpret
	n     int
	child []op
}

// randomProgram builds a program from rng: a list of steps, some of which
// start coroutines running programs of their own.
func randomProgram(rng *rand.Rand, depth int) []op {
	steps := make([]op, 1+rng.IntN(6))
	for i := range steps {
		steps[i] = op{kind: rng.IntN(7), n: 1 + rng.IntN(4)}
		if depth == 0 && i < 2 {
			steps[i].kind = 6 // plenty of concurrency
		}
		if steps[i].kind == 6 && depth < 2 {
			steps[i].child = randomProgram(rng, depth+1)
		} else if steps[i].kind == 6 {
			steps[i].kind = 0
		}
	}
	return steps
}

// interpret runs a program as workflow code and appends what it observed to
// trace, so that any difference in decisions shows in the result.
func interpret(ctx workflow.Context, name string, program []op, trace *[]string, done *int) {
	for i, step := range program {
		label := fmt.Sprintf("%s.%d", name, i)
		switch step.kind {
		case 0: // one activity
			v, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: label}, nil).Get(ctx)
			*trace = append(*trace, fmt.Sprint(label, " activity ", v, err != nil))
		case 1: // n activities in parallel, results in order
			futures := make([]workflow.Future[int], step.n)
			for j := range futures {
				futures[j] = workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: label, Step: j}, nil)
			}
			for _, f := range futures {
				v, _ := f.Get(ctx)
				*trace = append(*trace, fmt.Sprint(label, " parallel ", v))
			}
		case 2: // sleep
			err := workflow.Sleep(ctx, time.Duration(step.n)*time.Minute)
			*trace = append(*trace, fmt.Sprint(label, " slept ", err == nil, " ", workflow.Now(ctx).Format(time.TimeOnly)))
		case 3: // race an activity against a timer; cancel the loser
			actCtx, cancelAct := workflow.WithCancel(ctx)
			timerCtx, cancelTimer := workflow.WithCancel(ctx)
			act := workflow.ExecuteActivity[int](actCtx, ShipArgs{Order: label}, nil)
			timer := workflow.NewTimer(timerCtx, time.Duration(step.n)*time.Minute)
			winner := ""
			workflow.NewSelector(ctx).
				AddFuture(act, func() { winner = "activity"; cancelTimer() }).
				AddFuture(timer, func() { winner = "timer"; cancelAct() }).
				Select(ctx)
			*trace = append(*trace, fmt.Sprint(label, " race ", winner))
		case 4: // side effect
			v := workflow.SideEffect(ctx, func() int { return len(label) * step.n }) // stable, so a task re-run can be compared
			*trace = append(*trace, fmt.Sprint(label, " side effect ", v))
		case 5: // a signal, or a timeout
			ch := workflow.GetSignalChannel[AddNote](ctx)
			timeout := workflow.NewTimer(ctx, time.Duration(step.n)*time.Minute)
			got := ""
			workflow.NewSelector(ctx).
				AddReceive(ch, func() {
					n, _, _ := ch.TryReceive(ctx)
					got = n.Note
				}).
				AddFuture(timeout, func() { got = "timeout" }).
				Select(ctx)
			*trace = append(*trace, fmt.Sprint(label, " signal ", got))
		case 6: // a coroutine
			workflow.Go(ctx, func(ctx workflow.Context) {
				interpret(ctx, label, step.child, trace, done)
				*done++
			})
			*trace = append(*trace, fmt.Sprint(label, " go"))
		}
	}
}

func countCoroutines(program []op) int {
	n := 0
	for _, step := range program {
		if step.kind == 6 {
			n += 1 + countCoroutines(step.child)
		}
	}
	return n
}

func programDefinition(program []op) *replay.Definition {
	return define(func(ctx workflow.Context, args OrderArgs) ([]string, error) {
		var trace []string
		done := 0
		interpret(ctx, "main", program, &trace, &done)
		want := countCoroutines(program)
		if err := workflow.Await(ctx, func() bool { return done == want }); err != nil {
			return nil, err
		}
		return trace, nil
	})
}

// checkDeterminism runs a random program, delivering outcomes in an order
// and in batches drawn from rng, and checks at every task that executing it
// again gives the very same events, that a session continued from the
// previous task (sticky execution) decides the very same, and that the
// history replays cleanly.
func checkDeterminism(t *testing.T, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	program := randomProgram(rng, 0)
	def := programDefinition(program)
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	pending := map[int64]history.EventType{} // started event ID → kind of outcome to send
	var ids []int64
	notes := 0
	for task := 1; task <= 500; task++ {
		var inputs []history.Event
		if task > 1 {
			// Deliver a random non-empty subset of the pending outcomes, in
			// random order, plus sometimes a signal.
			rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
			k := 1 + rng.IntN(len(ids))
			for _, id := range ids[:k] {
				if pending[id] == history.EventTimerFired {
					inputs = append(inputs, timerFired(t, id))
				} else {
					inputs = append(inputs, completed(t, id, rng.IntN(100)))
				}
				delete(pending, id)
			}
			ids = ids[k:]
			if rng.IntN(3) == 0 {
				notes++
				inputs = append(inputs, signal(t, "add_note", fmt.Sprintf(`{"note":"n%d"}`, notes)))
			}
			if rng.IntN(8) == 0 {
				inputs = append(inputs, cancelRequested(t))
			}
		}
		params := &replay.ExecuteParams{History: r.history, Inputs: inputs, Now: taskTime(task)}
		out, err := replay.Execute(context.Background(), def, params)
		r.sticky(params, out, err) // the run's session, continued, decides the same
		require.NoError(t, err, "seed %d task %d", seed, task)
		again, err := replay.Execute(context.Background(), def, params)
		require.NoError(t, err)
		require.Equal(t, eventsJSON(t, out.Events), eventsJSON(t, again.Events), "seed %d task %d: same task, different decisions", seed, task)

		r.history = append(r.history, out.Events...)
		require.NoError(t, replay.Replay(context.Background(), def, &replay.ExecuteParams{History: r.history}), "seed %d task %d", seed, task)
		if out.Completed {
			if out.Failure != nil {
				require.True(t, out.Canceled, "seed %d: %+v", seed, out.Failure)
			}
			return
		}
		for _, a := range out.Activities {
			pending[a.EventID] = history.EventActivityCompleted
			ids = append(ids, a.EventID)
		}
		for _, tm := range out.Timers {
			pending[tm.EventID] = history.EventTimerFired
			ids = append(ids, tm.EventID)
		}
		// Cancelled operations may still report: the engine must drop them.
		require.NotEmpty(t, ids, "seed %d task %d: blocked with nothing pending", seed, task)
	}
	t.Fatalf("seed %d: no end after 500 tasks", seed)
}

func eventsJSON(t *testing.T, events []history.Event) string {
	t.Helper()
	raw, err := json.Marshal(events)
	require.NoError(t, err)
	return string(raw)
}

func TestDeterminismOfRandomPrograms(t *testing.T) {
	t.Parallel()

	for seed := range uint64(400) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			checkDeterminism(t, seed)
		})
	}
}

func FuzzDeterminism(f *testing.F) {
	for seed := range uint64(5) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { checkDeterminism(t, seed) })
}
