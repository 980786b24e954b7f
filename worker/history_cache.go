package worker

import (
	"bytes"
	"container/list"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/engine"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
)

// historyCache keeps the runs this worker last advanced: the history it
// committed (as pieces, one per step: a step adds its events without
// copying those before them), so the next task of the run need not read it
// back, and the run's workflow code as that task left it (a
// replay.CachedRun, sticky execution), so the next task need not replay it
// either. An entry is used only when the run's append point
// (next_event_id) is still the one this worker committed: read under the
// run's lock (get, cachedRun), or checked by a guard that locks the run
// ahead of the step's writes (latest, for the one-round-trip step). History is append-only and only the holder of the
// run's lock at that append point can move it, so equal append points mean
// equal histories, and a cached run standing there stands at the run's
// history. Entries are stored only once their transaction committed, and
// never replaced by a shorter history of the run. Beyond its size, the
// cache lets go of the run used least recently (a run waiting on a long
// timer before one whose activities are running).
//
// Runs in flight are admitted only while the cache has room for them
// (admit, await): the runs whose claimed activities run here (busy
// entries: their next task comes back here soon) and the tasks admitted
// and not settled yet stay under size, so that no run in flight is
// evicted before its next task. Eviction takes the least recently used
// entry that is not busy. An entry is busy until its claimed attempts
// ended (claimEnded) or it is replaced.
type historyCache struct {
	mu       sync.Mutex
	entries  map[[16]byte]*historyEntry
	order    *list.List    // of run IDs, the most recently used first
	size     int           // most entries kept; 0 keeps none
	stopped  bool          // the worker stopped: cached runs are closed, not kept
	busy     int           // entries that are busy
	admitted int           // runs admitted (admit, await, reserve) and not released yet
	waiting  [2]*list.List // of chan struct{}, by roomFor: those awaiting room, the oldest first, closed once admitted
	stats    cacheStats
}

// cacheStats are a history cache's running totals.
type cacheStats struct {
	Hits          int64 // tasks that found their run's history at its append point
	CachedRunHits int64 // of those, tasks that took their run's kept cached run
	Misses        int64 // tasks past a run's first that did not find its history at their append point
}

type historyEntry struct {
	pieces      [][]history.Event // the history, in order; none is empty
	nextEventID int64
	run         *runRow           // the run's row as last read under its lock (what never changes of it), if known
	cached      *replay.CachedRun // the run's code, standing at nextEventID, unless a task took it
	facts       *engine.Facts     // what tasks read of the events' attributes
	decided     *decidedTask      // a task's decision at nextEventID, kept for its rerun alone
	used        *list.Element     // its place in historyCache.order
	claims      int               // attempts its task claimed, running here and not ended yet (busy if any)
}

// shared returns the entry's pieces, for a task to read and not to change
// (a committed event never changes): neither the list nor a piece has
// room, so that appending to either copies it, and the entry's history
// stays as it is whatever a task appends.
func (e *historyEntry) shared() [][]history.Event {
	return e.pieces[:len(e.pieces):len(e.pieces)]
}

// held are the cached runs the entry holds (nil ones included), to close
// when it goes.
func (e *historyEntry) held() []*replay.CachedRun {
	if e.decided == nil {
		return []*replay.CachedRun{e.cached}
	}
	return []*replay.CachedRun{e.cached, e.decided.cached}
}

// decidedTask is what an outcome's task decided in a group of outcomes
// before it found it must commit alone (a timer, a child, a cancellation:
// errRunsAlone, nothing written), with the run's cached run standing after it.
// It is kept in the run's entry (keepDecision) for the rerun alone, right
// after the group, which locks the run and in the usual case reads the
// same inputs at the same append point: the decision is then the same, and
// the rerun takes it (decision) instead of replaying the run's code from
// its start, which it would have to, the cached run having run ahead of
// history. A rerun that finds other inputs decides anew. One never taken
// goes with its entry (the run's next commit, eviction, Stop). The decision
// keeps its time: its events, workflow.Now and timers are dated when the
// group decided, up to the group's duration before the rerun commits them.
type decidedTask struct {
	inputs  []history.Event
	outcome *replay.Outcome
	cached  *replay.CachedRun // standing after the outcome's events (nil: none)
}

