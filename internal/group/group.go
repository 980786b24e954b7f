// Package group commits members, each a unit of work that could commit in
// a transaction of its own, in groups of one transaction: Postgres's costs
// are mostly per transaction and per statement.
//
// A Committer never waits to fill a group. A member that arrives while
// nothing waits and a slot is free commits at once, on its caller's
// goroutine (a group of one); others queue, and the next group takes them,
// up to the group size and one per key (a run, a workflow ID): a member
// sees the writes of the one before it with its key, and no group waits
// for another's key. An adaptive limit.Limiter decides how many groups are
// in flight, and the load decides their size: a group launched takes every
// member queued (up to the cap), that is, those that arrived while the
// groups in flight committed. A light load makes small groups (each commits
// soon); a load the groups in flight cannot keep up with makes large ones,
// each paying one commit for many members. A member that its group did not
// decide (the group rolled back, or it could not go in it) runs alone
// afterwards, its key still held, so that only a faulty member fails.
package group

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/weirhq/weir/internal/limit"
)

// Config is what a Committer does with its members.
type Config[K comparable, M any] struct {
	Limit *limit.Limiter // groups in flight, learned from their latency
	Size  int            // the most members in one group; 0 means MaxSize
	Key   func(M) K      // a group takes one member per key, none of a held key
	// Joins, if set, tells whether m may join a group led by first.
	Joins func(first, m M) bool
	// Commit commits members (one or more) in one transaction, and returns
	// how many it committed and, by member (nil: none), which ones it left
	// undecided: those run alone (Alone) on their own goroutines, their
	// keys held until it returns.
	Commit  func(members []M) (committed int, alone []bool)
	Alone   func(ctx context.Context, m M)
	HasRoom func() bool  // another group could have a connection now: the limit may grow
	Go      func(func()) // runs a group's goroutine; defaults to the go statement
}

// MaxSize is the default cap on a group's members. It bounds what one
// group's statements carry (every member's rows go in one statement per
// table, as arrays: up to MaxSize payloads, each up to a client's payload
// limit) and what a group that rolls back redoes (each member alone), not
// the load: below it, a group's size follows the load (see the package
// doc).
const MaxSize = 256

// Committer queues members and commits them in groups (see the package
// doc). Its methods are safe for concurrent use.
type Committer[K comparable, M any] struct {
	config Config[K, M]

	mu       sync.Mutex
	queue    []*waiter[M] // oldest first
	inFlight int          // groups
	held     map[K]int    // keys of members in flight or running alone, and holds
}

// waiter is a queued member, taken by a group or taken out of the queue
// as its caller's ctx ended (canceled; both guarded by mu), and its group's
// verdict: whether it runs alone. decided is done once either is known.
type waiter[M any] struct {
	m               M
	taken, canceled bool
	alone           bool
	decided         sync.WaitGroup
}

func newWaiter[M any](m M) *waiter[M] {
	w := &waiter[M]{m: m}
	w.decided.Add(1)
	return w
}

// New returns a Committer configured by config.
func New[K comparable, M any](config Config[K, M]) *Committer[K, M] {
	if config.Size <= 0 {
		config.Size = MaxSize
	}
	if config.Go == nil {
		config.Go = func(f func()) { go f() }
	}
	return &Committer[K, M]{config: config, held: make(map[K]int)}
}

// Do commits m, in a group or alone, and returns once it is decided. While
// m waits in the queue, ctx's end takes it out, and Do returns ctx's error;
// once a group took m, the group decides.
func (c *Committer[K, M]) Do(ctx context.Context, m M) error {
	key := c.config.Key(m)
	c.mu.Lock()
	if len(c.queue) == 0 && c.inFlight < c.config.Limit.Limit() && c.held[key] == 0 {
		c.inFlight++
		c.held[key]++
		c.mu.Unlock()
		if c.commit([]M{m})[0] {
			c.alone(ctx, m)
		}
		return nil
	}
	if err := ctx.Err(); err != nil {
		c.mu.Unlock()
		return err
	}
	w := newWaiter(m)
	c.queue = append(c.queue, w)
	c.launchLocked()
	c.mu.Unlock()
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { c.cancel(w) })
		defer stop()
	}
	w.decided.Wait()
	if w.canceled {
		return ctx.Err()
	}
	if w.alone {
		c.alone(ctx, m)
	}
	return nil
}

