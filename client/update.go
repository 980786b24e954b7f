package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/inbox"
	"github.com/weirhq/weir/internal/store"
)

// UpdateArgs are an update's arguments; Kind names the update type, which
// workflow code handles with workflow.SetUpdateHandler.
type UpdateArgs interface {
	Kind() string
}

// UpdateOpts are options of Update. A nil *UpdateOpts means defaults.
type UpdateOpts struct {
	// UpdateID identifies the update: calling Update again with the same ID
	// (after a timeout, a crash) returns the first call's answer instead of
	// updating twice. Defaults to a random ID.
	UpdateID string
}

// ErrUpdateRejected is matched (errors.Is) by an *UpdateRejectedError.
var ErrUpdateRejected = errors.New("weir: update rejected")

// UpdateRejectedError means the workflow did not take the update: its
// validator refused it, it has no handler for it (Failure.Type
// "UnknownUpdate"), or the run closed first ("WorkflowClosed"). Nothing was
// recorded in the run's history.
type UpdateRejectedError struct {
	Failure    *Failure
	RunID      uuid.UUID
	UpdateID   string
	WorkflowID string
}

func (e *UpdateRejectedError) Error() string {
	return fmt.Sprintf("weir: update %s of workflow %s run %s rejected: %v", e.UpdateID, e.WorkflowID, e.RunID, e.Failure)
}

// Is makes errors.Is(err, ErrUpdateRejected) true.
func (e *UpdateRejectedError) Is(target error) bool { return target == ErrUpdateRejected }

// Unwrap exposes the failure.
func (e *UpdateRejectedError) Unwrap() error { return e.Failure }

// ErrUpdateFailed is matched (errors.Is) by an *UpdateFailedError.
var ErrUpdateFailed = errors.New("weir: update failed")

// UpdateFailedError means the update was accepted (it is in the run's
// history) and its handler returned an error.
type UpdateFailedError struct {
	Failure    *Failure
	RunID      uuid.UUID
	UpdateID   string
	WorkflowID string
}

func (e *UpdateFailedError) Error() string {
	return fmt.Sprintf("weir: update %s of workflow %s run %s failed: %v", e.UpdateID, e.WorkflowID, e.RunID, e.Failure)
}

// Is makes errors.Is(err, ErrUpdateFailed) true.
func (e *UpdateFailedError) Is(target error) bool { return target == ErrUpdateFailed }

// Unwrap exposes the failure.
func (e *UpdateFailedError) Unwrap() error { return e.Failure }

// Update sends an update to a run and waits for its handler's result, decoded
// into out (a pointer; nil to discard it). The workflow's validator accepts or
// rejects it first (*UpdateRejectedError, nothing recorded); an accepted
// update is in the run's history before its result can exist, so it is
// durable whatever happens to the caller. ctx bounds the wait; calling again
// with the same UpdateOpts.UpdateID picks the answer up. A zero runID means
// the workflow's latest run.
func (c *Client) Update(ctx context.Context, workflowID string, runID uuid.UUID, args UpdateArgs, out any, opts *UpdateOpts) error {
	if args == nil {
		return errors.New("weir: Update needs update args")
	}
	opts = cmp.Or(opts, &UpdateOpts{})
	updateID := cmp.Or(opts.UpdateID, uuid.NewString())
	if len(updateID) > 255 {
		return fmt.Errorf("weir: update ID is %d bytes; at most 255", len(updateID))
	}
	resolved, err := c.resolveRun(ctx, c.pool, workflowID, runID)
	if err != nil {
		return err
	}
	payload, err := c.encodePayload("update", args.Kind(), args)
	if err != nil {
		return err
	}
	attrs, err := json.Marshal(&history.UpdateAcceptedAttributes{Args: payload, Kind: args.Kind(), UpdateID: updateID})
	if err != nil {
		return &PayloadError{Op: "encoding", Err: err}
	}

	// Listen before asking, so the answer can't slip by.
	channel := dbschema.Channel(c.config.Schema, dbschema.UpdateDoneChannel)
	var wake <-chan struct{}
	if l := c.sharedListener(); l != nil {
		var unregister func()
		wake, unregister = l.register(channel, resolved.String()+"/"+updateID)
		defer unregister()
		l.waitReady(ctx, listenerReadyWait)
	}

	key := store.UpdateKey{RunID: resolved, UpdateID: updateID}
	err = c.inTxErr(ctx, func(tx pgx.Tx) error {
		if requested, err := c.store.RequestUpdate(ctx, tx, key, args.Kind()); err != nil || !requested {
			return err // or sent before: just wait for its answer
		}
		return c.deliver(ctx, tx, workflowID, resolved, &inbox.Item{
			Attributes: attrs, DedupKey: inbox.UpdateKey(updateID), Type: string(history.EventUpdateAccepted),
		}, "")
	})
	if closed := (*RunClosedError)(nil); errors.As(err, &closed) {
		return &UpdateRejectedError{
			Failure: &Failure{Message: "the run is already " + closed.State, Type: "WorkflowClosed"},
			RunID:   closed.RunID, UpdateID: updateID, WorkflowID: workflowID,
		}
	}
	if err != nil {
		return fmt.Errorf("sending update %s to workflow %s: %w", args.Kind(), workflowID, err)
	}

	poll := time.NewTicker(c.config.PollInterval)
	defer poll.Stop()
	for {
		u, err := c.store.GetUpdate(ctx, c.pool, key)
		if err != nil {
			return fmt.Errorf("reading update %s of workflow %s: %w", updateID, workflowID, err)
		}
		switch {
		case u.State == "rejected":
			return &UpdateRejectedError{Failure: decodeFailure(u.Failure), RunID: resolved, UpdateID: updateID, WorkflowID: workflowID}
		case u.State == "completed" && len(u.Failure) > 0:
			return &UpdateFailedError{Failure: decodeFailure(u.Failure), RunID: resolved, UpdateID: updateID, WorkflowID: workflowID}
		case u.State == "completed":
			if out == nil {
				return nil
			}
			if err := c.config.Codec.Decode(u.Result, out); err != nil {
				return fmt.Errorf("decoding result of update %s: %w", updateID, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-poll.C:
		}
	}
}
