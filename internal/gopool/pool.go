// Package gopool runs functions on goroutines that it keeps for reuse,
// with the stacks they grew (docs/decisions/0018).
//
// What a function leaves on its goroutine reaches the next one (a thread
// locked with runtime.LockOSThread, say), except profiler labels, which
// the pool clears: run arbitrary user code (activities) elsewhere.
package gopool

import (
	"context"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"
)

// Pool runs functions on goroutines it keeps: Go hands a function to a
// goroutine waiting for one, or starts a goroutine, which then waits up to
// the idle time for another function before it returns. The zero Pool is
// not usable; use New.
type Pool struct {
	work chan func()
	idle time.Duration

	mu     sync.Mutex
	closed bool
	done   chan struct{}
	live   atomic.Int32 // goroutines of the pool
}

// New returns a pool whose goroutines wait idle for up to idle for their
// next function.
func New(idle time.Duration) *Pool {
	return &Pool{work: make(chan func()), idle: idle, done: make(chan struct{})}
}

// Go runs fn on a goroutine of p: one waiting for work if there is one, a
// new one otherwise. After Close it runs fn on a goroutine of its own.
func (p *Pool) Go(fn func()) {
	select {
	case p.work <- fn:
		return
	default:
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		go fn()
		return
	}
	p.live.Add(1)
	p.mu.Unlock()
	go p.loop(fn)
}

// loop runs fn, then the functions handed to it, until it waited idle for
// none or p closed. Each function starts without profiler labels (a new
// goroutine inherits its creator's; a function may set its own).
func (p *Pool) loop(fn func()) {
	defer p.live.Add(-1)
	timer := time.NewTimer(p.idle)
	defer timer.Stop()
	for {
		pprof.SetGoroutineLabels(context.Background())
		fn()
		fn = nil
		timer.Reset(p.idle)
		select {
		case fn = <-p.work:
		case <-timer.C:
			return
		case <-p.done:
			return
		}
	}
}

// Close makes p's waiting goroutines return, and those running a function
// return once it does; it does not wait for them. Later calls to Go start
// goroutines that p does not keep.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.done)
	}
}