// newHistoryCache returns a cache of at most size runs (none when size is
// not positive).
func newHistoryCache(size int) *historyCache {
	return &historyCache{entries: make(map[[16]byte]*historyEntry), order: list.New(), waiting: [2]*list.List{list.New(), list.New()}, size: max(size, 0)}
}

// lookup returns the run's entry, marked as used now.
func (c *historyCache) lookup(runID [16]byte) (*historyEntry, bool) {
	e, ok := c.entries[runID]
	if ok {
		c.order.MoveToFront(e.used)
	}
	return e, ok
}

// remove drops the run's entry, if any, and returns it.
func (c *historyCache) remove(runID [16]byte) *historyEntry {
	e := c.entries[runID]
	if e != nil {
		delete(c.entries, runID)
		c.order.Remove(e.used)
		c.idle(e)
	}
	return e
}

// idle counts e, busy or not, as not busy from here on (under c.mu); the
// caller admits those awaiting room (free) once done with the cache, so
// that an entry replaced by a busy one (put) frees no room.
func (c *historyCache) idle(e *historyEntry) {
	if e.claims > 0 {
		e.claims = 0
		c.busy--
	}
}

// claimEnded notes that one of the attempts claimed by the task that put
// e at append point next ended: e is not busy once all have. Once put
// replaced e in place, at a later append point, e holds nothing of that
// task (a task that appends nothing claims nothing).
func (c *historyCache) claimEnded(e *historyEntry, next int64) {
	if e == nil {
		return // not stored
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.nextEventID != next {
		return
	}
	if e.claims == 1 {
		c.idle(e)
		c.free()
	} else if e.claims > 1 {
		e.claims--
	}
}

// hasRoom reports whether one more run in flight fits (under c.mu).
func (c *historyCache) hasRoom() bool {
	return c.size == 0 || c.stopped || c.busy+c.admitted < c.size
}

// roomFor is what awaits room: a task of a run started already comes
// before a run yet to start, whose start can wait (and whose run would only
// add to those in flight).
type roomFor int

const (
	roomForTask  roomFor = iota // await
	roomForStart                // reserve, admit
)

// ahead is how many await room before one for r (under c.mu).
func (c *historyCache) ahead(r roomFor) int {
	n := 0
	for _, q := range c.waiting[:r+1] {
		n += q.Len()
	}
	return n
}

// free admits those awaiting room, tasks first, each in the order they
// came, while there is room (under c.mu): each is woken once, when
// admitted.
func (c *historyCache) free() {
	for _, q := range c.waiting {
		for q.Len() > 0 && c.hasRoom() {
			c.admitted++
			close(q.Remove(q.Front()).(chan struct{}))
		}
	}
}

// admit admits the first task of a run that a start inserts if the cache
// has room for the run and nobody awaits it; the caller calls release once
// the task settled.
func (c *historyCache) admit() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ahead(roomForStart) > 0 || !c.hasRoom() {
		return false
	}
	c.admitted++
	return true
}

// await admits a task of a run that the cache does not hold, once the
// cache has room for it (or patience passed, or ctx ended); a task of a run
// it holds is admitted at once. release is to be called once the task
// settled.
func (c *historyCache) await(ctx context.Context, runID [16]byte, patience time.Duration) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[runID]; ok {
		return func() {}, nil
	}
	return c.awaitLocked(ctx, roomForTask, patience)
}

// reserve admits a run that a start is about to insert, once the cache has
// room for it (or ctx ends); release is to be called once its first task
// settled, or the start ended without running it.
func (c *historyCache) reserve(ctx context.Context) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.awaitLocked(ctx, roomForStart, 0)
}

