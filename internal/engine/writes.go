package engine

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/weirhq/weir/internal/history"
)

// Run is a run's row as a step reads it under the run's lock.
type Run struct {
	ID           uuid.UUID
	HasParent    bool
	Args         []byte
	Generation   int64
	Kind         string
	Namespace    string
	NextEventID  int64
	Queue        string
	State        string
	TaskJobID    *int64
	TraceContext []byte
	WorkflowID   string
}

// InboxItem is an item a task took from its run's inbox.
type InboxItem struct {
	ID    int64
	Event history.Event
}

// StepWrites is what one step writes to its run, typed: the events it
// appends (stored as the rows history.Rows folds them into, an outcome's
// row with the event it resolves: ResolvedBy, which Decide checked each
// outcome has), the pending activities their outcomes retire and those it
// schedules, the rejection of the run's pending updates when it closes,
// and the run's compare-and-swap. A lone step's is rendered a statement
// per kind, a group's one statement per kind for all its members
// (internal/store).
type StepWrites struct {
	RunID      uuid.UUID
	Events     []history.Event
	Retired    []int64 // scheduled event IDs of activities whose outcome is appended
	Activities []Activity
	// Taken are the inbox items the step took, read under its run's lock
	// (in a group, which must not delete them before the step decided).
	Taken []int64
	// AbandonUpdates rejects the updates still pending on the run (it
	// closes), with AbandonedFailure, notifying their callers.
	AbandonUpdates bool
	CAS            *RunCAS // nil: the run's row is not written (yet)
}

// AbandonedFailure is the failure (JSON) of an update still pending on a
// run that closed.
var AbandonedFailure, _ = json.Marshal(&history.Failure{Message: "the workflow closed before the update completed", Type: "WorkflowClosed"})

// Activity is the record of a pending activity.
type Activity struct {
	ScheduledEventID int64
	JobID            int64
	Kind             string
	Deadline         *time.Time // schedule-to-close; nil for none
}

// RunCAS is a step's compare-and-swap of its run (W4): the run must be live
// at append point Found; it moves to Next. ClearTask, when not 0, is the
// task job whose reference the run drops. Close, when set, closes the run.
type RunCAS struct {
	Found, Next int64
	ClearTask   int64
	Close       *RunClose
}

// RunClose is how a step closes its run: State is completed (with Result),
// failed or cancelled (with Failure, JSON), or continued_as_new.
type RunClose struct {
	State   string
	Result  []byte
	Failure []byte
}
