package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/group"
	"github.com/weirhq/weir/internal/lazytx"
	"github.com/weirhq/weir/internal/limit"
	"github.com/weirhq/weir/internal/store"
)

// Group commit of activity outcomes: under load, a worker's activity
// attempts finish faster than Postgres commits their continuations one
// transaction each, and it is the transactions (their BEGIN, COMMIT, WAL
// flush, snapshots and round trips), more than the statements in them, that
// Postgres's CPU goes to. The step committer commits the outcomes that are
// ready together: one transaction locks all of their runs in one round
// trip, runs each outcome's continuation in turn, and sends every
// continuation's last writes with the COMMIT in one more round trip.
//
// Queueing, launching and the fallback alone are internal/group's, keyed
// by run. A lone step takes one round trip when this worker committed its
// run's last step (fromCache: the run's row and history from the cache,
// its lock and check in a guard ahead of its writes and the COMMIT), else
// two (its lock, then its writes with the COMMIT).
//
// What each outcome guarantees holds per run, as it did alone: every run is
// locked before its continuation's writes, and checked to be as its
// continuation read it (the guard, or the lock's read itself), and its
// writes carry its CAS (W4) and its job's fenced completion (F1–F7). A
// group commits all of its outcomes or none: if anything in it fails (a
// refused completion, a moved append point, a deadlock, a continuation's
// own error or panic), every outcome in it runs again alone.
//
// Workflow tasks that River fetched commit in the same groups (taskTx): a
// task's run is locked with the others, its inbox read in the same round
// trip (not taken: a task that leaves the group leaves it as it was) and
// deleted with its writes, and its job's fenced completion rides in them.
// A task whose workflow code fails, before it wrote anything, fails as it
// would alone (stepFailed), without failing the group.
//
// Only plain continuations commit in a group (engine.Step.Alone, groupMember.admit): a continuation
// whose writes all go in its last batch and touch only its own run and jobs.
// One that would write earlier or reach other runs (a timer, a child, a
// cancellation, continue-as-new, a closing run's parent or children), an
// outcome that is not a continuation (its run closed, a task queued), and
// every failure (it locks its job before its run) find out before they wrote
// anything, leave the group (errRunsAlone) and run alone after it. So a group
// locks only its own runs, all in one statement batch in run ID order, and
// no run is in two groups in flight at once: groups do not wait for each
// other, and a group holding its runs never waits for another run.

// stepGroupTimeout bounds a group's transaction: its statements run under
// it, not under any one attempt's context, since one attempt's cancellation
// must not fail the others' writes (its own refusal is the database's: the
// fenced completion).
const stepGroupTimeout = time.Minute

// errRunsAlone is what an outcome's body returns, in a group, before it
// wrote anything, when it cannot commit in the group (it is not a plain
// continuation, see groupMember.admit): the group goes on without it, and it runs
// alone once the group ended.
var errRunsAlone = errors.New("worker: this outcome commits alone")

// stepFailed is what a task's body returns, in a group, when its step
// failed before it wrote anything (its workflow code panicked, say): the
// group goes on without it, and the task fails with err, as it would have
// alone, once the group ended.
type stepFailed struct{ err error }

func (e *stepFailed) Error() string { return e.err.Error() }
func (e *stepFailed) Unwrap() error { return e.err }

// errGroupRolledBack is why the results of an outcome's try in a group
// are dropped when it runs again alone.
var errGroupRolledBack = errors.New("worker: the group of outcomes did not commit")

// groupCommitter commits activity outcomes in groups (see above), one per
// run at a time: a run is held (group.Committer's keys) while an outcome of
// it is in a group in flight, runs again alone, or while a transaction of
// this worker's own on it runs outside any group (hold), so that a
// one-round-trip step (fromCache) reads the cache only when no transaction
// of this worker is writing its run.
type groupCommitter struct {
	w      *Worker
	group  *group.Committer[uuid.UUID, *groupMember]
	states groupStates // of its groups, kept for the next ones

	// Counts, for tests and metrics: groups that committed, outcomes that
	// committed in a group with others, groups rolled back.
	committed  atomic.Int64
	grouped    atomic.Int64
	rolledBack atomic.Int64
	// Steps of one round trip (fromCache) whose guard held, and failed.
	guardHits   atomic.Int64
	guardMisses atomic.Int64
}

