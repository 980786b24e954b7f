// Package coroutine runs functions as coroutines under a deterministic
// scheduler: one at a time, in creation order, each until it blocks, until
// all of them are blocked.
//
// Every coroutine is a goroutine, but only the one holding the scheduler's
// token runs; the token is handed over on unbuffered channels, so a
// coroutine's code and the scheduler never run concurrently. Given the same
// coroutines and the same inputs, the interleaving is always the same.
//
// A coroutine that keeps the token too long (it blocks on something that is
// not the scheduler, or spins) is abandoned: Run returns an error, and the
// goroutine is unwound as soon as it calls back into the scheduler.
package coroutine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

var (
	// ErrNotInCoroutine is the panic value of [Scheduler.Await] called
	// outside a coroutine of its scheduler.
	ErrNotInCoroutine = errors.New("coroutine: Await called outside a coroutine")

	// ErrDeadlock is matched by the error of [Scheduler.Run] when a
	// coroutine kept the token longer than the deadlock timeout.
	ErrDeadlock = errors.New("coroutine: potential deadlock")
)

// PanicError is returned by [Scheduler.Run] when a coroutine panicked.
type PanicError struct {
	// Value is what the coroutine panicked with.
	Value any
	// Stack is the panicking goroutine's stack, taken where it panicked.
	Stack string
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("coroutine panicked: %v", e.Value) }

// DeadlockError is returned by [Scheduler.Run] when a coroutine did not hand
// the token back within the deadlock timeout. It matches [ErrDeadlock].
type DeadlockError struct {
	// Stack is the stuck goroutine's stack when it was abandoned, if found.
	Stack string
	// Timeout is the deadlock timeout.
	Timeout time.Duration
}

// Error implements error.
func (e *DeadlockError) Error() string {
	return fmt.Sprintf("coroutine: potential deadlock: code ran %s without yielding (blocked on a channel, mutex, sleep or I/O, or looping?)", e.Timeout)
}

// Is matches [ErrDeadlock].
func (e *DeadlockError) Is(target error) bool { return target == ErrDeadlock }

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
	head     [32]byte    // the start of its stack, "goroutine N [", N of at most 20 digits
	token    chan result // carries the token both ways, in turn: a zero result resumes it
	goidLen  uint8       // head[:goidLen] is "goroutine N ", once started; guarded by Scheduler.mu
	started  bool
	done     bool
	progress bool   // ran code since it was last resumed
	stack    []byte // where it last parked in Await, when stacks are recorded
}

// Scheduler runs coroutines deterministically. [Scheduler.Run] and
// [Scheduler.Close] are called from one goroutine, never from inside a
// coroutine; [Scheduler.Await] and [Scheduler.Guard] only from inside one;
// [Scheduler.Spawn] from either (from outside only between runs).
type Scheduler struct {
	deadlockTimeout time.Duration
	deadline        *time.Timer     // of the coroutine holding the token; from deadlines, during a Run
	start           func(fn func()) // starts a coroutine's goroutine

	// mu guards closing, current and coroutines against a coroutine that
	// was abandoned and runs on while the scheduler closes.
	mu           sync.Mutex
	closing      bool
	closed       bool
	recordStacks bool // set before the first Run; read only by coroutines
	coroutines   []*coroutine
	current      *coroutine
}

// RecordStacks makes each coroutine record its own stack each time it parks
// in [Scheduler.Await], for [Scheduler.Stacks]. Call it before the first
// [Scheduler.Run]. Recording changes nothing the coroutines do.
func (s *Scheduler) RecordStacks() { s.recordStacks = true }

// Stacks returns the stack of each coroutine parked in Await, in creation
// order, as recorded when it parked (empty unless [Scheduler.RecordStacks]
// was called). Call it between runs.
func (s *Scheduler) Stacks() []string {
	var stacks []string
	for _, c := range s.coroutines {
		if !c.done && c.started && len(c.stack) > 0 {
			stacks = append(stacks, string(c.stack))
		}
	}
	return stacks
}

