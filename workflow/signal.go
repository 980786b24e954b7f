package workflow

import (
	"fmt"

	"github.com/weirhq/weir/internal/replay/env"
)

// SignalArgs are a signal's arguments. Kind names the signal type; it is
// persisted, so it must be stable. Clients send a signal as a value of the
// type; workflow code receives it typed from [GetSignalChannel].
type SignalArgs interface {
	// Kind names the signal type.
	Kind() string
}

// SignalChannel delivers the signals of type T sent to the run, in the order
// they entered history. Signals wait in the channel until received, even
// those that arrived before the workflow asked for the channel.
type SignalChannel[T SignalArgs] struct {
	kind  string
	queue *env.SignalQueue
}

// GetSignalChannel returns the channel of the signals of type T (by
// T.Kind()). Every call returns a channel on the same queue.
func GetSignalChannel[T SignalArgs](ctx Context) *SignalChannel[T] {
	var zero T
	kind := zero.Kind()
	return &SignalChannel[T]{kind: kind, queue: envOf(ctx).SignalQueue(kind)}
}

// Receive blocks until a signal is available and returns it. It returns
// ctx.Err() if ctx is cancelled first, and an error if the signal's args
// can't be decoded as T (the signal is consumed all the same).
func (c *SignalChannel[T]) Receive(ctx Context) (T, error) {
	e := envOf(ctx)
	e.Await(func() bool { return c.queue.Len() > 0 || ctx.Err() != nil })
	if c.queue.Len() == 0 {
		var zero T
		return zero, ctx.Err()
	}
	return c.pop(e.Codec())
}

// TryReceive returns a signal if one is available, without blocking: ok
// reports whether one was. err is set if its args can't be decoded as T.
func (c *SignalChannel[T]) TryReceive(ctx Context) (value T, ok bool, err error) {
	e := envOf(ctx)
	if c.queue.Len() == 0 {
		return value, false, nil
	}
	value, err = c.pop(e.Codec())
	return value, true, err
}

// Len returns how many signals wait to be received.
func (c *SignalChannel[T]) Len() int { return c.queue.Len() }

// IsReady reports whether a signal waits, so a [Selector] can wait on the
// channel (see [Selector.AddReceive]).
func (c *SignalChannel[T]) IsReady() bool { return c.queue.Len() > 0 }

func (c *SignalChannel[T]) readySeq() int64 {
	s, _ := c.queue.Peek()
	return s.Seq
}

func (c *SignalChannel[T]) pop(codec env.Codec) (T, error) {
	var value T
	s, _ := c.queue.Pop()
	if err := codec.Decode(s.Args, &value); err != nil {
		return value, fmt.Errorf("decoding signal %s as %T: %w", c.kind, value, err)
	}
	return value, nil
}
