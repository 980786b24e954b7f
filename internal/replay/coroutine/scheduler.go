// Package coroutine runs functions as coroutines under a deterministic
// scheduler: one at a time, in creation order, each until it blocks, until
// all of them are blocked.
//
// Every coroutine is a goroutine, but only the one holding the scheduler's
// token runs; the token is handed over on unbuffered channels, so a
// coroutine's code and the scheduler never run concurrently and need no
// locks. Given the same coroutines and the same inputs, the interleaving is
// always the same.
package coroutine

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
)

// ErrNotInCoroutine is the panic value of [Scheduler.Await] called outside a
// coroutine of its scheduler.
var ErrNotInCoroutine = errors.New("coroutine: Await called outside a coroutine")

// PanicError is returned by [Scheduler.Run] when a coroutine panicked.
type PanicError struct {
	// Value is what the coroutine panicked with.
	Value any
	// Stack is the panicking goroutine's stack, taken where it panicked.
	Stack string
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("coroutine panicked: %v", e.Value) }

type resultKind int

const (
	resultBlocked resultKind = iota
	resultExited
	resultPanicked
)

type result struct {
	kind     resultKind
	progress bool
	panicErr *PanicError
}

type coroutine struct {
	fn       func()
	resume   chan struct{}
	started  bool
	done     bool
	progress bool // ran code since it was last resumed
}

// Scheduler runs coroutines deterministically. Its methods other than
// [Scheduler.Await] and [Scheduler.Spawn] must be called from one goroutine,
// never from inside a coroutine; Await and Spawn may only be called from
// inside a coroutine (Spawn also from outside, before or between runs).
type Scheduler struct {
	closed    bool
	closing   bool
	coroutine []*coroutine
	current   *coroutine
	yield     chan result
}

// New returns a Scheduler with no coroutines.
func New() *Scheduler {
	return &Scheduler{yield: make(chan result)}
}

// Spawn adds a coroutine that runs fn. It starts during the current or next
// [Scheduler.Run], after every coroutine spawned before it.
func (s *Scheduler) Spawn(fn func()) {
	if s.closing {
		runtime.Goexit() // a deferred call during Close: spawn nothing
	}
	s.coroutine = append(s.coroutine, &coroutine{fn: fn, resume: make(chan struct{}), progress: true})
}

// Await blocks the calling coroutine until cond returns true. Other
// coroutines run meanwhile; cond is re-evaluated each time the scheduler
// comes back to this coroutine. cond must not block.
func (s *Scheduler) Await(cond func() bool) {
	c := s.current
	if c == nil {
		panic(ErrNotInCoroutine)
	}
	if s.closing {
		runtime.Goexit()
	}
	for !cond() {
		s.yield <- result{kind: resultBlocked, progress: c.progress}
		<-c.resume
		if s.closing {
			runtime.Goexit()
		}
		c.progress = false
	}
	c.progress = true
}

// Run runs coroutines, one at a time in creation order, until none can make
// progress (each is blocked in Await on a false condition, or has returned)
// or stop returns true; stop (which may be nil) is checked each time a
// coroutine hands control back. A coroutine that panics ends the run with a
// *[PanicError]; the other coroutines stay where they are until [Scheduler.Close].
func (s *Scheduler) Run(stop func() bool) error {
	if s.closing || s.closed {
		return errors.New("coroutine: Run after Close")
	}
	for {
		progress := false
		for i := 0; i < len(s.coroutine); i++ {
			c := s.coroutine[i]
			if c.done {
				continue
			}
			r := s.step(c)
			switch r.kind {
			case resultExited:
				progress = true
			case resultPanicked:
				return r.panicErr
			case resultBlocked:
				progress = progress || r.progress
			}
			if stop != nil && stop() {
				return nil
			}
		}
		if !progress {
			return nil
		}
	}
}

// step hands the token to c and waits for it to come back.
func (s *Scheduler) step(c *coroutine) result {
	s.current = c
	if c.started {
		c.resume <- struct{}{}
	} else {
		c.started = true
		go s.main(c)
	}
	r := <-s.yield
	s.current = nil
	if r.kind != resultBlocked {
		c.done = true
	}
	return r
}

func (s *Scheduler) main(c *coroutine) {
	normal := false
	defer func() {
		if normal {
			s.yield <- result{kind: resultExited}
			return
		}
		r := recover()
		if r == nil || s.closing { // runtime.Goexit, or a panic while unwinding in Close
			s.yield <- result{kind: resultExited}
			return
		}
		s.yield <- result{kind: resultPanicked, panicErr: &PanicError{Value: r, Stack: string(debug.Stack())}}
	}()
	c.fn()
	normal = true
}

// Live returns how many coroutines have not returned.
func (s *Scheduler) Live() int {
	n := 0
	for _, c := range s.coroutine {
		if !c.done {
			n++
		}
	}
	return n
}

// Close unwinds every coroutine that has not returned (their deferred calls
// run; any Await or Spawn in them ends the coroutine at once) and waits for
// their goroutines to end. Afterwards no goroutine of s is left. Close is
// idempotent.
func (s *Scheduler) Close() {
	if s.closed {
		return
	}
	s.closing = true
	for _, c := range s.coroutine {
		if c.done {
			continue
		}
		c.done = true
		if !c.started {
			continue
		}
		s.current = c
		c.resume <- struct{}{}
		<-s.yield
		s.current = nil
	}
	s.closed = true
}