// groupMember is one outcome in a group: the run it continues, the
// transaction body that records it (as for recordOutcome), and what the group
// learned for it.
type groupMember struct {
	ctx   context.Context
	runID uuid.UUID
	queue string // a task's job's queue
	fn    func(ctx context.Context, tx pgx.Tx, cont *taskResult) error
	cont  taskResult
	task  bool // a workflow task's job (runTask), which takes the run's inbox
	alone bool // left out of the group's writes: it runs alone
	// err is the step's own failure, which left it out of the group's
	// writes (stepFailed), or its outcome's, once it ran alone.
	err error
	// in is its state in its group's run (groupState); nil outside it.
	in *memberState

	inGroup context.Context // its group's, which its body runs in (memberContext)
}

// memberState is what a group's run learns and keeps for one of its
// members, until the run ends.
type memberState struct {
	// The run's row, locked by the group, and a task's inbox, read under
	// the lock, for deliverOutcome or runTask.
	run   *runRow
	now   time.Time
	inbox []engine.InboxItem
	// How run stands: still to be taken by deliverOutcome or runTask
	// (locked), or the cached one, not locked yet, whose writes start with
	// a guard (guarded); noRun: there is no such run.
	locked, guarded, noRun bool
	// firstTask: its writes are its run's first task's, whose waiting
	// queries the group looks for (Worker.sendLast).
	firstTask bool

	// The continuation's last writes, sent with the group's COMMIT, and
	// the row whose claimed attempts they read (deferLast).
	step    *engine.StepWrites
	rest    *otherWrites
	claimed *runRow

	// What run points to, unless a lone lock read the row (lockRun), and
	// what the step queues its writes in (openWrites): the group's, kept
	// with their room from one run of the group to the next. The history
	// cache keeps a copy of the row (runRow.immutable), never the row.
	row    runRow
	writes stepWrites
}

// groupState is what a group's run makes for its members and drops when
// it ends: their memberStates, their last writes and the lists of them its
// statements and its settle read. It lives for one groupCommitter.run on
// one goroutine (its batches' callbacks run in their SendBatch, its
// completions are told in its settle), so its committer keeps it for its
// next groups (groupStates), emptied and cleared on release so that it
// keeps nothing of a member.
type groupState struct {
	members []*groupMember // in run ID order
	states  []memberState  // by member
	writes  lastWrites

	ids, tasks []uuid.UUID // the runs lockRuns reads, and those of tasks
	firsts     []uuid.UUID // runs of the first tasks written
	queues     []string    // of the fetched tasks committed
}

// groupStates are the states of a committer's groups that ended, kept
// with their room for its next groups: as many as ran at once, each with
// room for the largest group it ran, up to keptMembers members (a larger
// one is dropped). A sync.Pool would drop them at every other garbage
// collection, which in a burst comes every few groups.
type groupStates struct {
	mu   sync.Mutex
	kept []*groupState
}

const keptMembers = 1024

// newGroupState returns a groupState of states for taken, its members'
// states set as a run starts: each member's row, filled in where its run
// is read (lockRuns, fromCache), to be taken.
func newGroupState(states *groupStates, taken []*groupMember) *groupState {
	var g *groupState
	states.mu.Lock()
	if n := len(states.kept); n > 0 {
		g, states.kept = states.kept[n-1], states.kept[:n-1]
	}
	states.mu.Unlock()
	if g == nil {
		g = new(groupState)
	}
	g.members = append(g.members, taken...)
	slices.SortFunc(g.members, func(a, b *groupMember) int { return bytes.Compare(a.runID[:], b.runID[:]) })
	g.states = slices.Grow(g.states, len(taken))[:len(taken)]
	g.writes.grow(len(taken))
	for i, m := range g.members {
		in := &g.states[i]
		*in = memberState{run: &in.row, locked: true, row: runRow{Run: engine.Run{ID: m.runID}}, writes: in.writes}
		m.in = in
	}
	return g
}

// release ends the run of g's members: they leave it (and their results
// its rows), and states keeps g, holding nothing.
func (g *groupState) release(states *groupStates) {
	for _, m := range g.members {
		m.in, m.cont.run = nil, nil
	}
	for i := range g.states {
		in := &g.states[i]
		in.writes.reset(uuid.UUID{})
		*in = memberState{writes: in.writes}
	}
	clear(g.members)
	clear(g.queues)
	g.members, g.states, g.queues = g.members[:0], g.states[:0], g.queues[:0]
	g.ids, g.tasks, g.firsts = g.ids[:0], g.tasks[:0], g.firsts[:0]
	g.writes.reset()
	if cap(g.states) <= keptMembers {
		states.mu.Lock()
		states.kept = append(states.kept, g)
		states.mu.Unlock()
	}
}

