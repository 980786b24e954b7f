package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/store"
)

// QueryTimeoutDefault is how long Query waits for a worker's answer.
const QueryTimeoutDefault = 10 * time.Second

// QueryArgs are a query's arguments; Kind names the query type, which
// workflow code answers with workflow.SetQueryHandler.
type QueryArgs interface {
	Kind() string
}

// QueryOpts are options of Query. A nil *QueryOpts means defaults.
type QueryOpts struct {
	// Timeout bounds the wait for an answer. Defaults to
	// QueryTimeoutDefault.
	Timeout time.Duration
}

// ErrQueryTimeout is matched (errors.Is) by a *QueryTimeoutError.
var ErrQueryTimeout = errors.New("weir: no worker answered the query in time")

// QueryTimeoutError means no worker answered a query in time: none runs the
// workflow's kind in its namespace, or all are busy or down.
type QueryTimeoutError struct {
	Query      string
	RunID      uuid.UUID
	Timeout    time.Duration
	WorkflowID string
}

func (e *QueryTimeoutError) Error() string {
	return fmt.Sprintf("weir: no worker answered query %s of workflow %s run %s within %s; is a worker of the workflow's kind running?",
		e.Query, e.WorkflowID, e.RunID, e.Timeout)
}

// Is makes errors.Is(err, ErrQueryTimeout) true.
func (e *QueryTimeoutError) Is(target error) bool { return target == ErrQueryTimeout }

// ErrQueryFailed is matched (errors.Is) by a *QueryFailedError.
var ErrQueryFailed = errors.New("weir: query failed")

// QueryFailedError means the workflow could not answer the query: its
// handler returned an error, it has no handler for the query (Failure.Type
// "UnknownQuery"), or replaying its history failed.
type QueryFailedError struct {
	Failure    *Failure
	Query      string
	RunID      uuid.UUID
	WorkflowID string
}

func (e *QueryFailedError) Error() string {
	return fmt.Sprintf("weir: query %s of workflow %s run %s failed: %v", e.Query, e.WorkflowID, e.RunID, e.Failure)
}

// Is makes errors.Is(err, ErrQueryFailed) true.
func (e *QueryFailedError) Is(target error) bool { return target == ErrQueryFailed }

// Unwrap exposes the failure.
func (e *QueryFailedError) Unwrap() error { return e.Failure }

// Query asks a run about its state and decodes the answer into out (a
// pointer). A worker that runs the workflow replays the run's history and
// calls the handler the workflow registered for the query's kind; nothing is
// recorded, and closed runs can be queried too. A zero runID means the
// workflow's latest run.
func (c *Client) Query(ctx context.Context, workflowID string, runID uuid.UUID, args QueryArgs, out any, opts *QueryOpts) error {
	if args == nil {
		return errors.New("weir: Query needs query args")
	}
	opts = cmp.Or(opts, &QueryOpts{})
	timeout := cmp.Or(opts.Timeout, QueryTimeoutDefault)
	if timeout < 0 {
		return errors.New("weir: query timeout must not be negative")
	}
	resolved, err := c.resolveRun(ctx, c.pool, workflowID, runID)
	if err != nil {
		return err
	}
	payload, err := c.encodePayload("query", args.Kind(), args)
	if err != nil {
		return err
	}

	// Listen for the answer before asking, so it can't slip by.
	l := c.sharedListener()
	answered := dbschema.Channel(c.config.Schema, dbschema.QueryAnsweredChannel)
	id, err := c.store.AskQuery(ctx, c.pool, store.AskQueryParams{RunID: resolved, Kind: args.Kind(), Args: payload, Timeout: timeout})
	if err != nil {
		return fmt.Errorf("asking query %s of workflow %s: %w", args.Kind(), workflowID, err)
	}
	defer func() { _ = c.store.DeleteQuery(context.WithoutCancel(ctx), c.pool, id) }()

	var wake <-chan struct{}
	if l != nil {
		var unregister func()
		wake, unregister = l.register(answered, strconv.FormatInt(id, 10))
		defer unregister()
		l.waitReady(ctx, listenerReadyWait)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(min(c.config.PollInterval, 250*time.Millisecond))
	defer poll.Stop()
	for {
		answer, err := c.store.GetQueryAnswer(ctx, c.pool, id)
		if err != nil {
			return fmt.Errorf("reading answer of query %s: %w", args.Kind(), err)
		}
		if answer.Answered {
			if len(answer.Failure) > 0 {
				return &QueryFailedError{Failure: decodeFailure(answer.Failure), Query: args.Kind(), RunID: resolved, WorkflowID: workflowID}
			}
			if out == nil {
				return nil
			}
			if err := c.config.Codec.Decode(answer.Result, out); err != nil {
				return fmt.Errorf("decoding answer of query %s: %w", args.Kind(), err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return &QueryTimeoutError{Query: args.Kind(), RunID: resolved, Timeout: timeout, WorkflowID: workflowID}
		case <-wake:
		case <-poll.C:
		}
	}
}