// awaitLocked admits a run in flight, for r, once the cache has room for
// it and all ahead of it were admitted (free), or fails when ctx ends or,
// if it is positive, patience passed (under c.mu, which it lets go while it
// waits).
func (c *historyCache) awaitLocked(ctx context.Context, r roomFor, patience time.Duration) (release func(), err error) {
	if c.ahead(r) == 0 && c.hasRoom() {
		c.admitted++
		return c.release, nil
	}
	if patience > 0 { // a timer only for a run that waits
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, patience)
		defer cancel()
	}
	admitted := make(chan struct{})
	e := c.waiting[r].PushBack(admitted)
	c.mu.Unlock()
	select {
	case <-admitted:
		c.mu.Lock()
		return c.release, nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	select {
	case <-admitted: // admitted as ctx ended: the room goes to the next
		c.admitted--
		c.free()
	default:
		c.waiting[r].Remove(e)
	}
	return nil, context.Cause(ctx)
}

// release ends what admit or await admitted.
func (c *historyCache) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.admitted--
	c.free()
}

// get returns the run's cached history (its pieces, shared), and the memo
// of its events' facts, if its append point is nextEventID.
func (c *historyCache) get(runID [16]byte, nextEventID int64) ([][]history.Event, *engine.Facts, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lookup(runID)
	if !ok || e.nextEventID != nextEventID {
		c.stats.Misses++
		return nil, nil, false
	}
	c.stats.Hits++
	return e.shared(), e.facts, true
}

// cachedRun takes the run's cachedRun out of the cache if it stands at
// nextEventID: the caller owns it from here on, and hands it back with the
// history its task commits (put), or closes it.
func (c *historyCache) cachedRun(runID [16]byte, nextEventID int64) *replay.CachedRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lookup(runID)
	if !ok || e.nextEventID != nextEventID || e.cached.NextEventID() != nextEventID {
		return nil
	}
	s := e.cached
	e.cached = nil
	c.stats.CachedRunHits++
	return s
}

// keepDecision keeps d in the run's entry for the task's rerun, if the
// entry stands at next, the append point d was decided at; else it closes
// d's cached run.
func (c *historyCache) keepDecision(runID [16]byte, next int64, d *decidedTask) {
	c.mu.Lock()
	e, ok := c.entries[runID]
	var closing []*replay.CachedRun
	switch {
	case !ok || e.nextEventID != next || c.stopped:
		closing = append(closing, d.cached)
	default:
		if e.decided != nil {
			closing = append(closing, e.decided.cached)
		}
		e.decided = d
	}
	c.mu.Unlock()
	closeAll(closing)
}

// decision takes the decision kept in the run's entry if it was decided at
// next with the same inputs; a kept decision that is not is closed.
func (c *historyCache) decision(runID [16]byte, next int64, inputs []history.Event) *decidedTask {
	c.mu.Lock()
	e, ok := c.lookup(runID)
	if !ok || e.decided == nil {
		c.mu.Unlock()
		return nil
	}
	d := e.decided
	e.decided = nil
	c.mu.Unlock()
	if e.nextEventID != next || !sameInputs(d.inputs, inputs) {
		d.cached.Close()
		return nil
	}
	return d
}

// sameInputs reports whether two tasks' inputs are the same events.
func sameInputs(a, b []history.Event) bool {
	return slices.EqualFunc(a, b, func(x, y history.Event) bool {
		return x.ID == y.ID && x.Type == y.Type && bytes.Equal(x.Attributes, y.Attributes)
	})
}

// closeAll closes cached runs (nil ones included); not under the cache's
// lock, as closing unwinds workflow code (its deferred calls run).
func closeAll(runs []*replay.CachedRun) {
	for _, s := range runs {
		s.Close()
	}
}

// latest returns the last events of the run's cached history (its last
// piece, shared: to read), its append point and the run's row as last
// read, if the cache holds both.
func (c *historyCache) latest(runID [16]byte) ([]history.Event, int64, *runRow, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lookup(runID)
	if !ok || e.run == nil || len(e.pieces) == 0 {
		return nil, 0, nil, false
	}
	last := e.pieces[len(e.pieces)-1]
	return last[:len(last):len(last)], e.nextEventID, e.run, true
}

