package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/inbox"
)

// SignalArgs are a signal's arguments; Kind names the signal type, which
// workflow code receives with workflow.GetSignalChannel[T].
type SignalArgs interface {
	Kind() string
}

// SignalOpts are options of Signal. A nil *SignalOpts means defaults.
type SignalOpts struct {
	// RequestID makes the signal idempotent: a second signal with the same
	// request ID to the same run is dropped. Defaults to a random ID.
	RequestID string
}

// Signal is SignalTx in a transaction of its own.
func (c *Client) Signal(ctx context.Context, workflowID string, runID uuid.UUID, args SignalArgs, opts *SignalOpts) error {
	return c.inTxErr(ctx, func(tx pgx.Tx) error { return c.SignalTx(ctx, tx, workflowID, runID, args, opts) })
}

// SignalTx sends a signal to a running run as part of tx: the run receives
// it if and only if tx commits. A zero runID means the workflow's latest run.
// A signal to a closed run is a *RunClosedError. A signal that arrives while
// a workflow task runs is never lost: it waits in the run's inbox for the
// next task.
func (c *Client) SignalTx(ctx context.Context, tx pgx.Tx, workflowID string, runID uuid.UUID, args SignalArgs, opts *SignalOpts) error {
	if args == nil {
		return errors.New("weir: Signal needs signal args")
	}
	opts = cmp.Or(opts, &SignalOpts{})
	payload, err := c.encodePayload("signal", args.Kind()+" to workflow "+workflowID, args)
	if err != nil {
		return err
	}
	requestID := cmp.Or(opts.RequestID, uuid.NewString())
	info := &SignalInfo{Kind: args.Kind(), RequestID: requestID, RunID: runID, WorkflowID: workflowID}
	return c.interceptSignal(ctx, info, func(ctx context.Context) error {
		attrs, err := json.Marshal(&history.SignalReceivedAttributes{Args: payload, Headers: info.Headers, Kind: args.Kind(), RequestID: requestID})
		if err != nil {
			return &PayloadError{Op: "encoding", Err: err}
		}
		return c.deliver(ctx, tx, workflowID, runID, &inbox.Item{
			Attributes: attrs, DedupKey: "signal:" + requestID, Type: string(history.EventSignalReceived),
		}, "")
	})
}

// Cancel is CancelTx in a transaction of its own.
func (c *Client) Cancel(ctx context.Context, workflowID string, runID uuid.UUID, reason string) error {
	return c.inTxErr(ctx, func(tx pgx.Tx) error { return c.CancelTx(ctx, tx, workflowID, runID, reason) })
}

// CancelTx asks a running run to cancel as part of tx: the workflow's context
// is cancelled, its running activities see theirs cancelled, and unless the
// code decides otherwise the run ends cancelled (Get: a *WorkflowFailedError
// in state "cancelled"). Unlike Terminate, workflow code gets to clean up.
// Cancelling a run already cancelled is a no-op; one closed otherwise is a
// *RunClosedError. A zero runID means the workflow's latest run.
func (c *Client) CancelTx(ctx context.Context, tx pgx.Tx, workflowID string, runID uuid.UUID, reason string) error {
	attrs, err := json.Marshal(&history.CancelRequestedAttributes{Reason: reason})
	if err != nil {
		return err
	}
	return c.deliver(ctx, tx, workflowID, runID, &inbox.Item{
		Attributes: attrs, DedupKey: "cancel", Type: string(history.EventCancelRequested),
	}, "cancelled")
}

// deliver writes item to a run's inbox; a closed run is a *RunClosedError
// unless it closed in okState.
func (c *Client) deliver(ctx context.Context, tx pgx.Tx, workflowID string, runID uuid.UUID, item *inbox.Item, okState string) error {
	resolved, err := c.resolveRun(ctx, tx, workflowID, runID)
	if err != nil {
		return err
	}
	_, err = inbox.Deliver(ctx, tx, c.store, c.jobsOn(tx), resolved, item)
	for hops := 0; errors.Is(err, inbox.ErrRunClosed) && runID == uuid.Nil && hops < 10; hops++ {
		// Addressed to the workflow, not a run: if the run continued as
		// new meanwhile, the workflow goes on in the next run.
		next, qerr := c.store.NextRun(ctx, tx, resolved)
		if qerr != nil {
			break
		}
		resolved = next
		_, err = inbox.Deliver(ctx, tx, c.store, c.jobsOn(tx), resolved, item)
	}
	if errors.Is(err, inbox.ErrRunClosed) {
		run, err := c.store.GetRun(ctx, tx, resolved)
		if err != nil {
			return fmt.Errorf("reading run %s: %w", resolved, err)
		}
		if run.State == okState {
			return nil
		}
		return &RunClosedError{Generation: run.Generation, RunID: resolved, State: run.State, WorkflowID: workflowID}
	}
	if err != nil {
		return fmt.Errorf("delivering %s to workflow %s run %s: %w", item.Type, workflowID, resolved, err)
	}
	return nil
}

// SignalWithStart is SignalWithStartTx in a transaction of its own.
func (c *Client) SignalWithStart(ctx context.Context, args WorkflowArgs, opts *StartOpts, signal SignalArgs, signalOpts *SignalOpts) (*Run, error) {
	return inTx(ctx, c, func(tx pgx.Tx) (*Run, error) { return c.SignalWithStartTx(ctx, tx, args, opts, signal, signalOpts) })
}

// SignalWithStartTx signals the workflow's live run, starting it first (with
// args and opts) if it has none, as one step in tx: the signal is never lost
// between a check and a start, and concurrent callers all reach the same run.
// The returned Run's Created says whether this call started it.
func (c *Client) SignalWithStartTx(ctx context.Context, tx pgx.Tx, args WorkflowArgs, opts *StartOpts, signal SignalArgs, signalOpts *SignalOpts) (*Run, error) {
	if opts == nil || opts.WorkflowID == "" {
		return nil, errors.New("weir: SignalWithStart needs StartOpts.WorkflowID")
	}
	// The live run may close between finding it and signalling it; then a
	// new run starts and gets the signal. Twice is enough unless runs close
	// as fast as they start.
	const attempts = 3
	var err error
	for range attempts {
		var run *Run
		run, err = c.StartTx(ctx, tx, args, opts)
		var started *WorkflowAlreadyStartedError
		switch {
		case errors.As(err, &started):
			run = &Run{Generation: started.Generation, Namespace: started.Namespace, RunID: started.RunID, WorkflowID: started.WorkflowID, client: c}
		case err != nil:
			return nil, err
		}
		err = c.SignalTx(ctx, tx, run.WorkflowID, run.RunID, signal, signalOpts)
		if errors.Is(err, ErrRunClosed) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return run, nil
	}
	return nil, err
}
