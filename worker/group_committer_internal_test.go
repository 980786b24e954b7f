package worker

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/fencingclaim"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/limit"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

// stepFixture is a worker (not started) whose step committer commits one
// group at a time, and a table that records, per outcome, the transaction
// it committed in.
type stepFixture struct {
	c     *groupCommitter
	pool  *pgxpool.Pool
	table string
}

func newStepFixture(t *testing.T) *stepFixture {
	t.Helper()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	w, err := New(pool, &Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) }) // the goroutines its groups ran on
	table := pgx.Identifier{schema, "step_log"}.Sanitize()
	_, err = pool.Exec(ctx, "CREATE TABLE "+table+" (id text PRIMARY KEY, xid bigint NOT NULL)")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.WithoutCancel(ctx), "DROP TABLE "+table) }) // the schema is reused
	return &stepFixture{c: newGroupCommitter(w, limit.Fixed(1)), pool: pool, table: table}
}

// record is an outcome's body: it writes id in its transaction, and
// id+"/last" among its last writes, which go with the group's COMMIT.
func (f *stepFixture) record(id string, last ...string) func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
	return func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+f.table+" VALUES ($1, txid_current())", id); err != nil {
			return err
		}
		others := &otherWrites{}
		batch := &others.checks
		batch.Queue("INSERT INTO "+f.table+" VALUES ($1, txid_current())", id+"/last")
		for _, sql := range last {
			batch.Queue(sql)
		}
		if cont.step != nil {
			cont.step.deferLast(&runRow{others: others})
			return nil
		}
		return tx.SendBatch(ctx, batch).Close()
	}
}

// xids returns the transaction of every row written, by id.
func (f *stepFixture) xids(t *testing.T) map[string]int64 {
	t.Helper()
	rows, err := f.pool.Query(t.Context(), "SELECT id, xid FROM "+f.table)
	require.NoError(t, err)
	got := map[string]int64{}
	for rows.Next() {
		var (
			id  string
			xid int64
		)
		require.NoError(t, rows.Scan(&id, &xid))
		got[id] = xid
	}
	require.NoError(t, rows.Err())
	return got
}

// hold starts an outcome whose body waits for release, so that the outcomes
// started next queue behind its group; it returns once that body runs.
func (f *stepFixture) hold(t *testing.T, wg *sync.WaitGroup, release <-chan struct{}) {
	t.Helper()
	running := make(chan struct{})
	wg.Go(func() {
		body := f.record("held")
		assertNoError(t, f.c.commit(t.Context(), uuid.New(), func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
			close(running)
			<-release
			return body(ctx, tx, cont)
		}))
	})
	<-running
}

// queued waits until n outcomes wait for a group.
func (f *stepFixture) queued(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		queued, _ := f.c.group.Stats()
		return queued == n
	}, 10*time.Second, time.Millisecond)
}

func assertNoError(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
	}
}

// TestStepCommitterGroupsWhatIsReady: outcomes that arrive while the group
// in flight commits go together in the next group, one per run, each with
// its last writes; an outcome of a run already in the group waits for the
// next one.
func TestStepCommitterGroupsWhatIsReady(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	var wg sync.WaitGroup
	release := make(chan struct{})
	f.hold(t, &wg, release)

	ids := []string{"a", "b", "c", "d", "e"}
	runs := make([]uuid.UUID, len(ids))
	for i, id := range ids {
		runs[i] = uuid.New()
		wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), runs[i], f.record(id))) })
	}
	f.queued(t, len(ids))
	wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), runs[1], f.record("b2"))) }) // b's run again
	f.queued(t, len(ids)+1)
	close(release)
	wg.Wait()

	got := f.xids(t)
	require.Len(t, got, 2*(len(ids)+2))
	for _, id := range ids {
		require.Equal(t, got["a"], got[id], "%s committed with a", id)
		require.Equal(t, got["a"], got[id+"/last"], "%s's last writes committed with it", id)
	}
	require.NotEqual(t, got["held"], got["a"])
	require.NotEqual(t, got["a"], got["b2"], "two outcomes of one run in one group")
	require.Equal(t, got["b2"], got["b2/last"])
	require.Equal(t, int64(3), f.c.committed.Load())
	require.Equal(t, int64(len(ids)), f.c.grouped.Load())
	require.Zero(t, f.c.rolledBack.Load())
}

