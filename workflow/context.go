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
// Use [WithValue] to attach values, as with context.WithValue.
type Context interface {
	// Value returns the value associated with key, or nil.
	Value(key any) any
}

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
