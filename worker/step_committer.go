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
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/engine"
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
// It never waits to fill a group: an outcome that arrives while fewer
// groups than the limit (groups) are in flight starts one at once, alone if it must. A
// lone step takes one round trip when this worker committed its run's last
// step (fromCache: the run's row and history from the cache, its lock and
// check in a guard ahead of its writes and the COMMIT), else two (its lock,
// then its writes with the COMMIT). Outcomes that arrive while every group
// is in flight, or while their run is held (hold: a transaction of this
// worker's own on the run outside any group), queue; the next group to
// start takes them (up to maxMembers).
//
// What each outcome guarantees holds per run, as it did alone: every run is
// locked before its continuation's writes, and checked to be as its
// continuation read it (the guard, or the lock's read itself), and its
// writes carry its CAS (W4) and its job's fenced completion (F1–F7). A group commits all of its
// outcomes or none: if anything in it fails (a refused completion, a moved
// append point, a deadlock, a continuation's own error or panic), it rolls
// back and every outcome in it runs again alone, in a transaction of its
// own, where only the faulty one fails.
//
// Only plain continuations commit in a group (engine.Step.Alone, stepMember.admit): a continuation
// whose writes all go in its last batch and touch only its own run and jobs.
// One that would write earlier or reach other runs (a timer, a child, a
// cancellation, continue-as-new, a closing run's parent or children), an
// outcome that is not a continuation (its run closed, a task queued), and
// every failure (it locks its job before its run) find out before they wrote
// anything, leave the group (errRunsAlone) and run alone after it. So a group
// locks only its own runs, all in one statement batch in run ID order, and
// no run is in two groups in flight at once: groups do not wait for each
// other, and a group holding its runs never waits for another run.

// stepGroupMembers is the most outcomes one group commits. A group's cost
// is mostly per statement (every member's writes go in one statement per
// table, over arrays), so fuller groups cost less per outcome; a group that
// rolls back reruns every member alone, so no larger than needed. The
// measurements behind the size are in docs/decisions/0014-group-sizes.md.
const stepGroupMembers = 32

// stepGroupsFor is how many groups a worker on pool may commit at once:
// learned from each group's latency per outcome (internal/limit), starting
// at 4 and bounded by half the pool's connections, which the worker's
// River client needs too; it grows only while the pool has room for
// another. Splitting the same outcomes into more, smaller groups costs
// more per outcome (see stepGroupMembers), which the limit
// sees as latency and backs off from.
func stepGroupsFor(pool *pgxpool.Pool) *limit.Limiter {
	most := max(1, int(pool.Config().MaxConns)/2)
	return limit.New(limit.Config{Initial: min(4, most), Max: most})
}

// stepGroupTimeout bounds a group's transaction: its statements run under
// it, not under any one attempt's context, since one attempt's cancellation
// must not fail the others' writes (its own refusal is the database's: the
// fenced completion).
const stepGroupTimeout = time.Minute

// errRunsAlone is what an outcome's body returns, in a group, before it
// wrote anything, when it cannot commit in the group (it is not a plain
// continuation, see stepMember.admit): the group goes on without it, and it runs
// alone once the group ended.
var errRunsAlone = errors.New("worker: this outcome commits alone")

// errGroupRolledBack is what a member of a group learns when its group did
// not commit: its outcome runs again alone.
var errGroupRolledBack = errors.New("worker: the group of outcomes did not commit")

// stepCommitter commits activity outcomes in groups (see above).
type stepCommitter struct {
	w          *Worker
	limit      *limit.Limiter // groups in flight at once
	maxMembers int            // outcomes in one group

	mu     sync.Mutex
	queue  []*stepMember // waiting for a group, oldest first
	groups int           // in flight
	// Runs held: with an outcome in a group in flight, or a transaction of
	// this worker's own on them in flight outside any group (hold): a
	// group takes no outcome of a held run, so a one-round-trip step
	// (fromCache) reads the cache only when no transaction of this worker
	// is writing its run.
	busy map[uuid.UUID]int

	// Counts, for tests and metrics: groups that committed, outcomes that
	// committed in a group with others, groups rolled back.
	committed  atomic.Int64
	grouped    atomic.Int64
	rolledBack atomic.Int64
	// Steps of one round trip (fromCache) whose guard held, and failed.
	guardHits   atomic.Int64
	guardMisses atomic.Int64
}