// TestStepCommitterFailureRunsEachAlone: when anything in a group fails
// (an outcome's body, or its last writes at COMMIT), nothing of the group
// commits and every outcome runs again alone: the others commit once each,
// and only the faulty one fails, with its own error.
func TestStepCommitterFailureRunsEachAlone(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, tc := range []struct {
		name   string
		faulty func(f *stepFixture) func(ctx context.Context, tx pgx.Tx, cont *taskResult) error
		check  func(t *testing.T, err error)
	}{
		{
			name: "Body",
			faulty: func(f *stepFixture) func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
				return func(context.Context, pgx.Tx, *taskResult) error { return boom }
			},
			check: func(t *testing.T, err error) { require.ErrorIs(t, err, boom) },
		},
		{
			name: "LastWrites",
			faulty: func(f *stepFixture) func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
				return f.record("faulty", "SELECT 1 / 0")
			},
			check: func(t *testing.T, err error) {
				var pgErr *pgconn.PgError
				require.ErrorAs(t, err, &pgErr)
				require.Equal(t, "22012", pgErr.Code) // division_by_zero
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newStepFixture(t)
			var wg sync.WaitGroup
			release := make(chan struct{})
			f.hold(t, &wg, release)
			for _, id := range []string{"a", "c"} {
				wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), uuid.New(), f.record(id))) })
			}
			errc := make(chan error, 1)
			wg.Go(func() { errc <- f.c.commit(t.Context(), uuid.New(), tc.faulty(f)) })
			f.queued(t, 3)
			close(release)
			wg.Wait()
			tc.check(t, <-errc)

			got := f.xids(t)
			require.Len(t, got, 6, "held, a and c, each with its last writes; nothing of the faulty one")
			require.NotEqual(t, got["a"], got["c"], "a and c committed alone")
			require.Equal(t, got["a"], got["a/last"])
			require.Equal(t, got["c"], got["c/last"])
			require.Equal(t, int64(1), f.c.rolledBack.Load())
			require.Zero(t, f.c.grouped.Load())
		})
	}
}

// recordingClaims is the fencing driver's claim API, but it queues no
// statement for completions and records the jobs whose completions it was
// told committed.
type recordingClaims struct {
	fencingclaim.Driver

	mu        sync.Mutex
	committed []int64
}

func (r *recordingClaims) QueueCompletions(*pgx.Batch, []fencingclaim.Completion) {}

func (r *recordingClaims) Committed(completions []fencingclaim.Completion) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range completions {
		r.committed = append(r.committed, c.JobID)
	}
}

// TestStepCommitterTellsCommittedCompletions: the fencing driver is told of
// the job completions in a group's last writes once the group committed,
// and never of those of a group that rolled back.
func TestStepCommitterTellsCommittedCompletions(t *testing.T) {
	t.Parallel()
	for _, rollsBack := range []bool{false, true} {
		t.Run(map[bool]string{false: "Commits", true: "RollsBack"}[rollsBack], func(t *testing.T) {
			t.Parallel()
			f := newStepFixture(t)
			claims := &recordingClaims{Driver: f.c.w.claims}
			f.c.w.claims = claims
			// completing records id and, in a group, completes job jobID
			// with its last writes.
			completing := func(id string, jobID int64, last ...string) func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
				body := f.record(id, last...)
				return func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
					if err := body(ctx, tx, cont); err != nil || cont.step == nil {
						return err
					}
					cont.step.in.rest.completions = append(cont.step.in.rest.completions, fencingclaim.Completion{JobID: jobID})
					return nil
				}
			}
			var wg sync.WaitGroup
			release := make(chan struct{})
			f.hold(t, &wg, release)
			wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), uuid.New(), completing("a", 1))) })
			wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), uuid.New(), completing("c", 2))) })
			queued := 2
			if rollsBack {
				wg.Go(func() { _ = f.c.commit(t.Context(), uuid.New(), completing("faulty", 3, "SELECT 1 / 0")) })
				queued++
			}
			f.queued(t, queued)
			close(release)
			wg.Wait()

			claims.mu.Lock()
			defer claims.mu.Unlock()
			if rollsBack {
				require.Equal(t, int64(1), f.c.rolledBack.Load())
				require.Empty(t, claims.committed, "nothing of the group committed")
				return
			}
			require.Equal(t, int64(2), f.c.grouped.Load())
			require.ElementsMatch(t, []int64{1, 2}, claims.committed)
		})
	}
}

