package client

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
)

const (
	// HistoryPageSizeDefault is the page size of History.
	HistoryPageSizeDefault = 500

	// HistoryPageSizeMax caps HistoryOpts.Limit.
	HistoryPageSizeMax = 10000
)

// EventType names what a history event records.
type EventType string

// Event types. The attributes of each are JSON documented with the
// engine; names are stable (they are persisted).
const (
	EventActivityCanceled        EventType = "ActivityCanceled"
	EventActivityCancelRequested EventType = "ActivityCancelRequested"
	EventActivityCompleted       EventType = "ActivityCompleted"
	EventActivityFailed          EventType = "ActivityFailed"
	EventActivityScheduled       EventType = "ActivityScheduled"
	EventActivityTimedOut        EventType = "ActivityTimedOut"
	EventCancelRequested         EventType = "CancelRequested"
	EventChildWorkflowCompleted  EventType = "ChildWorkflowCompleted"
	EventChildWorkflowFailed     EventType = "ChildWorkflowFailed"
	EventChildWorkflowScheduled  EventType = "ChildWorkflowScheduled"
	EventMarkerRecorded          EventType = "MarkerRecorded"
	EventSignalReceived          EventType = "SignalReceived"
	EventTimerCanceled           EventType = "TimerCanceled"
	EventTimerFired              EventType = "TimerFired"
	EventTimerStarted            EventType = "TimerStarted"
	EventUpdateAccepted          EventType = "UpdateAccepted"
	EventUpdateCompleted         EventType = "UpdateCompleted"
	EventWorkflowCanceled        EventType = "WorkflowCanceled"
	EventWorkflowCompleted       EventType = "WorkflowCompleted"
	EventWorkflowContinuedAsNew  EventType = "WorkflowContinuedAsNew"
	EventWorkflowFailed          EventType = "WorkflowFailed"
	EventWorkflowStarted         EventType = "WorkflowStarted"
	EventWorkflowTaskStarted     EventType = "WorkflowTaskStarted"
)

// Event is one entry of a run's history, in the JSON form the engine stores
// and the replayer reads.
type Event struct {
	// Attributes are the event's attributes (JSON; their shape depends on
	// Type). Decode them with DecodeAttributes.
	Attributes json.RawMessage `json:"attributes"`

	// ID is the event's position, 1, 2, … without gaps.
	ID int64 `json:"id"`

	// Time is the database time the event was appended.
	Time time.Time `json:"time"`

	// Type says what happened.
	Type EventType `json:"type"`
}

// DecodeAttributes decodes an event's attributes into T, a struct with the
// fields you need, e.g. struct{ Kind string `json:"kind"` } for an
// ActivityScheduled event.
func DecodeAttributes[T any](e *Event) (T, error) {
	var out T
	if err := json.Unmarshal(e.Attributes, &out); err != nil {
		return out, fmt.Errorf("decoding attributes of event %d (%s): %w", e.ID, e.Type, err)
	}
	return out, nil
}

// HistoryOpts page through a history. A nil *HistoryOpts reads the first
// page.
type HistoryOpts struct {
	// AfterEventID starts the page after this event. Defaults to 0 (the
	// start).
	AfterEventID int64

	// Limit is the page size. Defaults to HistoryPageSizeDefault; at most
	// HistoryPageSizeMax.
	Limit int
}

// HistoryPage is one page of a history.
type HistoryPage struct {
	// Events are the page's events, in order.
	Events []*Event

	// NextAfterEventID continues with the next page (as
	// HistoryOpts.AfterEventID); 0 when this page is the last so far.
	NextAfterEventID int64
}

// History reads a page of a run's history. A zero runID means the
// workflow's latest run.
func (c *Client) History(ctx context.Context, workflowID string, runID uuid.UUID, opts *HistoryOpts) (*HistoryPage, error) {
	opts = cmp.Or(opts, &HistoryOpts{})
	limit := cmp.Or(opts.Limit, HistoryPageSizeDefault)
	if limit < 0 || limit > HistoryPageSizeMax {
		return nil, fmt.Errorf("weir: history page size %d is not between 1 and %d", limit, HistoryPageSizeMax)
	}
	resolved, err := c.resolveRun(ctx, c.pool, workflowID, runID)
	if err != nil {
		return nil, err
	}
	stored, err := c.store.Events(ctx, c.pool, resolved, opts.AfterEventID, limit+1)
	if err != nil {
		return nil, fmt.Errorf("reading history of workflow %s run %s: %w", workflowID, resolved, err)
	}
	events := make([]*Event, len(stored))
	for i, e := range stored {
		events[i] = &Event{ID: e.ID, Type: EventType(e.Type), Attributes: e.Attributes, Time: e.Time}
	}
	page := &HistoryPage{Events: events}
	if len(events) > limit {
		page.Events = events[:limit]
		page.NextAfterEventID = page.Events[limit-1].ID
	}
	return page, nil
}

// HistoryExport is a whole history as a JSON document: what WriteHistoryJSON
// writes and the replayer reads.
type HistoryExport struct {
	Events     []*Event  `json:"events"`
	Namespace  string    `json:"namespace"`
	RunID      uuid.UUID `json:"run_id"`
	WorkflowID string    `json:"workflow_id"`
}

// WriteHistoryJSON writes a run's whole history to w as a HistoryExport
// JSON document. A zero runID means the workflow's latest run.
func (c *Client) WriteHistoryJSON(ctx context.Context, w io.Writer, workflowID string, runID uuid.UUID) error {
	resolved, err := c.resolveRun(ctx, c.pool, workflowID, runID)
	if err != nil {
		return err
	}
	export := &HistoryExport{Events: []*Event{}, Namespace: c.config.Namespace, RunID: resolved, WorkflowID: workflowID}
	opts := &HistoryOpts{Limit: HistoryPageSizeMax}
	for {
		page, err := c.History(ctx, workflowID, resolved, opts)
		if err != nil {
			return err
		}
		export.Events = append(export.Events, page.Events...)
		if page.NextAfterEventID == 0 {
			break
		}
		opts.AfterEventID = page.NextAfterEventID
	}
	encoder := json.NewEncoder(w)
	encoder.SetIndent("", "  ")
	if err := encoder.Encode(export); err != nil {
		return fmt.Errorf("writing history of workflow %s run %s: %w", workflowID, resolved, err)
	}
	return nil
}
