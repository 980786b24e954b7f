package workflow

import (
	"fmt"
	"time"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay/env"
)

// ParentClosePolicy is what happens to a running child workflow when its
// parent closes first.
type ParentClosePolicy string

const (
	// ParentCloseTerminate terminates the child. The default.
	ParentCloseTerminate ParentClosePolicy = history.ParentCloseTerminate
	// ParentCloseRequestCancel asks the child to cancel; its code may clean up.
	ParentCloseRequestCancel ParentClosePolicy = history.ParentCloseRequestCancel
	// ParentCloseAbandon leaves the child running on its own.
	ParentCloseAbandon ParentClosePolicy = history.ParentCloseAbandon
)

// ChildWorkflowOpts are options of ExecuteChildWorkflow. A nil
// *ChildWorkflowOpts means defaults.
type ChildWorkflowOpts struct {
	// ParentClosePolicy says what happens to the child if the parent closes
	// first. Defaults to ParentCloseTerminate.
	ParentClosePolicy ParentClosePolicy

	// Queue is the River queue of the child's workflow tasks. Defaults to the
	// parent's.
	Queue string

	// RunTimeout bounds the child's run. Defaults to none.
	RunTimeout time.Duration

	// WorkflowID is the child's workflow ID, with the usual guarantee: if it
	// already has a live run, the child does not start and its future fails
	// (a *ChildWorkflowError whose State is "not_started"). Defaults to the
	// parent's workflow ID, "/" and the child's event ID — deterministic, so
	// replays name the same child.
	WorkflowID string
}

// ChildWorkflowError is the error of a child workflow's future when the child
// did not complete: State is failed, cancelled, terminated, timed_out or
// not_started, and Cause the child's failure.
type ChildWorkflowError struct {
	Cause            error
	Kind             string
	RunID            string
	ScheduledEventID int64
	State            string
	WorkflowID       string
}

// Error implements error.
func (e *ChildWorkflowError) Error() string {
	return fmt.Sprintf("child workflow %s %s (%s): %v", e.Kind, e.WorkflowID, e.State, e.Cause)
}

// Unwrap returns the cause.
func (e *ChildWorkflowError) Unwrap() error { return e.Cause }

// ExecuteChildWorkflow starts a child workflow — a run of its own, with its
// own workflow ID, history and generation, started in the same transaction as
// the parent's task — and returns a future of its result, which the parent
// receives exactly once when the child closes. Cancelling ctx does not cancel
// the child (its ParentClosePolicy applies when the parent closes).
func ExecuteChildWorkflow[R any](ctx Context, args Args, opts *ChildWorkflowOpts) Future[R] {
	e := envOf(ctx)
	kind := ""
	if args != nil {
		kind = args.Kind()
	}
	if err := ctx.Err(); err != nil {
		return readyFuture[R](fmt.Errorf("child workflow %q not started: %w", kind, err))
	}
	if opts == nil {
		opts = &ChildWorkflowOpts{}
	}
	encoded, err := e.Codec().Encode(args)
	if err != nil {
		return readyFuture[R](fmt.Errorf("encoding args of child workflow %q: %w", kind, err))
	}
	if err := checkPayload(e.MaxPayloadBytes(), encoded, func() string { return fmt.Sprintf("args of child workflow %q", kind) }); err != nil {
		return readyFuture[R](err)
	}
	policy := opts.ParentClosePolicy
	switch policy {
	case "":
		policy = ParentCloseTerminate
	case ParentCloseTerminate, ParentCloseRequestCancel, ParentCloseAbandon:
	default:
		return readyFuture[R](fmt.Errorf("child workflow %q: unknown parent-close policy %q", kind, policy))
	}
	workflowID := opts.WorkflowID
	if workflowID == "" {
		// The event ID the command will get: deterministic.
		workflowID = fmt.Sprintf("%s/child-%d", e.Info().WorkflowID, e.NextEventID())
	}
	attrs := &history.ChildWorkflowScheduledAttributes{
		Args: encoded, Kind: kind, ParentClosePolicy: string(policy), Queue: opts.Queue,
		RunTimeout: history.Duration(opts.RunTimeout), WorkflowID: workflowID,
	}
	p := e.StartChildWorkflow(attrs)
	return &promiseFuture[R]{promise: p, decode: func(p *env.Promise, codec env.Codec, value *R) error {
		return childOutcome(p, workflowID, codec, value)
	}}
}

// childOutcome decodes the outcome of a child workflow's promise into value.
func childOutcome[R any](p *env.Promise, workflowID string, codec env.Codec, value *R) error {
	switch outcome := p.Outcome().(type) {
	case *history.ChildWorkflowCompletedAttributes:
		if err := codec.Decode(outcome.Result, value); err != nil {
			return fmt.Errorf("decoding result of child workflow %s as %T: %w", workflowID, *value, err)
		}
		return nil
	case *history.ChildWorkflowFailedAttributes:
		return &ChildWorkflowError{
			Cause: errorFromFailure(&outcome.Failure), Kind: p.Kind, RunID: outcome.RunID,
			ScheduledEventID: p.EventID, State: outcome.State, WorkflowID: workflowID,
		}
	default:
		return fmt.Errorf("child workflow %s: unexpected outcome %T", workflowID, outcome)
	}
}