// TestAloneTellsCommittedCompletions: a transaction of its own whose last
// writes carry a job's completion (alone) tells the fencing driver of it
// once it committed, and not if it rolled back.
func TestAloneTellsCommittedCompletions(t *testing.T) {
	t.Parallel()
	for _, rollsBack := range []bool{false, true} {
		t.Run(map[bool]string{false: "Commits", true: "RollsBack"}[rollsBack], func(t *testing.T) {
			t.Parallel()
			f := newStepFixture(t)
			w := f.c.w
			claims := &recordingClaims{Driver: w.claims}
			w.claims = claims
			err := w.outcomeTxOnce(t.Context(), func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
				run := &runRow{}
				run.openWrites()
				run.others.completions = append(run.others.completions, fencingclaim.Completion{JobID: 7})
				if rollsBack {
					run.others.checks.Queue("SELECT 1 / 0")
				}
				return alone{commit: true}.applyLast(ctx, tx, w, run, cont, true)
			})
			claims.mu.Lock()
			defer claims.mu.Unlock()
			if rollsBack {
				require.Error(t, err)
				require.Empty(t, claims.committed)
				return
			}
			require.NoError(t, err)
			require.Equal(t, []int64{7}, claims.committed)
		})
	}
}

// TestStepCommitterLostLeaseRunsAlone: an outcome whose attempt lost its
// lease before its group ran is left out of the group, which commits the
// others, and fails alone as it would have; one whose attempt's deadline
// passed while it waited still commits with the group.
func TestStepCommitterLostLeaseRunsAlone(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	var wg sync.WaitGroup
	release := make(chan struct{})
	f.hold(t, &wg, release)
	for _, id := range []string{"a", "c"} {
		wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), uuid.New(), f.record(id))) })
	}
	lost, loseLease := context.WithCancelCause(t.Context())
	errc := make(chan error, 1)
	wg.Go(func() { errc <- f.c.commit(lost, uuid.New(), f.record("lost")) })
	late, cancelLate := context.WithDeadline(t.Context(), time.Now().Add(50*time.Millisecond))
	defer cancelLate()
	wg.Go(func() { assertNoError(t, f.c.commit(late, uuid.New(), f.record("late"))) })
	f.queued(t, 4)
	loseLease(fencing.ErrLeaseLost)
	<-late.Done()
	close(release)
	wg.Wait()
	require.ErrorIs(t, <-errc, context.Canceled)

	got := f.xids(t)
	require.Len(t, got, 8, "held, a, c and late, each with its last writes")
	require.Equal(t, got["a"], got["c"], "a and c committed together")
	require.Equal(t, got["a"], got["late"], "late committed with them")
	require.Equal(t, int64(3), f.c.grouped.Load())
}

// TestStepCommitterLeavesGroupBeforeWriting: an outcome that finds out in
// its group that it must commit alone (errRunsAlone, before it wrote
// anything) leaves the group, which commits the others together, and then
// commits alone.
func TestStepCommitterLeavesGroupBeforeWriting(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	var wg sync.WaitGroup
	release := make(chan struct{})
	f.hold(t, &wg, release)
	for _, id := range []string{"a", "c"} {
		wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), uuid.New(), f.record(id))) })
	}
	record := f.record("alone")
	var tries sync.Map
	wg.Go(func() {
		assertNoError(t, f.c.commit(t.Context(), uuid.New(), func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
			tries.Store(cont.step != nil, true)
			if cont.step != nil {
				return errRunsAlone
			}
			return record(ctx, tx, cont)
		}))
	})
	f.queued(t, 3)
	close(release)
	wg.Wait()

	got := f.xids(t)
	require.Len(t, got, 8)
	require.Equal(t, got["a"], got["c"], "a and c committed together")
	require.NotEqual(t, got["a"], got["alone"])
	require.Equal(t, got["alone"], got["alone/last"])
	_, inGroup := tries.Load(true)
	_, alone := tries.Load(false)
	require.True(t, inGroup && alone, "tried in the group, then alone")
	require.Zero(t, f.c.rolledBack.Load())
}

