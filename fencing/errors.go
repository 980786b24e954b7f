package fencing

import (
	"errors"
	"fmt"
)

// ErrLeaseLost means a newer attempt owns the job (or none does): the write
// was rejected and changed nothing. Stop working on the job.
var ErrLeaseLost = errors.New("fencing: lease lost to a newer attempt")

// ErrNoLease means the context does not belong to an attempt run by a client
// with the fencing plugin installed.
var ErrNoLease = errors.New("fencing: no lease in context (not inside a job run by a fenced client with the fencing plugin)")

// LeaseLostError is the error for a rejected write of one attempt: the job
// had moved on to another attempt, or left running, before the write. It
// matches ErrLeaseLost with errors.Is.
type LeaseLostError struct {
	// Attempt is the attempt whose write was rejected (0 if unknown).
	Attempt int

	// JobID is the job the write was for.
	JobID int64

	// Op names the rejected write: "complete", "set_state", "heartbeat",
	// "update" or "renew".
	Op string
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("fencing: %s of job %d attempt %d rejected: lease lost to a newer attempt", e.Op, e.JobID, e.Attempt)
}

// Is reports whether target is ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }
