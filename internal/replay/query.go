package replay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/weirhq/weir/workflow"
)

// ErrUnknownQuery is matched by Query's error when the workflow registered
// no handler for the query's kind.
var ErrUnknownQuery = errors.New("replay: no handler for the query")

// QueryParams are the inputs of [Query].
type QueryParams struct {
	// Args are the query's encoded args.
	Args []byte

	// ExecuteParams give the run: History, Codec, Info, Logger,
	// DeadlockTimeout and MaxPayloadBytes are used; Inputs and Now are
	// ignored.
	ExecuteParams

	// Kind is the query type: the Kind() of its args.
	Kind string
}

// Query answers a query on a run, open or closed: it replays the run's
// history, then calls the handler that the workflow registered for
// params.Kind with workflow.SetQueryHandler, and returns its encoded result.
// Nothing is recorded. A handler that tries to schedule, record or block
// fails with workflow.ErrQueryCommand; an error the handler returns is
// returned as is.
func Query(ctx context.Context, def *Definition, params *QueryParams) ([]byte, error) {
	e, err := newEngine(ctx, def, &params.ExecuteParams)
	if err != nil {
		return nil, err
	}
	defer e.sched.Close()
	if params.Kind == workflow.QueryStackTrace {
		e.sched.RecordStacks()
	}
	tasks, _, err := splitHistory(params.History, params.Decode)
	if err != nil {
		return nil, err
	}
	for i := range tasks {
		if err := e.replayTask(&tasks[i]); err != nil {
			return nil, err
		}
	}
	switch params.Kind {
	case workflow.QueryStackTrace:
		return e.codec.Encode(strings.Join(e.sched.Stacks(), "\n"))
	case workflow.QueryHandlers:
		return e.codec.Encode(&workflow.Handlers{
			Queries: append([]string{}, slices.Sorted(maps.Keys(e.more().queryHandlers))...),
			Signals: append([]string{}, slices.Sorted(maps.Keys(e.more().signalsOpened))...),
			Updates: append([]string{}, slices.Sorted(maps.Keys(e.more().updateHandlers))...),
		})
	}
	handler, ok := e.more().queryHandlers[params.Kind]
	if !ok {
		known := slices.Sorted(maps.Keys(e.more().queryHandlers))
		return nil, fmt.Errorf("%w %q (handlers: %s)", ErrUnknownQuery, params.Kind, strings.Join(known, ", "))
	}

	e.querying, e.replaying = true, false
	var (
		result   []byte
		queryErr error
		answered bool
	)
	e.sched.Spawn(func() {
		result, queryErr = handler(params.Args)
		answered = true
	})
	err = e.sched.Run(e.ctx, func() bool { return answered || e.abortErr != nil })
	switch {
	case e.abortErr != nil:
		return nil, e.abortErr
	case err != nil:
		return nil, e.runError(err)
	case !answered:
		return nil, fmt.Errorf("%w: the handler of query %q blocked", workflow.ErrQueryCommand, params.Kind)
	}
	return result, queryErr
}