// TestStepCommitterOneGroupPerRun: an outcome of a run that a group in
// flight holds waits for that group even when another group could start;
// an outcome of another run starts one at once.
func TestStepCommitterOneGroupPerRun(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	f.c = newGroupCommitter(f.c.w, limit.Fixed(2))
	var wg sync.WaitGroup
	release := make(chan struct{})
	run := uuid.New()
	running := make(chan struct{})
	wg.Go(func() {
		body := f.record("held")
		assertNoError(t, f.c.commit(t.Context(), run, func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
			close(running)
			<-release
			return body(ctx, tx, cont)
		}))
	})
	<-running
	wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), run, f.record("same-run"))) })
	f.queued(t, 1)
	require.NoError(t, f.c.commit(t.Context(), uuid.New(), f.record("other-run")), "another run's outcome commits while the group holds the run")
	f.queued(t, 1) // the same run's outcome still waits
	require.NotContains(t, f.xids(t), "same-run")
	close(release)
	wg.Wait()

	got := f.xids(t)
	require.Len(t, got, 6)
	require.NotEqual(t, got["held"], got["same-run"])
}

type stepGroupActArgs struct {
	N int `json:"n"`
}

func (stepGroupActArgs) Kind() string { return "step_group_act" }

type stepGroupAct struct {
	activity.Defaults[stepGroupActArgs, int]
}

func (*stepGroupAct) Execute(_ context.Context, args stepGroupActArgs) (int, error) {
	return args.N + 1, nil
}

type stepGroupArgs struct {
	N int `json:"n"`
}

func (stepGroupArgs) Kind() string { return "step_group_wf" }

// stepGroupWorkflow runs two activities at once, then a third on their sum:
// two outcomes of one run can be ready together.
type stepGroupWorkflow struct {
	workflow.Defaults[stepGroupArgs, int]
}

func (*stepGroupWorkflow) Run(ctx workflow.Context, args stepGroupArgs) (int, error) {
	a := workflow.ExecuteActivity[int](ctx, stepGroupActArgs(args), nil)
	b := workflow.ExecuteActivity[int](ctx, stepGroupActArgs{N: 10 * args.N}, nil)
	x, err := a.Get(ctx)
	if err != nil {
		return 0, err
	}
	y, err := b.Get(ctx)
	if err != nil {
		return 0, err
	}
	return workflow.ExecuteActivity[int](ctx, stepGroupActArgs{N: x + y}, nil).Get(ctx)
}

// startStepWorker starts a worker whose step committer commits groups
// groups at once, running stepGroupWorkflow, its activity and the extra
// workflow if any, and a client on its schema.
func startStepWorker(t *testing.T, groups int, extra workflow.Workflow[stepFamilyArgs, int]) (*Worker, *client.Client, *pgxpool.Pool, string) {
	t.Helper()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	w, err := New(pool, &Config{Schema: schema})
	require.NoError(t, err)
	w.stepGroups = limit.Fixed(groups)
	AddWorkflow(w, &stepGroupWorkflow{})
	if extra != nil {
		AddWorkflow(w, extra)
	}
	AddActivity(w, &stepGroupAct{})
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) })
	c, err := client.New(pool, &client.Config{Schema: schema, EagerStarter: w})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return w, c, pool, schema
}

// TestStepGroupsContinueRuns: a burst of workflows, whose activities'
// outcomes the worker commits in groups (one group at a time here, so that
// groups fill), all complete with the right result and a history that has
// every activity scheduled and completed once, in event order.
func TestStepGroupsContinueRuns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	w, c, pool, schema := startStepWorker(t, 1, nil)
	var err error

	const n = 60
	runs := make([]*client.Run, n)
	for i := range runs {
		runs[i], err = c.Start(ctx, stepGroupArgs{N: i}, &client.StartOpts{EagerStart: true})
		require.NoError(t, err)
	}
	for i, run := range runs {
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		got, err := client.GetResult[int](waitCtx, run)
		cancel()
		require.NoError(t, err)
		require.Equal(t, i+1+10*i+1+1, got, "workflow %d", i)
	}

	names := dbschema.New(schema)
	var bad int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT run_id FROM "+names.History+" GROUP BY run_id"+
		" HAVING count(*) FILTER (WHERE type = 'ActivityScheduled') <> 3 OR count(*) FILTER (WHERE type = 'ActivityCompleted') <> 3"+
		" OR count(*) FILTER (WHERE type = 'WorkflowCompleted') <> 1 OR max(event_id) <> count(*)) x").Scan(&bad))
	require.Zero(t, bad, "runs whose history is not each activity scheduled and completed once, numbered without gaps")
	require.Positive(t, w.steps.grouped.Load(), "no outcomes committed in groups")
	require.Zero(t, w.steps.rolledBack.Load(), "groups rolled back")
	t.Logf("groups committed %d, outcomes in groups %d, groups rolled back %d", w.steps.committed.Load(), w.steps.grouped.Load(), w.steps.rolledBack.Load())
}

