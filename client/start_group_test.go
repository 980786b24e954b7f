package client_test

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
)

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

// TestStartGroupsQueueTasks: starts made at once by a client linked to no
// worker share transactions (their runs share an xmin, read before any
// worker touched them); each run names its first task's job, and a worker
// started afterwards runs it. Racing starts of one workflow ID keep one
// run and one generation, and replays and refusals answer as a start
// alone does.
func TestStartGroupsQueueTasks(t *testing.T) {
	t.Parallel()

	t.Run("BurstInGroups", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)

		const n = 40
		var all []*client.Run
		for try := 0; ; try++ {
			require.Less(t, try, 5, "no burst of starts shared a transaction in five tries")
			runs, errs := burst(n, func(i int) (*client.Run, error) {
				return b.client.Start(ctx, orderArgs{ID: fmt.Sprint(i), Cents: 7}, nil)
			})
			ids := make([]uuid.UUID, n)
			for i := range runs {
				require.NoError(t, errs[i])
				require.True(t, runs[i].Created)
				require.Equal(t, int64(1), runs[i].Generation)
				ids[i] = runs[i].RunID
			}
			all = append(all, runs...)
			var transactions, named int
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(DISTINCT r.xmin::text),"+
				" count(*) FILTER (WHERE j.args->>'run_id' = r.run_id::text AND j.state = 'available')"+
				" FROM "+b.names.Run+" r LEFT JOIN "+b.names.RiverJob+" j ON j.id = r.task_job_id WHERE r.run_id = ANY($1)", ids).
				Scan(&transactions, &named))
			require.Equal(t, n, named, "each run names its first task's job")
			if transactions < n {
				break
			}
		}

		startOpsWorker(ctx, t, b)
		for _, run := range all {
			got, err := getResult[receipt](ctx, t, run)
			require.NoError(t, err)
			require.Equal(t, int64(7), got.Charged)
		}
	})

	// A start that Postgres refuses (a workflow ID it cannot store) fails
	// its group, whose starts then run alone: it fails there, writing
	// nothing, and the others start as ever.
	t.Run("FailedGroupStartsAlone", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)

		const n = 30
		runs, errs := burst(n, func(i int) (*client.Run, error) {
			opts := &client.StartOpts{WorkflowID: fmt.Sprint("failed-", i)}
			if i%10 == 0 {
				opts.WorkflowID += "\x00"
			}
			return b.client.Start(ctx, orderArgs{ID: fmt.Sprint(i)}, opts)
		})
		for i := range n {
			if i%10 == 0 {
				require.Error(t, errs[i])
				continue
			}
			var count int
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.Run+" WHERE workflow_id = $1", fmt.Sprint("failed-", i)).Scan(&count))
			require.NoError(t, errs[i])
			require.True(t, runs[i].Created)
			require.Equal(t, 1, count)
		}
		var runsIn, jobsIn int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.Run+" WHERE workflow_id LIKE 'failed-%'").Scan(&runsIn))
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.names.RiverJob).Scan(&jobsIn))
		require.Equal(t, []int{n - n/10, n - n/10}, []int{runsIn, jobsIn}, "the refused starts wrote nothing")
	})

	// A queue River would not fetch from is refused before anything is sent.
	t.Run("InvalidQueue", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		for _, queue := range []string{"not a queue!", "Upper", "a__b", "-a", strings.Repeat("q", 65)} {
			_, err := b.client.Start(ctx, orderArgs{ID: "q"}, &client.StartOpts{Queue: queue})
			require.ErrorContains(t, err, "invalid queue", queue)
		}
		_, err := b.client.Start(ctx, orderArgs{ID: "q"}, &client.StartOpts{Queue: "a_b-c|d"})
		require.NoError(t, err)
	})

	// Callers racing on ten workflow IDs, three each, two of them with one
	// request ID: one run per ID, the same request replays it, the other is
	// refused, and no refused start took a generation. Then, the runs
	// terminated, a burst again: the winning request replays its run, the
	// same request with other args conflicts, and a new one is refused by
	// IDReuseRejectDuplicate.
	t.Run("RacingStartsOfOneWorkflowID", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)

		const ids, callers = 10, 3
		requestOf := func(i int) string { return []string{"same", "same", "other"}[i%callers] }
		runs, errs := burst(ids*callers, func(i int) (*client.Run, error) {
			return b.client.Start(ctx, orderArgs{ID: "race"}, &client.StartOpts{WorkflowID: fmt.Sprint("race-", i/callers), RequestID: requestOf(i)})
		})
		created := make([]*client.Run, ids)
		createdBy := make([]string, ids)
		for id := range ids {
			for c := range callers {
				if run := runs[id*callers+c]; errs[id*callers+c] == nil && run.Created {
					require.Nil(t, created[id], "one run per workflow ID")
					created[id], createdBy[id] = run, requestOf(id*callers+c)
				}
			}
			require.NotNil(t, created[id])
			for c := range callers {
				run, err := runs[id*callers+c], errs[id*callers+c]
				var started *client.WorkflowAlreadyStartedError
				switch {
				case err == nil:
					require.Equal(t, created[id].RunID, run.RunID, "a replay returns the run")
				case errors.As(err, &started):
					require.Equal(t, created[id].RunID, started.RunID)
				default:
					require.NoError(t, err)
				}
			}
			require.Equal(t, 1, lastGeneration(ctx, t, b, created[id].WorkflowID), "no refused start took a generation")
			require.NoError(t, b.client.Terminate(ctx, created[id].WorkflowID, created[id].RunID, "done"))
		}

		runs, errs = burst(ids*callers, func(i int) (*client.Run, error) {
			id := i / callers
			opts := &client.StartOpts{WorkflowID: created[id].WorkflowID, RequestID: createdBy[id]}
			switch i % callers {
			case 1:
				return b.client.Start(ctx, orderArgs{ID: "race", Cents: 1}, opts)
			case 2:
				opts.RequestID, opts.IDReusePolicy = "new", client.IDReuseRejectDuplicate
			}
			return b.client.Start(ctx, orderArgs{ID: "race"}, opts)
		})
		for id := range ids {
			replay := runs[id*callers]
			require.NoError(t, errs[id*callers])
			require.False(t, replay.Created)
			require.Equal(t, created[id].RunID, replay.RunID, "the request replays its run")
			var conflict *client.RequestConflictError
			require.ErrorAs(t, errs[id*callers+1], &conflict)
			require.Equal(t, created[id].RunID, conflict.RunID)
			var reuse *client.WorkflowIDReuseError
			require.ErrorAs(t, errs[id*callers+2], &reuse)
			require.Equal(t, created[id].RunID, reuse.RunID)
			require.Equal(t, 1, lastGeneration(ctx, t, b, created[id].WorkflowID), "no refused start took a generation")
		}
	})
}

// lastGeneration is the last generation the workflow ID's starts took.
func lastGeneration(ctx context.Context, t *testing.T, b *testBundle, workflowID string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT last_generation FROM "+b.names.Workflow+" WHERE workflow_id = $1", workflowID).Scan(&n))
	return n
}
