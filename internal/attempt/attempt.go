// Package attempt carries what an activity attempt needs from the worker that
// runs it through the attempt's context: who it works for, and how to commit
// its outcome inside a caller's transaction. The worker sets it; package
// activity reads it.
package attempt

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// State is one activity attempt as the worker sees it.
type State struct {
	ActivityKind     string
	Attempt          int
	Generation       int64
	Headers          map[string]string
	JobID            int64
	MaxAttempts      int
	Namespace        string
	RunID            uuid.UUID
	ScheduledEventID int64
	WorkflowID       string
	WorkflowKind     string

	// CompleteTx records result (codec-encoded by Encode) as the activity's
	// outcome and completes the attempt's job in tx, fenced.
	CompleteTx func(ctx context.Context, tx pgx.Tx, result []byte) error

	// Encode is the worker's payload codec.
	Encode func(v any) ([]byte, error)

	// Heartbeat, when set, replaces the fencing layer's heartbeat (test
	// environments without Postgres): it records details for later attempts.
	Heartbeat func(ctx context.Context, details []byte) error

	// HeartbeatDetails, when set, returns the details last recorded by
	// Heartbeat for this activity, by any attempt.
	HeartbeatDetails func() []byte

	// Completed is set by CompleteTx once the caller's transaction holds
	// the outcome, so the worker does not record another one.
	Completed bool

	lastBeat atomic.Int64 // unix nanoseconds of the last heartbeat
}

// Beat records a heartbeat now.
func (s *State) Beat() { s.lastBeat.Store(time.Now().UnixNano()) }

// LastBeat is when the attempt last heartbeat (its start, if never).
func (s *State) LastBeat() time.Time { return time.Unix(0, s.lastBeat.Load()) }

type key struct{}

// With returns ctx carrying st.
func With(ctx context.Context, st *State) context.Context {
	return context.WithValue(ctx, key{}, st)
}

// From returns the attempt state in ctx, or nil outside an activity.
func From(ctx context.Context) *State {
	st, _ := ctx.Value(key{}).(*State)
	return st
}
