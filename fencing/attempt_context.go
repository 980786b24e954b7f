package fencing

import (
	"context"
	"sync"
	"time"
)

// attemptCtx is the context half of an attempt's state: the attempt's work
// context is its attemptState, one allocation, instead of a cancel context
// with a cause and, for a deadline (WithAttemptDeadline), a timer context
// derived from it. Callers see what the standard library's pair would give
// them: Err is Canceled when cancelled and DeadlineExceeded at the
// deadline, context.Cause the cancel's cause (ErrLeaseLost, River's
// ErrJobCancelledRemotely) or the parent's, and a context derived from it is
// cancelled with the same Err and cause, without a goroutine of its own (the
// standard library attaches it through the AfterFunc method).
type attemptCtx struct {
	parent context.Context

	ctxMu      sync.Mutex
	stopParent func() bool     // ends the watch on parent; nil: none (or it fired)
	deadline   time.Time       // zero: none of its own
	timer      *time.Timer     // the deadline's, while it runs
	done       chan struct{}   // made on first Done
	causeCtx   context.Context // a cancelled context carrying the cause, when it is not Err
	afters     []afterCall     // what AfterFunc registered, until cancel
	nextAfter  uint64
}

// ctxEnd is how an attempt context ended (attemptState.ctxEnded, under
// ctxMu), which gives its Err: a byte in the state's padding, not an error.
type ctxEnd uint8

const (
	running        ctxEnd = iota
	endedCancelled        // Canceled
	endedDeadline         // DeadlineExceeded
	endedParent           // the parent's Err
)

func (s *attemptState) errOf(how ctxEnd) error {
	switch how {
	case endedCancelled:
		return context.Canceled
	case endedDeadline:
		return context.DeadlineExceeded
	case endedParent:
		return s.parent.Err()
	}
	return nil
}

type afterCall struct {
	id uint64
	f  func()
}

// cancelCtxKey is the key under which the standard library's contexts
// answer with their cancel state; context.Cause asks for it. It is learnt
// from context.Cause itself, the key being unexported.
var cancelCtxKey = func() any {
	var spy keySpy
	_ = context.Cause(&spy)
	return spy.key
}()

type keySpy struct {
	context.Context
	key any
}

func (s *keySpy) Err() error        { return context.Canceled }
func (s *keySpy) Value(key any) any { s.key = key; return nil }

// closedDone is the Done channel of a context cancelled before anyone asked
// for its channel.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// start makes parent the attempt context's parent: when parent ends first,
// the attempt context ends with parent's Err and cause.
func (s *attemptState) start(parent context.Context) {
	s.parent = parent
	if parent.Done() == nil {
		return
	}
	if parent.Err() != nil {
		s.end(endedParent, context.Cause(parent))
		return
	}
	stop := context.AfterFunc(parent, s.parentEnded)
	s.ctxMu.Lock()
	s.stopParent = stop
	s.ctxMu.Unlock()
}

func (s *attemptState) parentEnded() { s.end(endedParent, context.Cause(s.parent)) }

// cancel is the attempt context's context.CancelCauseFunc.
func (s *attemptState) cancel(cause error) { s.end(endedCancelled, cause) }

func (s *attemptState) expire() { s.end(endedDeadline, nil) }

// end cancels the attempt context as how says, with cause (its Err if
// nil), unless it ended before, and then what AfterFunc registered,
// synchronously, as a cancel context cancels its children.
func (s *attemptState) end(how ctxEnd, cause error) {
	err := s.errOf(how)
	if cause == nil {
		cause = err
	}
	var causeCtx context.Context
	if cause != err {
		var cancel context.CancelCauseFunc
		causeCtx, cancel = context.WithCancelCause(context.Background())
		cancel(cause)
	}
	s.ctxMu.Lock()
	if s.ctxEnded != running {
		s.ctxMu.Unlock()
		return
	}
	s.ctxEnded, s.causeCtx = how, causeCtx
	if s.done == nil {
		s.done = closedDone
	} else {
		close(s.done)
	}
	afters, timer, stopParent := s.afters, s.timer, s.stopParent
	s.afters, s.timer, s.stopParent = nil, nil, nil
	s.ctxMu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	if stopParent != nil {
		stopParent()
	}
	for _, a := range afters {
		a.f()
	}
}