// deadlines holds stopped timers for the runs' deadlines: a Run takes one
// at its first step and puts it back, stopped, when it returns. A timer is
// read only by the steps of the Run holding it (Run is never concurrent
// with itself, and an abandoned coroutine never reads it), and schedulers
// kept between runs hold none.
var deadlines = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// New returns a Scheduler with no coroutines. A coroutine that keeps the
// token longer than deadlockTimeout is abandoned (0 or less: never). Each
// coroutine runs on a goroutine that start starts to run the function it is
// given (nil: a go statement); the function returns when the coroutine
// ended, or runtime.Goexit ends the goroutine.
func New(deadlockTimeout time.Duration, start func(fn func())) *Scheduler {
	s := &Scheduler{}
	s.Init(deadlockTimeout, start)
	return s
}

// Init makes the zero Scheduler s (one held in a larger value, say) what
// New returns.
func (s *Scheduler) Init(deadlockTimeout time.Duration, start func(fn func())) {
	if start == nil {
		start = func(fn func()) { go fn() }
	}
	s.deadlockTimeout, s.start = deadlockTimeout, start
}

// Guard ends the calling coroutine (runtime.Goexit) if the scheduler is
// closing or has abandoned it. Call it before touching state shared with the
// scheduler's owner from inside a coroutine.
func (s *Scheduler) Guard() {
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		runtime.Goexit()
	}
}

// Spawn adds a coroutine that runs fn. It starts during the current or next
// [Scheduler.Run], after every coroutine spawned before it.
func (s *Scheduler) Spawn(fn func()) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		runtime.Goexit() // a deferred call during Close, or an abandoned coroutine
	}
	s.coroutines = append(s.coroutines, &coroutine{
		fn: fn, token: make(chan result), progress: true,
	})
	s.mu.Unlock()
}

// Await blocks the calling coroutine until cond returns true. Other
// coroutines run meanwhile; cond is re-evaluated each time the scheduler
// comes back to this coroutine. cond must not block.
func (s *Scheduler) Await(cond func() bool) {
	s.mu.Lock()
	c, closing := s.current, s.closing
	s.mu.Unlock()
	if closing {
		runtime.Goexit()
	}
	if c == nil {
		panic(ErrNotInCoroutine)
	}
	for !cond() {
		if s.recordStacks {
			c.stack = ownStack()
		}
		c.token <- result{kind: resultBlocked, progress: c.progress}
		<-c.token
		s.Guard()
		c.progress = false
	}
	c.progress = true
}

