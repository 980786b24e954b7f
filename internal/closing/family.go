package closing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/inbox"
	"github.com/weirhq/weir/internal/store"
)

// ChildKey is the inbox dedup key of the outcome of the child workflow
// started by event scheduledEventID.
func ChildKey(scheduledEventID int64) string { return fmt.Sprintf("child:%d", scheduledEventID) }

// NotifyParent delivers the outcome of run runID, which just closed in tx, to
// its parent's inbox, if it is a child workflow (and did not continue as new:
// the chain's last run does).
func NotifyParent(ctx context.Context, tx pgx.Tx, st *store.Store, river RiverClient, runID uuid.UUID) error {
	p, err := st.GetRunParent(ctx, tx, runID)
	if err != nil {
		return fmt.Errorf("reading parent of run %s: %w", runID, err)
	}
	if p.ParentRunID == nil || p.ParentEventID == nil || p.State == "running" || p.State == "continued_as_new" {
		return nil
	}
	parentEventID, state := *p.ParentEventID, p.State
	var (
		eventType history.EventType
		attrs     any
	)
	if state == "completed" {
		eventType = history.EventChildWorkflowCompleted
		attrs = &history.ChildWorkflowCompletedAttributes{Result: p.Result, RunID: runID.String(), ScheduledEventID: parentEventID}
	} else {
		var failure history.Failure
		if len(p.Failure) > 0 {
			_ = json.Unmarshal(p.Failure, &failure)
		}
		if failure.Message == "" {
			failure.Message = "the child workflow ended " + state
		}
		eventType = history.EventChildWorkflowFailed
		attrs = &history.ChildWorkflowFailedAttributes{Failure: failure, RunID: runID.String(), ScheduledEventID: parentEventID, State: state}
	}
	data, err := json.Marshal(attrs)
	if err != nil {
		return err
	}
	_, err = inbox.Deliver(ctx, tx, st, river, *p.ParentRunID, &inbox.Item{
		Attributes: data, DedupKey: ChildKey(parentEventID), Type: string(eventType),
	})
	if err != nil && !errors.Is(err, inbox.ErrRunClosed) {
		return fmt.Errorf("telling the parent of run %s: %w", runID, err)
	}
	return nil
}

// CloseChildren applies the parent-close policy of every running child of
// run runID, which just closed in tx: terminate, request cancel, or abandon.
func CloseChildren(ctx context.Context, tx pgx.Tx, st *store.Store, river RiverClient, runID uuid.UUID) error {
	children, err := st.RunningChildren(ctx, tx, runID, history.ParentCloseTerminate)
	if err != nil {
		return fmt.Errorf("finding children of run %s: %w", runID, err)
	}
	for _, c := range children {
		switch c.Policy {
		case history.ParentCloseAbandon:
		case history.ParentCloseRequestCancel:
			attrs, _ := json.Marshal(&history.CancelRequestedAttributes{Reason: "the parent run " + runID.String() + " closed"})
			if _, err := inbox.Deliver(ctx, tx, st, river, c.RunID, &inbox.Item{
				Attributes: attrs, DedupKey: "cancel", Type: string(history.EventCancelRequested),
			}); err != nil && !errors.Is(err, inbox.ErrRunClosed) {
				return fmt.Errorf("cancelling child %s: %w", c.RunID, err)
			}
		default:
			failure := &Failure{Message: "the parent run " + runID.String() + " closed", Type: FailureTypeTerminated}
			if _, err := Close(ctx, tx, st, river, c.RunID, "terminated", failure); err != nil && !errors.Is(err, ErrNotRunning) {
				return fmt.Errorf("terminating child %s: %w", c.RunID, err)
			}
		}
	}
	return nil
}