// setDeadline gives the attempt context deadline d, as context.WithDeadline
// would give a context derived from it; false if it has one already.
func (s *attemptState) setDeadline(d time.Time) bool {
	s.ctxMu.Lock()
	if !s.deadline.IsZero() {
		s.ctxMu.Unlock()
		return false
	}
	s.deadline = d
	parentFirst := false
	if cur, ok := s.parent.Deadline(); ok && cur.Before(d) {
		parentFirst = true
	}
	dur := time.Until(d)
	if s.ctxEnded == running && !parentFirst && dur > 0 {
		s.timer = time.AfterFunc(dur, s.expire)
	}
	s.ctxMu.Unlock()
	if !parentFirst && dur <= 0 {
		s.expire()
	}
	return true
}

// Deadline is the earlier of the attempt context's own deadline and its
// parent's.
func (s *attemptState) Deadline() (time.Time, bool) {
	d, ok := s.parent.Deadline()
	s.ctxMu.Lock()
	own := s.deadline
	s.ctxMu.Unlock()
	if !own.IsZero() && (!ok || !d.Before(own)) {
		return own, true
	}
	return d, ok
}

func (s *attemptState) Done() <-chan struct{} {
	s.ctxMu.Lock()
	defer s.ctxMu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
	}
	return s.done
}

func (s *attemptState) Err() error {
	s.ctxMu.Lock()
	how := s.ctxEnded
	s.ctxMu.Unlock()
	return s.errOf(how)
}

// Value answers attemptKey with the state and context.Cause's question
// with a context carrying the cause, when the cause is not Err (Cause
// returns Err otherwise); other keys are the parent's.
func (s *attemptState) Value(key any) any {
	switch key {
	case attemptKey{}:
		return s
	case cancelCtxKey:
		s.ctxMu.Lock()
		causeCtx := s.causeCtx
		s.ctxMu.Unlock()
		if causeCtx == nil {
			return nil
		}
		return causeCtx.Value(key)
	}
	return s.parent.Value(key)
}

// AfterFunc calls f once the attempt context ends: at once in a goroutine of
// its own if it has ended, else synchronously when it ends, as a cancel
// context cancels its children (f must not block). The returned stop
// unregisters f and reports whether it did. The standard library attaches a
// context derived from the attempt context through this method.
func (s *attemptState) AfterFunc(f func()) func() bool {
	s.ctxMu.Lock()
	defer s.ctxMu.Unlock()
	if s.ctxEnded != running {
		go f()
		return func() bool { return false }
	}
	s.nextAfter++
	id := s.nextAfter
	s.afters = append(s.afters, afterCall{id: id, f: f})
	return func() bool { return s.stopAfter(id) }
}

func (s *attemptState) stopAfter(id uint64) bool {
	s.ctxMu.Lock()
	defer s.ctxMu.Unlock()
	for i, a := range s.afters {
		if a.id == id {
			last := len(s.afters) - 1
			s.afters[i] = s.afters[last]
			s.afters[last] = afterCall{}
			s.afters = s.afters[:last]
			return true
		}
	}
	return false
}

var noCancel context.CancelFunc = func() {}

// WithAttemptDeadline is context.WithDeadline(ctx, d) for the work context
// of an attempt. When ctx is that context itself, as the fencing plugin
// passes it to Worker.Work, the attempt context takes the deadline and ctx
// is returned, with a cancel that does nothing (the attempt context ends
// when the work returns): ctx then ends at d with DeadlineExceeded, as the
// derived context would, and so does the attempt context, one context less
// to allocate. Otherwise, or when the attempt context has a deadline of its
// own already, it returns context.WithDeadline(ctx, d).
func WithAttemptDeadline(ctx context.Context, d time.Time) (context.Context, context.CancelFunc) {
	if st, ok := ctx.(*attemptState); ok && st.parent != nil && st.setDeadline(d) {
		return st, noCancel
	}
	return context.WithDeadline(ctx, d)
}