func newGroupCommitter(w *Worker, groups *limit.Limiter) *groupCommitter {
	c := &groupCommitter{w: w}
	c.group = group.New(group.Config[uuid.UUID, *groupMember]{
		Limit:  groups,
		Key:    func(m *groupMember) uuid.UUID { return m.runID },
		Commit: c.run,
		Alone: func(_ context.Context, m *groupMember) { // again, in a transaction of its own, its run still held
			c.w.settle(errGroupRolledBack, &m.cont) // frees the eager slots it took
			m.err = c.w.outcomeTxOnce(m.ctx, m.fn)
		},
		HasRoom: func() bool { return limit.PoolHasRoom(w.pool) },
		Go:      w.goroutines.Go,
	})
	return c
}

// takeLocked returns the run's row that the group locked for this member
// (pgx.ErrNoRows if there is no such run), and a task's inbox, once: a
// step that reads its run again must lock it itself.
func (m *groupMember) takeLocked() (run *runRow, now time.Time, inbox []engine.InboxItem, ok bool, err error) {
	if m == nil || m.in == nil || !m.in.locked {
		return nil, time.Time{}, nil, false, nil
	}
	in := m.in
	in.locked = false
	if in.noRun {
		err = pgx.ErrNoRows
	}
	in.run.kept = &in.writes
	return in.run, in.now, in.inbox, true, err
}

// deferLast takes the last writes of a continuation of run (nothing is
// written after them) to be sent with the group's COMMIT; the activities
// they claim are the member's once they did.
func (m *groupMember) deferLast(run *runRow) {
	m.in.step, m.in.rest, m.in.claimed = run.step, run.others, run
}

// commit records an outcome of run runID through fn (as recordOutcome does),
// in a group with others that are ready, or alone if the group fails.
func (c *groupCommitter) commit(ctx context.Context, runID uuid.UUID, fn func(ctx context.Context, tx pgx.Tx, cont *taskResult) error) error {
	return c.do(&groupMember{ctx: ctx, runID: runID, fn: fn})
}

// do commits m, an outcome or a task, as commit does.
func (c *groupCommitter) do(m *groupMember) error {
	_ = c.group.Do(context.Background(), m) // a member waits for its group, whatever its attempt's ctx
	if !m.alone {
		c.w.settle(m.err, &m.cont)
	}
	return m.err
}

// hold marks runID held by a transaction of this worker's own outside any
// group, until release: no group takes an outcome of the run meanwhile.
func (c *groupCommitter) hold(runID uuid.UUID) { c.group.Hold(runID) }

// release ends a hold, and starts a group for outcomes that waited for it.
func (c *groupCommitter) release(runID uuid.UUID) { c.group.Release(runID) }

// run commits one group (outcomes of distinct runs, none held by another),
// and returns how many outcomes it committed and which ones run alone.
func (c *groupCommitter) run(taken []*groupMember) (committed int, alone []bool) {
	ctx, cancel := context.WithTimeout(context.Background(), stepGroupTimeout)
	defer cancel()
	g := newGroupState(&c.states, taken)
	defer g.release(&c.states)
	members, writes := g.members, &g.writes
	err := lazytx.BeginFunc(ctx, c.w.pool, func(tx pgx.Tx) (err error) {
		defer func() {
			if r := recover(); r != nil { // a callback of the last batch, say
				err = fmt.Errorf("worker: a group of outcomes panicked: %v", r)
			}
		}()
		for _, m := range members {
			m.cont.dropCachedRun()
			m.cont, m.err = taskResult{step: m}, nil
		}
		plansSet := false // lockRuns asks for generic plans for the whole transaction
		switch {
		case len(members) == 1 && c.fromCache(members[0]):
			// One round trip: its lock goes with its writes (queueGuard).
		case len(members) == 1 && !members[0].task:
			m := members[0]
			run, now, _, err := c.w.lockRun(ctx, tx, m.runID, false)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			m.in.run, m.in.now, m.in.noRun = run, now, err != nil
		default:
			if err := c.lockRuns(ctx, tx, g); err != nil {
				return err
			}
			plansSet = true
		}
		var noter *taskResult // of a first task written, to notify the query responders
		last := &pgx.Batch{}  // the guards, then the members' writes
		for _, m := range members {
			// An attempt that lost its lease is refused: alone, it fails as
			// it would have, without failing the group. One whose deadline
			// passed while it waited still commits (its lease is checked by
			// the database).
			m.alone = errors.Is(context.Cause(m.ctx), fencing.ErrLeaseLost)
			if m.alone {
				continue
			}
			// The group's statements run under the group's deadline, with
			// the member's values (its attempt, its trace, its logger).
			m.inGroup = ctx
			if err := m.call((*memberContext)(m), tx); err != nil {
				var failed *stepFailed
				switch {
				case errors.Is(err, errRunsAlone):
					m.alone = true
				case errors.As(err, &failed):
					m.err = failed.err
				default:
					return err
				}
				continue
			}
			in := m.in
			in.locked = false
			if in.step == nil && in.rest == nil {
				continue
			}
			if in.guarded {
				c.queueGuard(last, m)
			}
			writes.add(in.step, in.rest)
			if in.firstTask {
				g.firsts, noter = append(g.firsts, m.runID), &m.cont
			}
		}
		if writes.empty() {
			return nil
		}
		c.w.queueLastWrites(last, writes, plansSet)
		if len(g.firsts) > 0 {
			c.w.queueQueriesWaiting(last, g.firsts, noter)
		}
		lazytx.QueueCommit(tx, last)
		return tx.SendBatch(ctx, last).Close()
	})
	return c.settle(ctx, taken, g, err)
}

