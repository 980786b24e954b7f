package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// LongKindArgs name an activity whose kind River's job table refuses (its
// kind_length constraint): scheduling one fails in the database.
type LongKindArgs struct{}

func (LongKindArgs) Kind() string { return strings.Repeat("k", 130) }

// LongKindArgs' workflow.
type LongKindWorkflowArgs struct{}

func (LongKindWorkflowArgs) Kind() string { return "long_kind" }

// LongKindWorkflow schedules a LongKindArgs activity: its first task fails
// after it began writing.
type LongKindWorkflow struct {
	workflow.Defaults[LongKindWorkflowArgs, int]
}

func (LongKindWorkflow) Run(ctx workflow.Context, _ LongKindWorkflowArgs) (int, error) {
	return workflow.ExecuteActivity[int](ctx, LongKindArgs{}, nil).Get(ctx)
}

// burst calls start for 0..n-1, all at once.
func burst(n int, start func(i int) (*client.Run, error)) ([]*client.Run, []error) {
	runs, errs := make([]*client.Run, n), make([]error, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-gate
			runs[i], errs[i] = start(i)
		})
	}
	close(gate)
	wg.Wait()
	return runs, errs
}

// groupedBurst runs bursts of n starts, checking each with check, until
// check reports that some of a burst's starts shared a transaction (at most
// five bursts: whether concurrent starts form a group depends on how they
// are scheduled). It returns the runs of every burst.
func groupedBurst(t *testing.T, n int, start func(i int) (*client.Run, error), check func([]*client.Run, []error) bool) []*client.Run {
	t.Helper()
	var all []*client.Run
	for range 5 {
		runs, errs := burst(n, start)
		all = append(all, runs...)
		if check(runs, errs) {
			return all
		}
	}
	require.Fail(t, "no burst of starts shared a transaction in five tries")
	return nil
}

