package workflow

import "github.com/weirhq/weir/internal/replay/env"

// Future is a value that becomes available later in workflow time: an
// activity's result, or whatever a coroutine started with [Go] sets.
type Future[T any] interface {
	// Get blocks the calling coroutine until the future is ready, then
	// returns its value and error. It may be called any number of times.
	Get(ctx Context) (T, error)

	// IsReady reports whether Get would return without blocking.
	IsReady() bool
}

// Settable sets the value of the [Future] it was created with.
type Settable[T any] interface {
	// Set makes the future ready with value and err. Only the first call
	// has an effect.
	Set(value T, err error)
}

// NewFuture returns a future and the Settable that makes it ready, typically
// from a coroutine started with [Go].
func NewFuture[T any](ctx Context) (Future[T], Settable[T]) {
	f := &settableFuture[T]{seq: envOf(ctx).NextSeq}
	return f, f
}

// readySeqer is implemented by the futures of this package: readySeq orders
// futures by the time they became ready, for Selector.
type readySeqer interface {
	readySeq() int64
}

type settableFuture[T any] struct {
	seq func() int64

	ready bool
	order int64
	value T
	err   error
}

func (f *settableFuture[T]) Get(ctx Context) (T, error) {
	envOf(ctx).Await(func() bool { return f.ready })
	return f.value, f.err
}

func (f *settableFuture[T]) IsReady() bool { return f.ready }

func (f *settableFuture[T]) Set(value T, err error) {
	if f.ready {
		return
	}
	f.ready, f.value, f.err = true, value, err
	if f.seq != nil {
		f.order = f.seq()
	}
}

func (f *settableFuture[T]) readySeq() int64 { return f.order }

// readyFuture returns a future that is ready with err.
func readyFuture[T any](err error) Future[T] {
	return &settableFuture[T]{ready: true, err: err}
}

// promiseFuture is the future of an engine promise (an activity, a child, a
// timer): its outcome, decoded once.
type promiseFuture[R any] struct {
	promise *env.Promise
	decode  func(p *env.Promise, codec env.Codec, value *R) error // of promise, into value

	decoded bool
	value   R
	err     error
}

func (f *promiseFuture[R]) Get(ctx Context) (R, error) {
	e := envOf(ctx)
	e.AwaitPromise(f.promise)
	if !f.decoded {
		f.err = f.decode(f.promise, e.Codec(), &f.value) // the future holds the value decoded
		f.decoded = true
	}
	return f.value, f.err
}

func (f *promiseFuture[R]) IsReady() bool { return f.promise.Ready() }

func (f *promiseFuture[R]) readySeq() int64 { return f.promise.Seq() }