// settle tells, by member of taken (g's members, as the group took them),
// whether it runs alone after its group ended with err, and lets the
// committed members' runs go on; once the group committed, the fencing
// driver learns that the completions in its last writes did (before the
// members' attempts return).
func (c *groupCommitter) settle(ctx context.Context, taken []*groupMember, g *groupState, err error) (committed int, alone []bool) {
	if errors.Is(err, lazytx.ErrCommittedDespiteCallback) {
		// As in outcomeTxOnce: the outcomes are recorded; what the failed
		// callback should have noted is left to recovery.
		c.w.config.Logger.WarnContext(ctx, "weir: a group of activity outcomes committed, but reading one of its results failed",
			slog.String("error", err.Error()))
		err = nil
	}
	switch {
	case err != nil:
		c.rolledBack.Add(1)
		c.w.config.Logger.DebugContext(ctx, "weir: a group of activity outcomes rolled back; each runs again alone",
			slog.Int("outcomes", len(taken)), slog.String("error", err.Error()))
	default:
		c.committed.Add(1)
		if len(g.writes.completions) > 0 {
			c.w.claims.Committed(g.writes.completions)
		}
	}
	alone = make([]bool, len(taken))
	for i, m := range taken {
		if err != nil || m.alone {
			m.alone, alone[i] = true, true
			m.cont.dropCachedRun() // its rerun replays
			continue
		}
		if m.err != nil {
			continue
		}
		committed++
		if m.task {
			g.queues = append(g.queues, m.queue)
		}
		if m.in.claimed != nil {
			m.cont.eager = m.in.claimed.eager // read with the COMMIT
		}
		// Before the run is let go: the run's next outcome may take the
		// one-round-trip step from the cache (fromCache).
		c.w.commitHistory(&m.cont)
	}
	if committed > 1 {
		c.grouped.Add(int64(committed))
	}
	if len(g.queues) > 0 {
		c.w.refetch(ctx, g.queues) // their River slots free as they return (refetch.go)
	}
	return committed, alone
}

// fromCache sets m up for a step of one round trip, if this worker holds
// the run's history and row (it committed the run's last step): the run as
// cached, live, at the cached append point, with no task queued, at the
// database's estimated time. Its writes then start with a guard that locks
// the run and fails the transaction unless the run is still so
// (queueGuard); if it is not, the step runs again alone, reading the run
// under its lock first, as any step did.
func (c *groupCommitter) fromCache(m *groupMember) bool {
	if m.task {
		return false // its run has a task queued, and an inbox to take
	}
	events, next, cached, ok := c.w.histories.latest(m.runID)
	now, known := c.w.clock.now()
	if !ok || !known || len(events) == 0 {
		return false
	}
	in := m.in
	*in.run = *cached
	in.run.State, in.run.NextEventID, in.run.TaskJobID = "running", next, nil
	in.guarded, in.now = true, now
	if last := events[len(events)-1].Time; last.After(now) {
		in.now = last // history's times never go back
	}
	return true
}