// Run runs coroutines, one at a time in creation order, until none can make
// progress (each is blocked in Await on a false condition, or has returned)
// or stop returns true; stop (which may be nil) is checked each time a
// coroutine hands control back. A coroutine that panics ends the run with a
// *[PanicError]; one that keeps the token past the deadlock timeout ends it
// with a *[DeadlockError], and one still running when ctx is done with
// ctx's error. After an error other than a panic the scheduler is closing:
// only Close may follow.
func (s *Scheduler) Run(ctx context.Context, stop func() bool) error {
	if s.closing || s.closed {
		return errors.New("coroutine: Run after Close")
	}
	defer s.putDeadline()
	for {
		progress := false
		for i := 0; i < len(s.coroutines); i++ {
			c := s.coroutines[i]
			if c.done {
				continue
			}
			r, err := s.step(ctx, c)
			if err != nil {
				return err
			}
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
func (s *Scheduler) step(ctx context.Context, c *coroutine) (result, error) {
	s.mu.Lock()
	s.current = c
	s.mu.Unlock()
	if c.started {
		c.token <- result{}
	} else {
		c.started = true
		s.start(func() { s.main(c) })
	}
	var timeout <-chan time.Time
	if s.deadlockTimeout > 0 {
		if s.deadline == nil {
			s.deadline = deadlines.Get().(*time.Timer) //nolint:forcetypeassert // deadlines holds only timers
		}
		s.deadline.Reset(s.deadlockTimeout)
		defer s.deadline.Stop()
		timeout = s.deadline.C
	}
	select {
	case r := <-c.token:
		s.mu.Lock()
		s.current = nil
		s.mu.Unlock()
		if r.kind != resultBlocked {
			c.done = true
		}
		return r, nil
	case <-timeout:
		return result{}, &DeadlockError{Stack: s.abandon(c), Timeout: s.deadlockTimeout}
	case <-ctx.Done():
		s.abandon(c)
		return result{}, fmt.Errorf("coroutine: abandoned running code: %w", context.Cause(ctx))
	}
}

// putDeadline puts back the timer the Run took, stopped by its last step.
func (s *Scheduler) putDeadline() {
	if s.deadline != nil {
		deadlines.Put(s.deadline)
		s.deadline = nil
	}
}

// abandon gives up on c, which holds the token: the scheduler starts
// closing, and c is unwound as soon as it calls back into the scheduler. It
// returns c's stack, if it can find it.
func (s *Scheduler) abandon(c *coroutine) string {
	s.mu.Lock()
	s.closing = true
	s.current = nil
	goid := c.head[:c.goidLen]
	s.mu.Unlock()
	c.done = true
	// Read c's stack before anything receives from it: until then c cannot
	// leave its goroutine, which may run other code once c did (goroutines
	// are reused).
	stack := stackOf(goid)
	go func() { // receive what c hands back from now on, and unwind it
		for r := range c.token {
			if r.kind != resultBlocked {
				return
			}
			c.token <- result{}
		}
	}()
	return stack
}

func (s *Scheduler) main(c *coroutine) {
	n := runtime.Stack(c.head[:], false)
	if i := bytes.IndexByte(c.head[:n], '['); i > 0 {
		s.mu.Lock()
		c.goidLen = uint8(i) // "goroutine 42 "
		s.mu.Unlock()
	}
	normal := false
	defer func() {
		if normal {
			c.token <- result{kind: resultExited}
			return
		}
		r := recover()
		s.mu.Lock()
		closing := s.closing
		s.mu.Unlock()
		if r == nil || closing { // runtime.Goexit, or a panic while unwinding
			c.token <- result{kind: resultExited}
			return
		}
		c.token <- result{kind: resultPanicked, panicErr: &PanicError{Value: r, Stack: string(debug.Stack())}}
	}()
	c.fn()
	normal = true
}

// ownStack returns the calling goroutine's stack.
func ownStack() []byte {
	buf := make([]byte, 16<<10)
	for {
		n := runtime.Stack(buf, false)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// stackOf returns the stack of the goroutine whose stack starts with goid.
func stackOf(goid []byte) string {
	if len(goid) == 0 {
		return ""
	}
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for stack := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.HasPrefix(stack, goid) {
			return string(stack)
		}
	}
	return ""
}

// Live returns how many coroutines have not returned.
func (s *Scheduler) Live() int {
	n := 0
	for _, c := range s.coroutines {
		if !c.done {
			n++
		}
	}
	return n
}

// Close unwinds every coroutine that has not returned (their deferred calls
// run; any Await, Spawn or Guard in them ends the coroutine at once) and
// waits for their goroutines to end, except an abandoned one, which ends when
// it next calls into the scheduler. Close is idempotent.
func (s *Scheduler) Close() {
	if s.closed {
		return
	}
	s.mu.Lock()
	s.closing = true
	coroutines := s.coroutines
	s.mu.Unlock()
	for _, c := range coroutines {
		if c.done {
			continue
		}
		c.done = true
		if !c.started {
			continue
		}
		s.mu.Lock()
		s.current = c
		s.mu.Unlock()
		c.token <- result{}
		<-c.token
	}
	s.mu.Lock()
	s.current = nil
	s.mu.Unlock()
	s.closed = true
}