// TestStepCommitterPanicRunsAlone: a body that panics in a group fails the
// group, not the process; alone, it panics on its own goroutine.
func TestStepCommitterPanicRunsAlone(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	var wg sync.WaitGroup
	release := make(chan struct{})
	f.hold(t, &wg, release)
	wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), uuid.New(), f.record("a"))) })
	panicked := make(chan any, 1)
	wg.Go(func() {
		defer func() { panicked <- recover() }()
		_ = f.c.commit(t.Context(), uuid.New(), func(context.Context, pgx.Tx, *taskResult) error { panic("boom") })
	})
	f.queued(t, 2)
	close(release)
	wg.Wait()
	require.Equal(t, "boom", <-panicked)
	require.Contains(t, f.xids(t), "a")
	require.Equal(t, int64(1), f.c.rolledBack.Load())
}

type stepFamilyArgs struct {
	Children int `json:"children"`
}

func (stepFamilyArgs) Kind() string { return "step_family_wf" }

// stepFamilyWorkflow starts its children (stepGroupWorkflow) at once, sleeps
// a little, and sums their results: children close (telling their parent)
// while other runs' outcomes commit in groups.
type stepFamilyWorkflow struct {
	workflow.Defaults[stepFamilyArgs, int]
}

func (*stepFamilyWorkflow) Run(ctx workflow.Context, args stepFamilyArgs) (int, error) {
	children := make([]workflow.Future[int], args.Children)
	for i := range children {
		children[i] = workflow.ExecuteChildWorkflow[int](ctx, stepGroupArgs{N: i}, nil)
	}
	if err := workflow.Sleep(ctx, 10*time.Millisecond); err != nil {
		return 0, err
	}
	sum := 0
	for _, child := range children {
		n, err := child.Get(ctx)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// TestStepGroupsWithFamilies: fan-out parents whose children complete
// concurrently, two groups in flight: the outcomes that reach other runs
// (a child closing tells its parent) commit alone, so no group deadlocks or
// rolls back, and every family completes with the right sum.
func TestStepGroupsWithFamilies(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	w, c, _, _ := startStepWorker(t, 2, &stepFamilyWorkflow{})
	var err error

	const families, children = 6, 8
	want := 0
	for i := range children {
		want += 11*i + 3 // stepGroupWorkflow: (i+1) + (10i+1) + 1
	}
	runs := make([]*client.Run, families)
	for i := range runs {
		runs[i], err = c.Start(ctx, stepFamilyArgs{Children: children}, &client.StartOpts{EagerStart: true})
		require.NoError(t, err)
	}
	for i, run := range runs {
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		got, err := client.GetResult[int](waitCtx, run)
		cancel()
		require.NoError(t, err)
		require.Equal(t, want, got, "family %d", i)
	}
	require.Positive(t, w.steps.grouped.Load(), "no outcomes committed in groups")
	require.Zero(t, w.steps.rolledBack.Load(), "groups rolled back")
}

// stepGateArgs is an activity that waits for its test's gate.
type stepGateArgs struct{}

func (stepGateArgs) Kind() string { return "step_gate_act" }

type stepGateAct struct {
	activity.Defaults[stepGateArgs, int]
	started chan struct{}
	gate    chan struct{}
}

func (a *stepGateAct) Execute(ctx context.Context, _ stepGateArgs) (int, error) {
	a.started <- struct{}{}
	select {
	case <-a.gate:
		return 7, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// stepNudge is a signal no workflow handles.
type stepNudge struct{}

func (stepNudge) Kind() string { return "step_nudge" }

type stepGateWfArgs struct{}

func (stepGateWfArgs) Kind() string { return "step_gate_wf" }

// stepGateWorkflow runs a quick activity, then the gated one.
type stepGateWorkflow struct {
	workflow.Defaults[stepGateWfArgs, int]
}

func (*stepGateWorkflow) Run(ctx workflow.Context, _ stepGateWfArgs) (int, error) {
	n, err := workflow.ExecuteActivity[int](ctx, stepGroupActArgs{N: 1}, nil).Get(ctx)
	if err != nil {
		return 0, err
	}
	m, err := workflow.ExecuteActivity[int](ctx, stepGateArgs{}, nil).Get(ctx)
	return n + m, err
}

// TestStepOfOneRoundTrip: a lone outcome of a run whose last step this
// worker committed takes one round trip, its run's lock and check going
// with its writes (guard); when the run is not as the worker's cache says
// (here it is put back to before a signal on purpose, as if another worker
// had taken the signal's task), the guard fails the step, which runs again alone, and
// the workflow completes as it should.
func TestStepOfOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	w, err := New(pool, &Config{Schema: schema})
	require.NoError(t, err)
	gate := &stepGateAct{started: make(chan struct{}, 1), gate: make(chan struct{})}
	var open sync.Once
	t.Cleanup(func() { open.Do(func() { close(gate.gate) }) }) // before Stop, which waits for the attempt
	AddWorkflow(w, &stepGroupWorkflow{})
	AddWorkflow(w, &stepGateWorkflow{})
	AddActivity(w, &stepGroupAct{})
	AddActivity(w, gate)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.WithoutCancel(ctx))) })
	c, err := client.New(pool, &client.Config{Schema: schema, EagerStarter: w})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	// One workflow at a time: every outcome arrives alone, and the run's
	// first task (in the start) and each step leave the cache current.
	const n = 5
	for i := range n {
		run, err := c.Start(ctx, stepGroupArgs{N: i}, &client.StartOpts{EagerStart: true})
		require.NoError(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
		got, err := client.GetResult[int](waitCtx, run)
		cancel()
		require.NoError(t, err)
		require.Equal(t, 11*i+3, got)
	}
	require.GreaterOrEqual(t, w.steps.guardHits.Load(), int64(n), "outcomes that took one round trip")
	require.Zero(t, w.steps.guardMisses.Load())

	run, err := c.Start(ctx, stepGateWfArgs{}, &client.StartOpts{EagerStart: true})
	require.NoError(t, err)
	<-gate.started
	last, next, cached, ok := w.histories.latest(run.RunID)
	require.True(t, ok, "the run's history and row are cached")
	require.Equal(t, last[len(last)-1].ID+1, next)
	events, _, ok := w.histories.get(run.RunID, next)
	require.True(t, ok)
	// A signal moves the run on while the activity runs; then the cache is
	// put back to before it, as if another worker had taken the signal's
	// task.
	require.NoError(t, c.Signal(ctx, run.WorkflowID, run.RunID, stepNudge{}, nil))
	require.Eventually(t, func() bool {
		_, moved, _, ok := w.histories.latest(run.RunID)
		return ok && moved > next
	}, 30*time.Second, 10*time.Millisecond, "the signal's task never committed here")
	w.histories.forget(run.RunID) // put keeps the longer history it holds
	w.histories.put(run.RunID, events, cached, nil, nil, 0)
	open.Do(func() { close(gate.gate) })
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	got, err := client.GetResult[int](waitCtx, run)
	cancel()
	require.NoError(t, err)
	require.Equal(t, 2+7, got)
	require.Equal(t, int64(1), w.steps.guardMisses.Load(), "the stale step was refused by its guard")

	names := dbschema.New(schema)
	var bad int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM (SELECT run_id FROM "+names.History+" GROUP BY run_id"+
		" HAVING max(event_id) <> count(*) OR count(*) FILTER (WHERE type = 'WorkflowCompleted') <> 1) x").Scan(&bad))
	require.Zero(t, bad, "runs whose history has a gap or no single completion")
}