// cancel takes w out of the queue unless a group took it.
func (c *Committer[K, M]) cancel(w *waiter[M]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.taken {
		return // its group decides
	}
	c.queue = slices.DeleteFunc(c.queue, func(q *waiter[M]) bool { return q == w })
	w.canceled = true
	w.decided.Done()
}

// alone runs m by itself, and then lets its key go.
func (c *Committer[K, M]) alone(ctx context.Context, m M) {
	defer c.Release(c.config.Key(m))
	c.config.Alone(ctx, m)
}

// Hold marks key held by work outside any group until Release: no group
// takes a member of key meanwhile. Holding never waits.
func (c *Committer[K, M]) Hold(key K) {
	c.mu.Lock()
	c.held[key]++
	c.mu.Unlock()
}

// Release ends a hold, and starts groups for members that waited for it.
func (c *Committer[K, M]) Release(key K) {
	c.mu.Lock()
	c.unholdLocked(key)
	c.launchLocked()
	c.mu.Unlock()
}

func (c *Committer[K, M]) unholdLocked(key K) {
	switch n := c.held[key]; n {
	case 0: // a release without its hold would cancel another's hold
		panic("group: a key released but not held")
	case 1:
		delete(c.held, key)
	default:
		c.held[key] = n - 1
	}
}

// Stats are how many members wait for a group and how many keys are held.
func (c *Committer[K, M]) Stats() (queued, held int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue), len(c.held)
}

// commit runs one group, in flight already with its keys held, and returns
// by member whether it runs alone; the keys of the others go.
func (c *Committer[K, M]) commit(members []M) (alone []bool) {
	started := time.Now()
	committed, alone := c.config.Commit(members)
	if alone == nil {
		alone = make([]bool, len(members))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Members waited while this group ran, and there was room for another:
	// the limit, not the demand or the pool, bounded the groups.
	c.config.Limit.Observe(time.Since(started), committed, len(c.queue) > 0 && c.config.HasRoom())
	c.inFlight--
	for i, m := range members {
		if !alone[i] {
			c.unholdLocked(c.config.Key(m))
		}
	}
	c.launchLocked()
	return alone
}

// launchLocked starts groups of the queued members while fewer than the
// limit are in flight.
func (c *Committer[K, M]) launchLocked() {
	for allowed := c.config.Limit.Limit(); c.inFlight < allowed && len(c.queue) > 0; {
		taken := c.takeLocked(c.config.Size)
		if len(taken) == 0 {
			return // every queued member's key is held
		}
		c.inFlight++
		c.config.Go(func() {
			members := make([]M, len(taken))
			for i, w := range taken {
				members[i] = w.m
			}
			for i, alone := range c.commit(members) {
				taken[i].alone = alone
				taken[i].decided.Done()
			}
		})
	}
}

// takeLocked takes the oldest queued members for a group: at most size,
// one per key, none of a held key, each joining the first.
func (c *Committer[K, M]) takeLocked(size int) []*waiter[M] {
	var (
		taken []*waiter[M]
		kept  = c.queue[:0]
	)
	for _, w := range c.queue {
		key := c.config.Key(w.m)
		if len(taken) < size && c.held[key] == 0 &&
			(len(taken) == 0 || c.config.Joins == nil || c.config.Joins(taken[0].m, w.m)) {
			c.held[key]++
			w.taken = true
			taken = append(taken, w)
			continue
		}
		kept = append(kept, w)
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	return taken
}
