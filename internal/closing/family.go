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

// RiverClient inserts and cancels River jobs in a transaction;
// *river.Client[pgx.Tx] is one.
type RiverClient interface {
	Canceller
	inbox.Inserter
}

// ChildKey is the inbox dedup key of the outcome of the child workflow
// started by event scheduledEventID.
func ChildKey(scheduledEventID int64) string { return fmt.Sprintf("child:%d", scheduledEventID) }

// NotifyParent delivers the outcome of run runID, which just closed in tx, to
// its parent's inbox, if it is a child workflow (and did not continue as new:
// the chain's last run does).
func NotifyParent(ctx context.Context, tx pgx.Tx, st *store.Store, river RiverClient, runID uuid.UUID) error {
	var (
		parentRunID   *uuid.UUID
		parentEventID *int64
		state         string
		result        []byte
		failureRaw    []byte
	)
	err := tx.QueryRow(ctx, "SELECT parent_run_id, parent_event_id, state, result, failure FROM "+st.Names().Run+" WHERE run_id = $1", runID).
		Scan(&parentRunID, &parentEventID, &state, &result, &failureRaw)
	if err != nil {
		return fmt.Errorf("reading parent of run %s: %w", runID, err)
	}
	if parentRunID == nil || parentEventID == nil || state == "running" || state == "continued_as_new" {
		return nil
	}
	var (
		eventType history.EventType
		attrs     any
	)
	if state == "completed" {
		eventType = history.EventChildWorkflowCompleted
		attrs = &history.ChildWorkflowCompletedAttributes{Result: result, RunID: runID.String(), ScheduledEventID: *parentEventID}
	} else {
		var failure history.Failure
		if len(failureRaw) > 0 {
			_ = json.Unmarshal(failureRaw, &failure)
		}
		if failure.Message == "" {
			failure.Message = "the child workflow ended " + state
		}
		eventType = history.EventChildWorkflowFailed
		attrs = &history.ChildWorkflowFailedAttributes{Failure: failure, RunID: runID.String(), ScheduledEventID: *parentEventID, State: state}
	}
	data, err := json.Marshal(attrs)
	if err != nil {
		return err
	}
	_, err = inbox.Deliver(ctx, tx, st, river, *parentRunID, &inbox.Item{
		Attributes: data, DedupKey: ChildKey(*parentEventID), Type: string(eventType),
	})
	if err != nil && !errors.Is(err, inbox.ErrRunClosed) {
		return fmt.Errorf("telling the parent of run %s: %w", runID, err)
	}
	return nil
}

// CloseChildren applies the parent-close policy of every running child of
// run runID, which just closed in tx: terminate, request cancel, or abandon.
func CloseChildren(ctx context.Context, tx pgx.Tx, st *store.Store, river RiverClient, runID uuid.UUID) error {
	rows, err := tx.Query(ctx, "SELECT run_id, coalesce(parent_close_policy, $2) FROM "+st.Names().Run+
		" WHERE parent_run_id = $1 AND state = 'running'", runID, history.ParentCloseTerminate)
	if err != nil {
		return fmt.Errorf("finding children of run %s: %w", runID, err)
	}
	type child struct {
		id     uuid.UUID
		policy string
	}
	children, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (child, error) {
		var c child
		err := row.Scan(&c.id, &c.policy)
		return c, err
	})
	if err != nil {
		return fmt.Errorf("finding children of run %s: %w", runID, err)
	}
	for _, c := range children {
		switch c.policy {
		case history.ParentCloseAbandon:
		case history.ParentCloseRequestCancel:
			attrs, _ := json.Marshal(&history.CancelRequestedAttributes{Reason: "the parent run " + runID.String() + " closed"})
			if _, err := inbox.Deliver(ctx, tx, st, river, c.id, &inbox.Item{
				Attributes: attrs, DedupKey: "cancel", Type: string(history.EventCancelRequested),
			}); err != nil && !errors.Is(err, inbox.ErrRunClosed) {
				return fmt.Errorf("cancelling child %s: %w", c.id, err)
			}
		default:
			failure := &Failure{Message: "the parent run " + runID.String() + " closed", Type: FailureTypeTerminated}
			if _, err := Close(ctx, tx, st, river, c.id, "terminated", failure); err != nil && !errors.Is(err, ErrNotRunning) {
				return fmt.Errorf("terminating child %s: %w", c.id, err)
			}
		}
	}
	return nil
}
