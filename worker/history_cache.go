package worker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/history"
)

// historyCacheSize bounds how many runs' histories a worker keeps in memory.
const historyCacheSize = 4096

// historyCache keeps the histories this worker last committed, so the next
// task of a run it just advanced need not read the history back. An entry
// is used only when the run's append point (next_event_id) is still the one
// this worker committed: read under the run's lock (get), or checked by a
// guard that locks the run ahead of the step's writes (latest, for the
// one-round-trip step). History is append-only and only the holder of the
// run's lock at that append point can move it, so equal append points mean
// equal histories. Entries are stored only once their transaction
// committed, and never replaced by a shorter history of the run.
type historyCache struct {
	mu      sync.Mutex
	entries map[[16]byte]*historyEntry
}

type historyEntry struct {
	events      []history.Event
	nextEventID int64
	run         *runRow // the run's row as last read under its lock (what never changes of it), if known
}

func newHistoryCache() *historyCache {
	return &historyCache{entries: make(map[[16]byte]*historyEntry)}
}

// get returns a copy of the run's cached history if its append point is
// nextEventID.
func (c *historyCache) get(runID [16]byte, nextEventID int64) ([]history.Event, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[runID]
	if !ok || e.nextEventID != nextEventID {
		return nil, false
	}
	return slices.Clone(e.events), true
}

// latest returns a copy of the run's cached history, its append point and
// the run's row as last read, if the cache holds both.
func (c *historyCache) latest(runID [16]byte) ([]history.Event, int64, *runRow, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[runID]
	if !ok || e.run == nil {
		return nil, 0, nil, false
	}
	return slices.Clone(e.events), e.nextEventID, e.run, true
}

// put stores a committed history, and the row of its run if known, unless
// the cache holds a longer one of the run.
func (c *historyCache) put(runID [16]byte, events []history.Event, run *runRow) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[runID]; !ok && len(c.entries) >= historyCacheSize {
		for id := range c.entries { // evict an arbitrary entry
			delete(c.entries, id)
			break
		}
	}
	next := int64(len(events)) + 1
	if e, ok := c.entries[runID]; ok && e.nextEventID > next {
		// A transaction that committed earlier settled later: history only
		// grows, so the entry with the later append point stays.
		return
	}
	c.entries[runID] = &historyEntry{events: events, nextEventID: next, run: run}
}

// forget drops a run's history (it closed).
func (c *historyCache) forget(runID [16]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, runID)
}

// history returns the run's history: from the cache when this worker
// committed its current append point, else from the database.
func (w *Worker) history(ctx context.Context, tx pgx.Tx, run *runRow) ([]history.Event, error) {
	if run.NextEventID == 1 {
		return nil, nil // a run's first task: no history yet
	}
	if events, ok := w.histories.get(run.ID, run.NextEventID); ok {
		return events, nil
	}
	return loadHistory(ctx, tx, w.names, run.ID)
}

// stageHistory notes in result the history a task is committing, for the
// cache once the commit succeeds (commitHistory). Times are kept as the
// database returns them (microseconds), so a cached history replays exactly
// like one read back.
func stageHistory(result *taskResult, run *runRow, events, appended []history.Event, closed bool) {
	result.runID = run.ID
	if run.scanned {
		result.run = run.immutable()
	}
	if closed {
		result.history = nil
		return
	}
	all := make([]history.Event, 0, len(events)+len(appended))
	all = append(all, events...)
	for _, e := range appended {
		if e.ID > int64(len(all)) {
			e.Time = time.UnixMicro(e.Time.UnixMicro())
			all = append(all, e)
		}
	}
	result.history = all
}

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
		w.histories.put(result.runID, result.history, result.run)
	}
}