// TestStepCommitterWaitsForHeldRun: while a transaction of the worker's own
// holds a run outside any group (a workflow task, an outcome running
// alone), no group takes an outcome of that run; other runs' outcomes go
// on. Once released, the waiting outcome commits.
func TestStepCommitterWaitsForHeldRun(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	held, other := uuid.New(), uuid.New()
	f.c.hold(held)
	var wg sync.WaitGroup
	wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), held, f.record("waits"))) })
	f.queued(t, 1)
	require.NoError(t, f.c.commit(t.Context(), other, f.record("goes")), "another run's outcome commits meanwhile")
	f.queued(t, 1)
	require.NotContains(t, f.xids(t), "waits")
	f.c.release(held)
	wg.Wait()
	require.Contains(t, f.xids(t), "waits/last")
	requireNoHolds(t, f.c)
}

// TestStepCommitterRerunHoldsRun: an outcome that left its group runs
// again alone while its run stays held, so the run's next outcome does not
// commit in a group beside that rerun (its one-round-trip step would read a
// history the rerun is moving); it commits once the rerun settled.
func TestStepCommitterRerunHoldsRun(t *testing.T) {
	t.Parallel()
	f := newStepFixture(t)
	run := uuid.New()
	rerunning, finish := make(chan struct{}), make(chan struct{})
	record := f.record("first")
	var wg sync.WaitGroup
	wg.Go(func() {
		assertNoError(t, f.c.commit(t.Context(), run, func(ctx context.Context, tx pgx.Tx, cont *taskResult) error {
			if cont.step != nil {
				return errRunsAlone
			}
			close(rerunning)
			<-finish
			return record(ctx, tx, cont)
		}))
	})
	<-rerunning
	wg.Go(func() { assertNoError(t, f.c.commit(t.Context(), run, f.record("next"))) })
	f.queued(t, 1)
	time.Sleep(50 * time.Millisecond) // a group would have started by now
	f.queued(t, 1)
	close(finish)
	wg.Wait()
	got := f.xids(t)
	require.Contains(t, got, "first")
	require.Contains(t, got, "next/last")
	requireNoHolds(t, f.c)
}