// TestStartGroups: eager starts made at once are grouped into shared
// transactions (their runs share an xmin) and each returns what it would
// alone: a run whose first task ran in the start, or the refusal or replay
// its lookup found; a start that the group cannot decide runs alone.
func TestStartGroups(t *testing.T) {
	t.Parallel()
	eager := func(workflowID, requestID string) *client.StartOpts {
		return &client.StartOpts{EagerStart: true, RequestID: requestID, WorkflowID: workflowID}
	}
	transactions := func(ctx context.Context, t *testing.T, b *testBundle, runs []*client.Run) int {
		t.Helper()
		ids := make([]uuid.UUID, 0, len(runs))
		for _, r := range runs {
			if r != nil && r.Created {
				ids = append(ids, r.RunID)
			}
		}
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(DISTINCT xmin::text) FROM "+b.names.Run+" WHERE run_id = ANY($1)", ids).Scan(&n))
		return n
	}

	t.Run("BurstInGroups", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWorker(ctx, t, b, nil)

		const n = 40
		runs := groupedBurst(t, n, func(i int) (*client.Run, error) {
			return b.client.Start(ctx, OrderArgs{ID: fmt.Sprint(i), Cents: []int64{1, 2}}, eager("", ""))
		}, func(runs []*client.Run, errs []error) bool {
			for i := range runs {
				require.NoError(t, errs[i])
				require.True(t, runs[i].Created)
				require.Equal(t, int64(1), runs[i].Generation)
			}
			return transactions(ctx, t, b, runs) < len(runs)
		})
		for _, run := range runs {
			receipt, err := getWithin[Receipt](ctx, t, run)
			require.NoError(t, err)
			require.Equal(t, int64(3), receipt.Total)
			require.Zero(t, taskJobs(ctx, t, b, run.RunID.String()), "the first task ran in the start")
		}
	})

	// Callers racing on ten workflow IDs, three each, two of them with one
	// request ID: one run per ID, the same request replays it, the other is
	// refused, and no refused start took a generation.
	t.Run("RacingStartsOfOneWorkflowID", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWith(ctx, t, b, func(w *worker.Worker) { worker.AddWorkflow(w, &SumWorkflow{}) })

		const ids, callers = 10, 3
		runs, errs := burst(ids*callers, func(i int) (*client.Run, error) {
			requestID := "same"
			if i%callers == 2 {
				requestID = "other"
			}
			return b.client.Start(ctx, SumArgs{TimeoutSeconds: 3600}, eager(fmt.Sprint("race-", i/callers), requestID))
		})
		for id := range ids {
			var created *client.Run
			for c := range callers {
				if run := runs[id*callers+c]; errs[id*callers+c] == nil && run.Created {
					require.Nil(t, created, "one run per workflow ID")
					created = run
				}
			}
			require.NotNil(t, created)
			for c := range callers {
				run, err := runs[id*callers+c], errs[id*callers+c]
				var started *client.WorkflowAlreadyStartedError
				switch {
				case err == nil:
					require.Equal(t, created.RunID, run.RunID, "a replay returns the run")
				case errors.As(err, &started):
					require.Equal(t, created.RunID, started.RunID)
				default:
					require.NoError(t, err)
				}
			}
			var runCount, lastGeneration int
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+b.names.Run+" WHERE workflow_id = $1),"+
				" (SELECT last_generation FROM "+b.names.Workflow+" WHERE workflow_id = $1)", fmt.Sprint("race-", id)).
				Scan(&runCount, &lastGeneration))
			require.Equal(t, 1, runCount)
			require.Equal(t, 1, lastGeneration, "no refused start took a generation")
			require.NoError(t, b.client.Terminate(ctx, created.WorkflowID, created.RunID, "done"))
		}
	})

	// A first task that fails in its group, before writing, goes through
	// River as in a start alone, with its failed attempt.
	t.Run("FailedTaskGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWith(ctx, t, b, func(w *worker.Worker) { worker.AddWorkflow(w, &FlakyStartWorkflow{}) })

		const n = 20
		runs := groupedBurst(t, n, func(int) (*client.Run, error) {
			return b.client.Start(ctx, FlakyStartArgs{}, eager("", ""))
		}, func(runs []*client.Run, errs []error) bool {
			for i := range runs {
				require.NoError(t, errs[i], "a first task failing in the start does not fail the start")
			}
			return transactions(ctx, t, b, runs) < len(runs)
		})
		for _, run := range runs {
			got, err := getWithin[int](ctx, t, run)
			require.NoError(t, err)
			require.Equal(t, 2, got, "River ran the task again, as attempt 2")
			f, ok := firstTaskOf(ctx, t, b, run.RunID.String())
			require.True(t, ok, "the failed task was queued through River")
			require.Equal(t, firstTask{attempt: 2, fetched: true, errors: 1, state: "completed"}, f)
		}
	})

	// A first task that starts a child would wait for the child's start lock
	// while its group holds others: in a group it is declined, and goes
	// through River (no failed attempt); every parent gets its children.
	t.Run("ChildStartingTaskGoesThroughRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWith(ctx, t, b, func(w *worker.Worker) {
			worker.AddWorkflow(w, &FulfilWorkflow{})
			worker.AddWorkflow(w, &ShipWorkflow{})
			worker.AddActivity(w, b.charge)
		})

		const n = 20
		runs, errs := burst(n, func(i int) (*client.Run, error) {
			return b.client.Start(ctx, FulfilArgs{Orders: []string{fmt.Sprint("o", i)}}, eager("", ""))
		})
		declined := 0
		for i := range n {
			require.NoError(t, errs[i])
			out, err := getWithin[[]string](ctx, t, runs[i])
			require.NoError(t, err)
			require.Len(t, out, 1)
			require.Contains(t, out[0], "tracking-")
			if f, ok := firstTaskOf(ctx, t, b, runs[i].RunID.String()); ok {
				require.Equal(t, firstTask{attempt: 1, fetched: true, state: "completed"}, f, "declined: no failed attempt")
				declined++
			}
		}
		require.Positive(t, declined, "some starts went in groups, their first tasks through River")
	})

	// A first task that fails after it began writing fails its group, whose
	// starts then run alone: there it is rolled back to its savepoint and
	// queued through River, and the others start as ever.
	t.Run("FailedGroupStartsAlone", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t)
		startWith(ctx, t, b, func(w *worker.Worker) {
			worker.AddWorkflow(w, &LongKindWorkflow{})
			worker.AddWorkflow(w, &SequentialWorkflow{})
			worker.AddActivity(w, b.charge)
		})

		const n = 30
		runs, errs := burst(n, func(i int) (*client.Run, error) {
			if i%10 == 0 {
				return b.client.Start(ctx, LongKindWorkflowArgs{}, eager("", ""))
			}
			return b.client.Start(ctx, OrderArgs{ID: fmt.Sprint(i), Cents: []int64{1}}, eager("", ""))
		})
		for i := range n {
			require.NoError(t, errs[i])
			if i%10 == 0 {
				f, ok := firstTaskOf(ctx, t, b, runs[i].RunID.String())
				require.True(t, ok, "the failed task was queued through River")
				require.Positive(t, f.errors, "with its failed attempt")
				require.NoError(t, b.client.Terminate(ctx, runs[i].WorkflowID, runs[i].RunID, "done"))
				continue
			}
			receipt, err := getWithin[Receipt](ctx, t, runs[i])
			require.NoError(t, err)
			require.Equal(t, int64(1), receipt.Total)
		}
	})
}