// row returns what never changes of the run's row, if the cache has it
// (nil if not), without marking the run used.
func (c *historyCache) row(runID [16]byte) *runRow {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[runID]; e != nil {
		return e.run
	}
	return nil
}

// put stores a committed history (its pieces, none empty and none with
// room to append in place), what never changes of its run's row
// (run.immutable, or the entry's own if it has one) if known, the cached run
// standing at its end if any and the memo of its events' facts (a new one
// if nil), busy while the claims attempts its task claimed run, unless the
// cache holds a longer history of the run; it returns the entry it stored
// (nil if none). A cached run it does not keep, or replaces, is closed.
func (c *historyCache) put(runID [16]byte, pieces [][]history.Event, run *runRow, cached *replay.CachedRun, facts *engine.Facts, claims int) *historyEntry {
	var closing []*replay.CachedRun
	defer func() { closeAll(closing) }()
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.free() // the room the old entry held goes only if the new one is not busy
	next := appendPoint(pieces)
	if cached.NextEventID() != next || c.stopped {
		// A first task in a start that committed after the worker stopped
		// settles here after closeCachedRuns: its code must not outlive the
		// worker.
		closing = append(closing, cached)
		cached = nil
	}
	old, ok := c.entries[runID]
	switch {
	case ok && old.nextEventID > next:
		// A transaction that committed earlier settled later: history only
		// grows, so the entry with the later append point stays.
		closing = append(closing, cached)
		return nil
	case ok:
		if old.cached != cached && old.cached != nil { // usually taken by the task that replaces it
			closing = append(closing, old.cached)
		}
		if old.decided != nil {
			closing = append(closing, old.decided.cached)
		}
		c.idle(old) // replaced below, in its place in c.order
		c.order.MoveToFront(old.used)
	case c.size == 0:
		closing = append(closing, cached)
		return nil
	case len(c.entries) >= c.size:
		closing = append(closing, c.evict()...)
	}
	switch {
	case run == nil:
	case ok && old.run != nil:
		run = old.run // what never changes of a run's row is the same whatever its append point
	default:
		run = run.immutable()
	}
	if facts == nil {
		facts = engine.NewFacts()
	}
	if claims > 0 {
		c.busy++
	}
	e := old // replaced in place: the tasks of its attempts still running end with its append point (claimEnded)
	if !ok {
		e = &historyEntry{used: c.order.PushFront(runID)}
		c.entries[runID] = e
	}
	*e = historyEntry{pieces: pieces, nextEventID: next, run: run, cached: cached, facts: facts, used: e.used, claims: claims}
	return e
}

// evict drops the run used least recently that is not busy (the least
// recently used if all are), and returns the cached runs to close.
func (c *historyCache) evict() []*replay.CachedRun {
	el := c.order.Back()
	for el.Prev() != nil && c.entries[el.Value.([16]byte)].claims > 0 {
		el = el.Prev()
	}
	return c.remove(el.Value.([16]byte)).held()
}

// forget drops a run's history and cached run (it closed).
func (c *historyCache) forget(runID [16]byte) {
	c.mu.Lock()
	e := c.remove(runID)
	c.free()
	c.mu.Unlock()
	if e != nil {
		closeAll(e.held())
	}
}

// forgetAt forgets the run if what the cache holds of it is still at
// append point next (a newer entry, put meanwhile, stays).
func (c *historyCache) forgetAt(runID [16]byte, next int64) {
	c.mu.Lock()
	e := c.entries[runID]
	if e == nil || e.nextEventID != next {
		c.mu.Unlock()
		return
	}
	c.remove(runID)
	c.free()
	c.mu.Unlock()
	closeAll(e.held())
}

