package workflow

import (
	"errors"

	"github.com/weirhq/weir/internal/replay/env"
)

// ErrNotInWorkflow is the panic value of a workflow function called with a
// Context that doesn't come from the engine running the workflow.
var ErrNotInWorkflow = errors.New("workflow: function called outside workflow code (the Context does not come from the engine)")

// Context is what workflow code gets instead of a context.Context: it carries
// the engine that replays the workflow, so the functions of this package can
// record commands and block deterministically. It is deliberately not a
// context.Context, so the compiler points out code that would reach the
// outside world from a workflow; only activities get a real context.
//
// Use [WithValue] to attach values and [WithCancel] to cancel a part of the
// workflow, as with package context. The Context given to Run is cancelled
// when the run is asked to cancel.
type Context interface {
	// Done is ready once the context is cancelled. Wait for it with a
	// [Selector] or [Await].
	Done() Readier

	// Err returns nil until the context is cancelled, then [ErrCanceled].
	Err() error

	// Value returns the value associated with key, or nil.
	Value(key any) any
}

// CancelFunc cancels a Context made by [WithCancel]. Calling it again does
// nothing.
type CancelFunc func()

// WithCancel returns a copy of parent that is cancelled when cancel is called
// or when parent is. Cancelling it cancels the activities scheduled with it
// (or with a Context derived from it) that are still pending: the worker is
// asked to cancel their jobs, and their futures fail at once with an
// [*ActivityError] wrapping [ErrCanceled].
func WithCancel(parent Context) (Context, CancelFunc) {
	c := &cancelCtx{Context: parent}
	return c, func() { c.canceled = true }
}

// NewDisconnectedContext returns a Context with the values of parent that is
// never cancelled: use it for cleanup activities after a cancellation.
func NewDisconnectedContext(parent Context) Context {
	return &disconnectedCtx{Context: parent}
}

type cancelCtx struct {
	Context
	canceled bool
}

func (c *cancelCtx) Done() Readier { return readyFunc(func() bool { return c.Err() != nil }) }

func (c *cancelCtx) Err() error {
	if c.canceled {
		return ErrCanceled
	}
	return c.Context.Err()
}

type disconnectedCtx struct{ Context }

func (*disconnectedCtx) Done() Readier { return readyFunc(func() bool { return false }) }
func (*disconnectedCtx) Err() error    { return nil }

// readyFunc adapts a function to Readier.
type readyFunc func() bool

func (f readyFunc) IsReady() bool { return f() }

// WithValue returns a copy of parent in which key is associated with val.
// Keys follow the rules of context.WithValue: use an unexported type.
func WithValue(parent Context, key, val any) Context {
	return &valueCtx{Context: parent, key: key, val: val}
}

type valueCtx struct {
	Context
	key, val any
}

func (c *valueCtx) Value(key any) any {
	if c.key == key {
		return c.val
	}
	return c.Context.Value(key)
}

// envOf returns the engine behind ctx, panicking with ErrNotInWorkflow when
// there is none (a programming error, like calling a method on nil).
func envOf(ctx Context) env.Env {
	if ctx != nil {
		if e, ok := ctx.Value(env.Key{}).(env.Env); ok {
			return e
		}
	}
	panic(ErrNotInWorkflow)
}