// queueGuard queues, ahead of m's writes, the lock of m's run and the check
// that it is as fromCache assumed: live, at the same append point, no task
// queued. A run that moved fails the batch (and its COMMIT) by a division
// by zero.
func (c *groupCommitter) queueGuard(batch *pgx.Batch, m *groupMember) {
	next := m.in.run.NextEventID
	c.w.store.QueueGuard(batch, m.runID, next).QueryRow(func(row pgx.Row) error {
		var one int
		err := row.Scan(&one)
		if store.IsMovedError(err) {
			c.guardMisses.Add(1)
			c.w.histories.forgetAt(m.runID, next) // moved elsewhere (or closed): what this worker kept of it is stale
			return fmt.Errorf("run %s moved since this worker's last step of it: %w", m.runID, err)
		}
		if err == nil {
			c.guardHits.Add(1)
		}
		return err
	})
}

// lockRuns locks and reads the runs of g's members (sorted by run ID) in
// one statement, in run ID order, as every group does, so that groups
// never wait for each other in a cycle; a member whose run is gone
// gets pgx.ErrNoRows, as a lone lock would. The tasks' inboxes are read in
// one more statement of the same round trip: read, not taken, since a
// member that leaves the group must leave its inbox as it was (a task that
// stays deletes what it took with its writes, engine.StepWrites.Taken).
func (c *groupCommitter) lockRuns(ctx context.Context, tx pgx.Tx, g *groupState) error {
	members := g.members
	for _, m := range members {
		g.ids = append(g.ids, m.runID)
		m.in.noRun = true // until its row is read
		if m.task {
			g.tasks = append(g.tasks, m.runID)
		}
	}
	// The group's whole transaction plans as its last writes do
	// (dbschema.GenericPlansSQL), this statement over an array included.
	batch := &pgx.Batch{}
	batch.Queue(dbschema.GenericPlansSQL)
	known := func(i int) *engine.Run { // as cached: a row that has the same keeps its workflow ID and args
		if run := c.w.histories.row(members[i].runID); run != nil {
			return &run.Run
		}
		return nil
	}
	c.w.store.QueueLockRuns(batch, g.ids, known, func(row engine.Run, now time.Time) error {
		m := memberOf(members, row.ID)
		if m == nil {
			return fmt.Errorf("worker: locking a group's runs returned run %s, not one of them", row.ID)
		}
		*m.in.run, m.in.now, m.in.noRun = runRow{Run: row, scanned: true}, now, false
		c.w.clock.observe(now)
		return nil
	})
	if len(g.tasks) > 0 {
		c.w.store.QueueReadInboxes(batch, g.tasks, func(runID uuid.UUID, item engine.InboxItem) {
			m := memberOf(members, runID)
			m.in.inbox = append(m.in.inbox, item)
		})
	}
	return tx.SendBatch(ctx, batch).Close()
}

// memberOf returns the member of run id among members (sorted by run ID),
// or nil.
func memberOf(members []*groupMember, id uuid.UUID) *groupMember {
	i, ok := slices.BinarySearchFunc(members, id, func(m *groupMember, id uuid.UUID) int { return bytes.Compare(m.runID[:], id[:]) })
	if !ok {
		return nil
	}
	return members[i]
}

// memberContext is a member as the context its body runs in, in its group
// (call): the group's context (inGroup: its deadline, its end) with the
// member's values (ctx: its attempt, its trace, its logger), no timer,
// goroutine or allocation of its own. The group's context has no values
// but its own cancellation's, which contexts derived from a memberContext
// find there.
type memberContext groupMember

func (c *memberContext) Deadline() (time.Time, bool) { return c.inGroup.Deadline() }
func (c *memberContext) Done() <-chan struct{}       { return c.inGroup.Done() }
func (c *memberContext) Err() error                  { return c.inGroup.Err() }

func (c *memberContext) Value(key any) any {
	if v := c.inGroup.Value(key); v != nil {
		return v
	}
	return c.ctx.Value(key)
}

// call runs the member's body in the group's transaction. A panic fails
// the group: alone, the body panics again on its attempt's goroutine, where
// River (or the eager runner) recovers it as it always did.
func (m *groupMember) call(ctx context.Context, tx pgx.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("worker: outcome of run %s panicked in its group: %v", m.runID, r)
		}
	}()
	return m.fn(ctx, tx, &m.cont)
}