// closeCachedRuns closes every cached run the cache holds, and any put later
// (the worker stops: their goroutines must not outlive it); the histories
// stay.
func (c *historyCache) closeCachedRuns() {
	c.mu.Lock()
	c.stopped = true
	c.free()
	var closing []*replay.CachedRun
	for _, e := range c.entries {
		closing = append(closing, e.held()...)
		e.cached, e.decided = nil, nil
	}
	c.mu.Unlock()
	closeAll(closing)
}

// history returns the run's history (its pieces, none empty and none with
// room), with the memo of its events' facts: from the cache when this
// worker committed its current append point, else from the database (with
// a new memo).
func (w *Worker) history(ctx context.Context, tx pgx.Tx, run *runRow) ([][]history.Event, *engine.Facts, error) {
	if run.NextEventID == 1 {
		return nil, engine.NewFacts(), nil // a run's first task: no history yet
	}
	if pieces, facts, ok := w.histories.get(run.ID, run.NextEventID); ok {
		return pieces, facts, nil
	}
	events, err := w.store.History(ctx, tx, run.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("loading history: %w", err)
	}
	if len(events) == 0 {
		return nil, engine.NewFacts(), nil
	}
	return [][]history.Event{events[:len(events):len(events)]}, engine.NewFacts(), nil // cached as is: no room
}

// appendPoint is the ID of the event after a history given as pieces.
func appendPoint(pieces [][]history.Event) int64 {
	next := int64(1)
	for _, events := range pieces {
		next += int64(len(events))
	}
	return next
}

// lastEvent is the last event of a history given as pieces, none empty.
func lastEvent(pieces [][]history.Event) history.Event {
	last := pieces[len(pieces)-1]
	return last[len(last)-1]
}

// flat returns a history's events in one slice: its one piece, or a copy.
func flat(pieces [][]history.Event) []history.Event {
	switch len(pieces) {
	case 0:
		return nil
	case 1:
		return pieces[0]
	}
	n := 0
	for _, events := range pieces {
		n += len(events)
	}
	out := make([]history.Event, 0, n)
	for _, events := range pieces {
		out = append(out, events...)
	}
	return out
}

// stageHistory notes in result the history a task is committing (pieces,
// shared, then appended, which follows it, as one more piece), for the
// cache once the commit succeeds (commitHistory). Times are kept as the
// database returns them (microseconds), so a cached history replays exactly
// like one read back: appended is shared (only read) when its times are.
func stageHistory(result *taskResult, run *runRow, pieces [][]history.Event, appended []history.Event, closed bool) {
	result.runID = run.ID
	if run.scanned {
		result.run = run
	}
	switch {
	case closed:
		result.history = nil
		return
	case len(appended) == 0:
		result.history = pieces
		return
	}
	piece := appended[:len(appended):len(appended)]
	if slices.ContainsFunc(appended, notAsStored) {
		piece = make([]history.Event, len(appended))
		for i, e := range appended {
			e.Time = asStored(e.Time)
			piece[i] = e
		}
	}
	result.history = append(pieces, piece) // pieces has no room: a new list
}

// asStored is t as the database returns it: in microseconds, local time.
func asStored(t time.Time) time.Time { return time.UnixMicro(t.UnixMicro()) }

// notAsStored reports whether e's time is not as the database returns it.
func notAsStored(e history.Event) bool { return e.Time != asStored(e.Time) }

// commitHistory applies what stageHistory noted, once the task's
// transaction committed.
func (w *Worker) commitHistory(result *taskResult) {
	if result.cached {
		return
	}
	result.cached = true
	switch {
	case result.runID == [16]byte{}:
	case result.history == nil:
		w.histories.forget(result.runID)
	default:
		e := w.histories.put(result.runID, result.history, result.run, result.cachedRun, result.facts, len(result.eager))
		next := appendPoint(result.history)
		for i := range result.eager {
			result.eager[i].ended = func() { w.histories.claimEnded(e, next) }
		}
		result.cachedRun = nil
	}
	result.dropCachedRun()
}

// statsNow returns the cache's running totals.
func (c *historyCache) statsNow() cacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}
