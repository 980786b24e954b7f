package workflow

import (
	"errors"
	"fmt"
)

// ErrQueryCommand is matched by the error of a query whose handler tried to
// do something that would change the run (schedule an activity, start a
// timer, record a side effect) or to block: handlers may only read state.
var ErrQueryCommand = errors.New("workflow: query handlers may only read state")

// QueryStackTrace is the kind of the query that every workflow answers
// without registering a handler: the stacks of the run's coroutines (its
// Run and each Go) where they wait, as Go prints them, separated by blank
// lines; empty once every coroutine returned. The query takes no args. A
// handler registered under this kind is not called.
const QueryStackTrace = "__stack_trace"

// QueryHandlers is the kind of the query that every workflow answers without
// registering a handler: a [Handlers] of what the run accepts, as its code
// has registered by the end of its history. The query takes no args.
const QueryHandlers = "__handlers"

// Handlers is the answer of a [QueryHandlers] query: the kinds of the
// queries, updates and signals the run's code has registered handlers or
// opened channels for, each sorted.
type Handlers struct {
	Queries []string `json:"queries"`
	Signals []string `json:"signals"`
	Updates []string `json:"updates"`
}

// QueryArgs are a query's arguments; Kind names the query type.
type QueryArgs interface {
	// Kind names the query type.
	Kind() string
}

// SetQueryHandler makes the run answer queries of type Q (by Q.Kind()) with
// handler, which reads the workflow's state as replay left it and returns
// an R. A handler must not block, schedule anything or change state.
// Register handlers early in Run, before the code blocks: a query replays the
// run's history and then calls the handler registered at that point.
//
//	status := "charging"
//	workflow.SetQueryHandler(ctx, func(StatusQuery) (string, error) { return status, nil })
func SetQueryHandler[Q QueryArgs, R any](ctx Context, handler func(args Q) (R, error)) {
	e := envOf(ctx)
	var zero Q
	kind := zero.Kind()
	e.SetQueryHandler(kind, func(encoded []byte) ([]byte, error) {
		var args Q
		if err := e.Codec().Decode(encoded, &args); err != nil {
			return nil, fmt.Errorf("decoding args of query %s as %T: %w", kind, args, err)
		}
		result, err := handler(args)
		if err != nil {
			return nil, err
		}
		return e.Codec().Encode(result)
	})
}
