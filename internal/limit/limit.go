// Package limit decides how many group commits may be in flight at once.
//
// A Limiter learns the limit from the latency per unit of work that groups
// commit, in the manner of TCP Vegas and of Netflix's concurrency-limits
// gradient limiter: it grows while that latency holds near its lowest (the
// no-load latency) and work waited, and shrinks in proportion once it rises
// past a tolerance, so it settles near the concurrency past which Postgres
// only queues the work, on any machine (see
// docs/decisions/0023-groups-in-flight-follow-latency.md). Per unit, not
// per group: splitting the same work into more, smaller groups raises it.
package limit

import (
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// tolerance is how far a unit's latency may rise above the no-load
	// latency, as a fraction of it, before the limit shrinks; the limit
	// grows only while latency stays within half of it.
	tolerance = 0.15

	// window is how many observations at a limit of 1 relearn the no-load
	// latency (see noLoadLocked), and how many a new Limiter makes before it
	// moves the limit: a burst's first commits find connections, caches and
	// plans cold, and their latency falls for a while whatever the limit.
	window = 64

	// smoothing is the share of each observation's verdict in the limit.
	smoothing = 0.2

	// averaging is the share of each observation in the average latency
	// the limit follows: one commit's latency varies by several times on a
	// busy machine.
	averaging = 0.1

	// slower is how far a shared Limiter's latency at a limit of 1 must
	// stay above its no-load latency, as a factor, for it to relearn it
	// (see noLoadLocked): the others' queueing alone does not last there,
	// as they shrink once theirs passes the tolerance.
	slower = 1.5

	// steady is how many observations the no-load latency must have held
	// (fallen by less than a quarter of the tolerance) before the limit
	// may grow.
	steady = 16
)

// Limiter is an adaptive bound on work in flight. Its methods are safe for
// concurrent use and cost a mutex, no goroutine.
type Limiter struct {
	mu      sync.Mutex
	limit   float64
	max     float64
	initial float64
	fixed   bool
	sharers int // processes committing to the store, this one included (Share)

	// The average latency per unit, in nanoseconds (0 before any
	// observation), the no-load latency (its lowest; +Inf before any), and
	// the lowest average at a limit of 1 since the limit was last above it.
	average, noLoad, lowestAtOne float64
	seenAtOne                    int
	seen                         int // observations, up to window
	// Observations since the no-load latency last fell: while it falls
	// (connections, caches and plans still warming), latency that holds
	// says nothing about the limit, and the limit does not grow.
	sinceLower int
	heldAt     float64 // the no-load latency when it last fell
	// Observations still to come of work that started before the limit
	// last shrank: they tell of the old limit, so they shrink it no more.
	shrunk int
}

// New returns a Limiter bounded by [1, most] that starts at initial
// (clamped to those bounds) and keeps it for its first 64 observations,
// while it learns the no-load latency.
func New(initial, most int) *Limiter {
	most = max(most, 1)
	initial = min(max(initial, 1), most)
	return &Limiter{
		limit: float64(initial), max: float64(most), initial: float64(initial),
		noLoad: math.Inf(1), lowestAtOne: math.Inf(1), heldAt: math.Inf(1),
	}
}

// Fixed returns a Limiter whose limit is n (at least 1) whatever it
// observes.
func Fixed(n int) *Limiter {
	l := New(n, n)
	l.fixed = true
	return l
}

// Limit is how much work may be in flight now: at least 1.
func (l *Limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(math.Round(l.limit))
}

// Share tells the Limiter that n processes, this one included, commit to the
// same store. While it learns (its first 64 observations), its limit is its
// nth share of the initial limit, rounded down and at least 1: n processes
// that start together begin in flight about where one would. Once it has
// learned, latency alone moves the limit. A shared Limiter relearns its
// no-load latency at a limit of 1 (see noLoadLocked) only when that stayed
// half again above it: below that, the others' queueing would read as a
// slower store, and each relearning would let the limits rise in turn.
func (l *Limiter) Share(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sharers = n
	if l.fixed || l.seen >= window {
		return
	}
	l.limit = max(1, math.Floor(l.initial/float64(max(n, 1))))
}

// Observe records that a group committed units of work in latency.
// limited tells whether more in flight could have been put to use: work
// waited for a slot while it ran, and there was room for it (an idle
// connection, say). Only then may the limit grow. A
// group that committed nothing (units 0: it rolled back) tells nothing.
func (l *Limiter) Observe(latency time.Duration, units int, limited bool) {
	if units < 1 || latency <= 0 || l.fixed {
		return
	}
	perUnit := float64(latency) / float64(units)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.average == 0 {
		l.average = perUnit
	}
	l.average += averaging * (perUnit - l.average)
	ratio := l.average / l.noLoadLocked(l.average)
	if l.seen < window {
		l.seen++
		return
	}
	target := l.limit
	switch {
	case l.shrunk > 0:
		l.shrunk--
		return
	case ratio > 1+tolerance:
		// Queued past the tolerance: back to the limit at which this
		// latency would have been within it, at most halving.
		target = l.limit * max(0.5, (1+tolerance)/ratio)
		l.shrunk = int(math.Round(l.limit))
	case ratio <= 1+tolerance/2 && limited && l.sinceLower >= steady:
		target = l.limit + 1
	}
	l.limit = min(max((1-smoothing)*l.limit+smoothing*target, 1), l.max)
}

// noLoadLocked adds an average latency to the no-load estimate and
// returns it. The estimate is the lowest average observed: latency above it is work
// queued, by this limiter's load or another's. Only at a limit of 1 does
// this limiter queue nothing of its own, so a window of observations there
// that stayed above the tolerance means the store became slower for good:
// their lowest becomes the estimate, and the limit may grow again. A
// shared limiter (Share) relearns only from a window that stayed at least
// slower times above the estimate.
func (l *Limiter) noLoadLocked(perUnit float64) float64 {
	l.noLoad = min(l.noLoad, perUnit)
	l.sinceLower++
	if !(l.noLoad >= l.heldAt*(1-tolerance/4)) { // +Inf at first
		l.heldAt, l.sinceLower = l.noLoad, 0
	}
	if l.limit >= 2 {
		l.lowestAtOne, l.seenAtOne = math.Inf(1), 0
		return l.noLoad
	}
	l.lowestAtOne = min(l.lowestAtOne, perUnit)
	if l.seenAtOne++; l.seenAtOne >= window {
		if l.sharers <= 1 || l.lowestAtOne >= slower*l.noLoad {
			l.noLoad = l.lowestAtOne
		}
		l.lowestAtOne, l.seenAtOne = math.Inf(1), 0
	}
	return l.noLoad
}

// ForPool returns the Limiter of groups that each hold a connection of
// pool: it starts at as many groups as the process may run goroutines in
// parallel (GOMAXPROCS: the cores it sees, the best guess it has of the
// store's) and is bounded by half the pool's connections (the rest are for
// others sharing the pool, a worker's River client say).
func ForPool(pool *pgxpool.Pool) *Limiter {
	most := max(1, int(pool.Config().MaxConns)/2)
	return New(runtime.GOMAXPROCS(0), most)
}

// PoolHasRoom tells whether pool could lend another connection now without
// waiting: one is idle, or the pool may open one more.
func PoolHasRoom(pool *pgxpool.Pool) bool {
	stat := pool.Stat()
	return stat.IdleConns() > 0 || stat.TotalConns() < stat.MaxConns()
}