// stepMember is one outcome in a group: the run it continues, the
// transaction body that records it (as for outcomeTx), and what the group
// learned for it.
type stepMember struct {
	ctx   context.Context
	runID uuid.UUID
	fn    func(ctx context.Context, tx pgx.Tx, cont *taskResult) error
	done  chan error // the group's outcome: nil, or errGroupRolledBack
	cont  taskResult
	alone bool // left out of the group's writes: it runs alone

	// The run's row, locked by the group (lockErr pgx.ErrNoRows when there
	// is no such run), for deliverOutcome.
	run     *runRow
	now     time.Time
	lockErr error
	locked  bool // run is still to be taken by deliverOutcome
	guarded bool // run is the cached one, not locked yet: its writes start with a guard

	// The continuation's last writes, sent with the group's COMMIT, and
	// what to do once they ran (deferLast).
	step      *engine.StepWrites
	rest      *otherWrites
	afterLast func()
}

func newStepCommitter(w *Worker, groups *limit.Limiter, maxMembers int) *stepCommitter {
	return &stepCommitter{w: w, limit: groups, maxMembers: max(maxMembers, 1), busy: make(map[uuid.UUID]int)}
}

// takeLocked returns the run's row that the group locked for this member,
// once: a continuation that reads its run again must lock it itself.
func (m *stepMember) takeLocked() (run *runRow, now time.Time, ok bool, err error) {
	if m == nil || !m.locked {
		return nil, time.Time{}, false, nil
	}
	m.locked = false
	return m.run, m.now, true, m.lockErr
}

// deferLast takes a continuation's last writes (nothing is written after
// them) to be sent with the group's COMMIT; after runs once they did.
func (m *stepMember) deferLast(step *engine.StepWrites, rest *otherWrites, after func()) {
	m.step, m.rest, m.afterLast = step, rest, after
}