// TestHistoryCacheKeepsLongerHistory: a transaction that committed earlier
// but settles later does not put back a shorter history of the run.
func TestHistoryCacheKeepsLongerHistory(t *testing.T) {
	t.Parallel()
	c := newHistoryCache(MaxCachedRunsDefault)
	run := uuid.New()
	row := &runRow{Run: engine.Run{ID: run}, scanned: true}
	long := []history.Event{{ID: 1}, {ID: 2}, {ID: 3}}
	c.put(run, one(long), row, nil, nil, 0)
	c.put(run, one(long[:2]), row, nil, nil, 0)
	events, next, _, ok := c.latest(run)
	require.True(t, ok)
	require.Equal(t, int64(4), next)
	require.Len(t, events, 3)
	_, _, ok = c.get(run, 3)
	require.False(t, ok, "the shorter history is not served")
	c.forget(run)
	c.put(run, one(long[:2]), row, nil, nil, 0)
	_, next, _, ok = c.latest(run)
	require.True(t, ok)
	require.Equal(t, int64(3), next, "after forget, any history goes in")
}

// requireNoHolds waits until c holds no run: a group's goroutine lets its
// runs go just after it told its members.
func requireNoHolds(t *testing.T, c *groupCommitter) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, held := c.group.Stats()
		return held == 0
	}, 10*time.Second, time.Millisecond, "every hold released")
}

