// Package group commits work in groups: many members, each a unit of work
// that could commit in a transaction of its own, in one transaction.
// Postgres's costs are mostly per transaction and per statement, so under
// load a group of members costs far less per member than each alone.
//
// A Committer never waits to fill a group. A member that arrives while
// nothing waits and fewer groups than the limit are in flight commits at
// once, on its caller's goroutine (a group of one). Members that arrive
// while every slot is taken queue; the next group to start takes them, up
// to the group size and at most one per key (a run, a workflow ID): a
// member must see the writes of the one before it with its key, and no
// group waits for another's key. How many groups may be in flight is
// decided by an adaptive limit.Limiter, from each group's latency per
// member. A member that its group did not decide (the group failed and
// rolled back, or the member could not go in it) runs alone afterwards,
// its key still held, so that only the faulty member fails.
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
	// Limit bounds the groups in flight and learns from their latency.
	Limit *limit.Limiter
	// Size is the most members in one group; at least 1.
	Size int
	// Key is a member's key: a group takes at most one member per key, and
	// none whose key is held.
	Key func(M) K
	// Joins, if set, tells whether m may join a group whose first member
	// is first.
	Joins func(first, m M) bool
	// Commit commits members (one or more) in one transaction, and returns
	// how many it committed and, by member, whether it left that member
	// undecided: those run alone (Alone) once the group ended.
	Commit func(members []M) (committed int, alone []bool)
	// Alone runs a member that its group left undecided, by itself, on the
	// member's own goroutine; the member's key stays held until it returns.
	Alone func(ctx context.Context, m M)
	// HasRoom tells whether another group could have a connection now (an
	// idle one, or room to open one): only then may the limit grow.
	HasRoom func() bool
	// Go runs a group on a goroutine of its own; defaults to the go
	// statement.
	Go func(func())
}

// Committer queues members and commits them in groups (see the package
// doc). Its methods are safe for concurrent use.
type Committer[K comparable, M any] struct {
	config Config[K, M]

	mu       sync.Mutex
	queue    []*waiter[M] // oldest first
	inFlight int          // groups
	held     map[K]int    // keys of members in flight or running alone, and holds
}

// waiter is a queued member.
type waiter[M any] struct {
	m     M
	taken bool      // a group took it (guarded by Committer.mu)
	alone chan bool // the group's verdict: whether it runs alone
}

// New returns a Committer configured by config.
func New[K comparable, M any](config Config[K, M]) *Committer[K, M] {
	config.Size = max(config.Size, 1)
	if config.Go == nil {
		config.Go = func(f func()) { go f() }
	}
	return &Committer[K, M]{config: config, held: make(map[K]int)}
}

// Do commits m, in a group or alone, and returns once it is decided. Only
// while m waits in the queue does ctx end the wait: then m leaves the queue
// and Do returns ctx's error. Once a group took m, its verdict decides.
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
	w := &waiter[M]{m: m, alone: make(chan bool, 1)}
	c.queue = append(c.queue, w)
	c.launchLocked()
	c.mu.Unlock()
	var alone bool
	select {
	case alone = <-w.alone:
	case <-ctx.Done():
		c.mu.Lock()
		if !w.taken {
			c.queue = slices.DeleteFunc(c.queue, func(q *waiter[M]) bool { return q == w })
			c.mu.Unlock()
			return ctx.Err()
		}
		c.mu.Unlock()
		alone = <-w.alone
	}
	if alone {
		c.alone(ctx, m)
	}
	return nil
}

// alone runs m by itself, and then lets its key go.
func (c *Committer[K, M]) alone(ctx context.Context, m M) {
	defer c.Release(c.config.Key(m))
	c.config.Alone(ctx, m)
}

// Hold marks key held, by work outside any group: no group takes a member
// of key until Release. Holding never waits.
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
	n, ok := c.held[key]
	if !ok {
		// A release without its hold would cancel another's hold.
		panic("group: a key released but not held")
	}
	if n <= 1 {
		delete(c.held, key)
		return
	}
	c.held[key] = n - 1
}

// Queued is how many members wait for a group.
func (c *Committer[K, M]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// Held is how many keys are held.
func (c *Committer[K, M]) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
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
	// Members waiting for a group while this one ran, and room for
	// another: the limit, not the demand or the pool, bounded the groups.
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
	for c.inFlight < c.config.Limit.Limit() && len(c.queue) > 0 {
		taken := c.takeLocked()
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
				taken[i].alone <- alone
			}
		})
	}
}

// takeLocked takes the oldest queued members for a group: at most Size,
// one per key, none of a held key, each joining the first.
func (c *Committer[K, M]) takeLocked() []*waiter[M] {
	var (
		taken []*waiter[M]
		kept  = c.queue[:0]
	)
	for _, w := range c.queue {
		key := c.config.Key(w.m)
		if len(taken) < c.config.Size && c.held[key] == 0 &&
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
