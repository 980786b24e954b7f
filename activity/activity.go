package activity

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/attempt"
)

// Args are an activity's arguments. Kind names the activity type and is also
// the River job kind of its attempts, so an existing river.Worker[T] can serve
// as an activity unchanged. Kind is persisted: renaming it is a data migration.
type Args interface {
	Kind() string
}

// Activity does work for a workflow. Execute may run more than once (retries,
// a recovered worker): make its effects idempotent, or make them a database
// write committed with CompleteTx, which makes them happen exactly once.
type Activity[A Args, R any] interface {
	// Execute does the activity's work for one attempt.
	Execute(ctx context.Context, args A) (R, error)

	// Timeout is the start-to-close timeout of an attempt when the
	// workflow gave none. Defaults gives 0: River's JobTimeout applies.
	Timeout() time.Duration
}

// Defaults is embedded in activity structs; it supplies default
// implementations of Activity's optional methods and records the activity's
// types, so worker.AddActivity(w, &ChargeActivity{}) infers them.
//
//	type ChargeActivity struct {
//		activity.Defaults[ChargeArgs, Charge]
//		Bank *Bank
//	}
type Defaults[A Args, R any] struct{}

// Timeout returns 0: River's JobTimeout applies unless the workflow set a
// start-to-close timeout.
func (Defaults[A, R]) Timeout() time.Duration { return 0 }

// Info describes an activity attempt: the running one inside the activity
// (GetInfo), and the one a worker's interceptors wrap.
type Info struct {
	// ActivityKind is the activity's kind (its args' Kind()).
	ActivityKind string

	// Attempt is the attempt number, starting at 1.
	Attempt int

	// Generation is the workflow run's generation.
	Generation int64

	// Headers are the run's, as its start's interceptors left them in
	// client.StartInfo.Headers (a trace context, say), copied into the
	// activity's job when it was scheduled; nil if none. Read-only.
	Headers map[string]string

	// JobID is the River job that carries the activity.
	JobID int64

	// MaxAttempts is how many attempts the retry policy allows.
	MaxAttempts int

	// Namespace is the workflow run's namespace.
	Namespace string

	// RunID is the workflow run's ID.
	RunID uuid.UUID

	// ScheduledEventID is the history event that scheduled the activity:
	// with RunID, the activity's identity across attempts.
	ScheduledEventID int64

	// WorkflowID is the workflow run's workflow ID.
	WorkflowID string

	// WorkflowKind is the workflow's kind.
	WorkflowKind string
}

// ErrNotInActivity is returned by functions that need an activity attempt's
// context when given another one.
var ErrNotInActivity = errors.New("activity: not inside an activity attempt run by a weir worker")

// GetInfo returns the running attempt's Info, and false outside an activity.
func GetInfo(ctx context.Context) (Info, bool) {
	st := attempt.From(ctx)
	if st == nil {
		return Info{}, false
	}
	return Info{
		ActivityKind:     st.ActivityKind,
		Attempt:          st.Attempt,
		Generation:       st.Generation,
		Headers:          st.Headers,
		JobID:            st.JobID,
		MaxAttempts:      st.MaxAttempts,
		Namespace:        st.Namespace,
		RunID:            st.RunID,
		ScheduledEventID: st.ScheduledEventID,
		WorkflowID:       st.WorkflowID,
		WorkflowKind:     st.WorkflowKind,
	}, true
}

// CompleteTx records result as the activity's outcome and completes its
// job inside tx: the caller's writes in tx, the outcome and the completion
// commit together or not at all. It is fenced: if this attempt no longer
// holds the job (it was recovered and re-run elsewhere), CompleteTx returns an
// error matching fencing.ErrLeaseLost and aborts tx, so Commit fails even if
// the error is ignored. After a successful CompleteTx (and commit), Execute's
// own return value is ignored.
func CompleteTx[R any](ctx context.Context, tx pgx.Tx, result R) error {
	st := attempt.From(ctx)
	if st == nil {
		return ErrNotInActivity
	}
	payload, err := st.Encode(result)
	if err != nil {
		return fmt.Errorf("encoding result of activity %s (job %d): %w", st.ActivityKind, st.JobID, err)
	}
	return st.CompleteTx(ctx, tx, payload)
}