// commit records an outcome of run runID through fn (as outcomeTx does),
// in a group with others that are ready, or alone if the group fails.
func (c *stepCommitter) commit(ctx context.Context, runID uuid.UUID, fn func(ctx context.Context, tx pgx.Tx, cont *taskResult) error) error {
	m := &stepMember{ctx: ctx, runID: runID, fn: fn, done: make(chan error, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, m)
	c.startLocked()
	c.mu.Unlock()
	if err := <-m.done; err != nil {
		// The group held the run for this rerun (run): no group takes the
		// run's next outcome until it is settled.
		defer c.release(runID)
		c.w.settle(err, &m.cont) // frees the eager slots it took
		return c.w.outcomeTxOnce(ctx, fn)
	}
	c.w.settle(nil, &m.cont)
	return nil
}

// startLocked starts groups for the queued outcomes while fewer than the
// limit are in flight.
func (c *stepCommitter) startLocked() {
	for c.groups < c.limit.Limit() && len(c.queue) > 0 {
		members := c.takeLocked()
		if len(members) == 0 {
			return // every queued outcome's run is in a group in flight
		}
		c.groups++
		for _, m := range members {
			c.busy[m.runID]++
		}
		c.w.goroutines.Go(func() {
			started := time.Now()
			committed := c.run(members)
			c.mu.Lock()
			// Outcomes waiting for a group while this one ran, and an idle
			// connection for another: the limit, not the demand or the
			// pool (which River's client shares), bounded the groups.
			c.limit.Observe(time.Since(started), committed, len(c.queue) > 0 && limit.PoolHasRoom(c.w.pool))
			c.groups--
			for _, m := range members {
				c.unholdLocked(m.runID)
			}
			c.startLocked()
			c.mu.Unlock()
		})
	}
}

// hold marks runID held (busy) while a transaction of this worker's own on
// it runs outside any group: no group takes an outcome of the run until
// release. Holding never waits.
func (c *stepCommitter) hold(runID uuid.UUID) {
	c.mu.Lock()
	c.busy[runID]++
	c.mu.Unlock()
}

// release ends a hold, and starts a group for outcomes that waited for it.
func (c *stepCommitter) release(runID uuid.UUID) {
	c.mu.Lock()
	c.unholdLocked(runID)
	c.startLocked()
	c.mu.Unlock()
}

func (c *stepCommitter) unholdLocked(runID uuid.UUID) {
	n, ok := c.busy[runID]
	if !ok {
		// A release without its hold would cancel another's hold.
		panic(fmt.Sprintf("worker: run %s released by the step committer but not held", runID))
	}
	if n <= 1 {
		delete(c.busy, runID)
		return
	}
	c.busy[runID] = n - 1
}

// takeLocked takes the oldest queued outcomes for a group, at most
// maxMembers and one per run, none of a run that is held (a group in
// flight, or a transaction of this worker's own outside any group):
// a second outcome of a run must see the first one's writes, and a group
// that waited for another group's run would hold all of its own meanwhile.
func (c *stepCommitter) takeLocked() []*stepMember {
	var (
		taken []*stepMember
		kept  = c.queue[:0]
	)
	for _, m := range c.queue {
		if len(taken) < c.maxMembers && c.busy[m.runID] == 0 && !slices.ContainsFunc(taken, func(t *stepMember) bool { return t.runID == m.runID }) {
			taken = append(taken, m)
			continue
		}
		kept = append(kept, m)
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	return taken
}

// run commits one group, tells each member how it went, and returns how
// many outcomes it committed.
func (c *stepCommitter) run(members []*stepMember) (committed int) {
	slices.SortFunc(members, func(a, b *stepMember) int { return bytes.Compare(a.runID[:], b.runID[:]) })
	ctx, cancel := context.WithTimeout(context.Background(), stepGroupTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	err := lazytx.BeginFunc(ctx, c.w.pool, func(tx pgx.Tx) (err error) {
		defer func() {
			if r := recover(); r != nil { // a callback of the last batch, say
				err = fmt.Errorf("worker: a group of outcomes panicked: %v", r)
			}
		}()
		for _, m := range members {
			m.cont.dropSession()
			m.cont, m.step, m.rest, m.afterLast, m.guarded = taskResult{step: m}, nil, nil, nil, false
			m.run, m.lockErr, m.locked = &runRow{Run: engine.Run{ID: m.runID}}, nil, true
		}
		plansSet := false // lockRuns asks for generic plans for the whole transaction
		switch {
		case len(members) == 1 && c.fromCache(members[0]):
			// One round trip: its lock goes with its writes (queueGuard).
		case len(members) == 1:
			m := members[0]
			run, now, err := c.w.lockRun(ctx, tx, m.runID)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			m.run, m.now, m.lockErr = run, now, err
		default:
			if err := c.lockRuns(ctx, tx, members); err != nil {
				return err
			}
			plansSet = true
		}
		var writes lastWrites
		last := &pgx.Batch{} // the guards, then the members' writes
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
			memberCtx, cancel := context.WithDeadline(context.WithoutCancel(m.ctx), deadline)
			err := m.call(memberCtx, tx)
			cancel()
			switch {
			case errors.Is(err, errRunsAlone):
				m.alone = true
				continue
			case err != nil:
				return err
			}
			m.locked = false
			if m.step == nil && m.rest == nil {
				continue
			}
			if m.guarded {
				c.queueGuard(last, m)
			}
			writes.add(m.step, m.rest)
		}
		if writes.empty() {
			return nil
		}
		c.w.queueLastWrites(last, &writes, plansSet)
		lazytx.QueueCommit(tx, last)
		return tx.SendBatch(ctx, last).Close()
	})
	if errors.Is(err, lazytx.ErrCommittedDespiteCallback) {
		// As in outcomeTx: the outcomes are recorded; what the failed
		// callback should have noted is left to recovery.
		c.w.config.Logger.WarnContext(ctx, "weir: a group of activity outcomes committed, but reading one of its results failed",
			slog.String("error", err.Error()))
		err = nil
	}
	switch {
	case err != nil:
		c.rolledBack.Add(1)
		c.w.config.Logger.DebugContext(ctx, "weir: a group of activity outcomes rolled back; each runs again alone",
			slog.Int("outcomes", len(members)), slog.String("error", err.Error()))
	default:
		c.committed.Add(1)
		if committed = len(members) - countAlone(members); committed > 1 {
			c.grouped.Add(int64(committed))
		}
	}
	for _, m := range members {
		if err != nil || m.alone {
			m.cont.dropSession() // its rerun replays
			c.hold(m.runID)      // released by commit once its rerun settled
			m.done <- errGroupRolledBack
			continue
		}
		if m.afterLast != nil {
			m.afterLast()
		}
		// Before the run leaves the busy set: the run's next outcome may
		// take the one-round-trip step from the cache (fromCache).
		c.w.commitHistory(&m.cont)
		m.done <- nil
	}
	return committed
}

// fromCache sets m up for a step of one round trip, if this worker holds
// the run's history and row (it committed the run's last step): the run as
// cached, live, at the cached append point, with no task queued, at the
// database's estimated time. Its writes then start with a guard that locks
// the run and fails the transaction unless the run is still so
// (queueGuard); if it is not, the step runs again alone, reading the run
// under its lock first, as any step did.
func (c *stepCommitter) fromCache(m *stepMember) bool {
	events, next, cached, ok := c.w.histories.latest(m.runID)
	now, known := c.w.clock.now()
	if !ok || !known || len(events) == 0 {
		return false
	}
	run := *cached
	run.State, run.NextEventID, run.TaskJobID = "running", next, nil
	m.run, m.guarded = &run, true
	m.now = maxTime(now, events[len(events)-1].Time) // history's times never go back
	return true
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// queueGuard queues, ahead of m's writes, the lock of m's run and the check
// that it is as fromCache assumed: live, at the same append point, no task
// queued. A run that moved fails the batch (and its COMMIT) by a division
// by zero.
func (c *stepCommitter) queueGuard(batch *pgx.Batch, m *stepMember) {
	c.w.store.QueueGuard(batch, m.runID, m.run.NextEventID).QueryRow(func(row pgx.Row) error {
		var one int
		err := row.Scan(&one)
		if store.IsMovedError(err) {
			c.guardMisses.Add(1)
			c.w.histories.forgetAt(m.runID, m.run.NextEventID) // moved elsewhere (or closed): what this worker kept of it is stale
			return fmt.Errorf("run %s moved since this worker's last step of it: %w", m.runID, err)
		}
		if err == nil {
			c.guardHits.Add(1)
		}
		return err
	})
}

// lockRuns locks and reads the runs of a group's members (sorted by run
// ID) in one statement, in run ID order, as every group does, so that
// groups never wait for each other in a cycle; a member whose run is gone
// gets pgx.ErrNoRows, as a lone lock would.
func (c *stepCommitter) lockRuns(ctx context.Context, tx pgx.Tx, members []*stepMember) error {
	ids := make([]uuid.UUID, len(members))
	byID := make(map[uuid.UUID]*stepMember, len(members))
	for i, m := range members {
		ids[i], byID[m.runID] = m.runID, m
		m.lockErr = pgx.ErrNoRows // until its row is read
	}
	// The group's whole transaction plans as its last writes do
	// (dbschema.GenericPlansSQL), this statement over an array included.
	batch := &pgx.Batch{}
	batch.Queue(dbschema.GenericPlansSQL)
	c.w.store.QueueLockRuns(batch, ids, func(row engine.Run, now time.Time) error {
		m := byID[row.ID]
		if m == nil {
			return fmt.Errorf("worker: locking a group's runs returned run %s, not one of them", row.ID)
		}
		m.run, m.now, m.lockErr = &runRow{Run: row, scanned: true}, now, nil
		c.w.clock.observe(now)
		return nil
	})
	return tx.SendBatch(ctx, batch).Close()
}

// call runs the member's body in the group's transaction. A panic fails
// the group: alone, the body panics again on its attempt's goroutine, where
// River (or the eager runner) recovers it as it always did.
func (m *stepMember) call(ctx context.Context, tx pgx.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("worker: outcome of run %s panicked in its group: %v", m.runID, r)
		}
	}()
	return m.fn(ctx, tx, &m.cont)
}

func countAlone(members []*stepMember) int {
	n := 0
	for _, m := range members {
		if m.alone {
			n++
		}
	}
	return n
}