// TestGroupStateReleaseHoldsNothing: a group's state has its members in
// run ID order, each pointing to its state; once released, it is empty and
// holds nothing of its members (their rows, their writes, their claims'
// callbacks, their completions' contexts), its members and their results
// leave it, and its committer keeps it for its next group, with room for
// a group's members and their steps' writes, unless it had room for more
// than keptMembers.
func TestGroupStateReleaseHoldsNothing(t *testing.T) {
	t.Parallel()
	members := []*groupMember{{runID: uuid.UUID{2}}, {runID: uuid.UUID{1}}}
	states := new(groupStates)
	g := newGroupState(states, members)
	require.Len(t, g.states, 2)
	require.Len(t, g.members, 2)
	require.True(t, slices.IsSortedFunc(g.members, func(a, b *groupMember) int { return bytes.Compare(a.runID[:], b.runID[:]) }))
	require.GreaterOrEqual(t, cap(g.writes.claims), 2)
	require.GreaterOrEqual(t, cap(g.writes.completions), 2)
	for _, m := range members {
		require.Equal(t, m.runID, m.in.run.ID)
		require.True(t, m.in.locked)
	}
	// A member's step queues in its state's writes (openWrites), once.
	run, _, _, locked, err := members[0].takeLocked()
	require.NoError(t, err)
	require.True(t, locked)
	run.Args, members[0].cont.run = []byte("{}"), run
	writes := run.openWrites()
	require.Same(t, &members[0].in.writes, writes)
	require.Same(t, &members[0].in.writes.step, run.step)
	st, err := engine.Decide(engine.StepParams{Run: engine.Run{ID: run.ID, NextEventID: 1},
		Outcome: replay.Outcome{Completed: true, Result: []byte("1")}, Room: &writes.cas})
	require.NoError(t, err)
	run.step.CAS = st.Writes.CAS
	run.step.Activities = append(run.step.Activities, engine.Activity{Kind: "k"})
	run.step.Taken = append(run.step.Taken, 1)
	others := run.others
	others.claims = append(others.claims, fencingclaim.Request{Params: fencingclaim.Params{ID: 1}, Done: func(*fencingclaim.Claim) {}})
	others.completions = append(others.completions, fencingclaim.Completion{JobID: 1, Ctx: t.Context()})
	others.checks.Queue("SELECT 1")
	l := &g.writes
	l.add(run.step, others)
	l.add(nil, others)
	g.queues = append(g.queues, "q")
	g.release(states)
	for _, m := range members {
		require.Nil(t, m.in)
		require.Nil(t, m.cont.run)
	}
	require.True(t, l.empty())
	for _, s := range g.states[:cap(g.states)] {
		w := s.writes
		require.Equal(t, memberState{writes: w}, s, "nothing but its writes' room")
		require.Zero(t, w.step.RunID)
		require.Zero(t, w.step.Events)
		require.Zero(t, w.cas)
		for _, a := range w.step.Activities[:cap(w.step.Activities)] {
			require.Zero(t, a)
		}
		for _, c := range w.others.claims[:cap(w.others.claims)] {
			require.Zero(t, c.Params)
			require.Nil(t, c.Done)
		}
		for _, c := range w.others.completions[:cap(w.others.completions)] {
			require.Zero(t, c)
		}
		for _, q := range w.others.checks.QueuedQueries[:cap(w.others.checks.QueuedQueries)] {
			require.Nil(t, q)
		}
	}
	ran := g.states[:2]
	kept := ran[slices.IndexFunc(ran, func(s memberState) bool { return cap(s.writes.step.Activities) > 0 })].writes
	require.Positive(t, cap(kept.others.claims), "a state's writes keep their room")
	require.Empty(t, kept.step.Activities)
	require.Equal(t, []*groupState{g}, states.kept, "kept for the next group")
	require.Same(t, g, newGroupState(states, members))
	require.Empty(t, states.kept)
	g.release(states)
	large := make([]*groupMember, keptMembers+1)
	for i := range large {
		large[i] = &groupMember{runID: uuid.UUID{byte(i), byte(i >> 8)}}
	}
	g = newGroupState(states, large) // the kept state, grown
	require.Empty(t, states.kept)
	g.release(states)
	require.Empty(t, states.kept, "a state with room for more than keptMembers is not kept")
	for _, m := range g.members[:cap(g.members)] {
		require.Nil(t, m)
	}
	for _, q := range g.queues[:cap(g.queues)] {
		require.Empty(t, q)
	}
	for _, s := range l.steps[:cap(l.steps)] {
		require.Nil(t, s)
	}
	for _, c := range l.claims[:cap(l.claims)] {
		require.Zero(t, c.Params)
		require.Nil(t, c.Done)
	}
	for _, c := range l.completions[:cap(l.completions)] {
		require.Zero(t, c)
	}
	for _, q := range l.checks.QueuedQueries[:cap(l.checks.QueuedQueries)] {
		require.Nil(t, q)
	}
}

// TestMemberContext: a member's body runs in its group's deadline and end,
// with the member's values, and what derives from it ends with the group.
func TestMemberContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	deadline := time.Now().Add(time.Hour)
	group, cancel := context.WithDeadline(context.Background(), deadline)
	m := &groupMember{ctx: context.WithValue(t.Context(), key{}, "member"), inGroup: group}
	var ctx context.Context = (*memberContext)(m)
	require.Equal(t, "member", ctx.Value(key{}))
	at, ok := ctx.Deadline()
	require.True(t, ok)
	require.Equal(t, deadline, at)
	derived, stop := context.WithCancel(ctx)
	defer stop()
	require.NoError(t, ctx.Err())
	cancel()
	<-ctx.Done()
	<-derived.Done()
	require.ErrorIs(t, ctx.Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(derived), context.Canceled)
}
