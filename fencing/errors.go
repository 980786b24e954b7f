package fencing

import (
	"errors"
	"fmt"
)

// ErrLeaseLost means the attempt no longer holds its job: another attempt
// does, or the job left running without this attempt's write (recovered by
// the lease reaper, rescued, cancelled or discarded). The write was rejected
// and changed nothing. Stop working on the job.
var ErrLeaseLost = errors.New("fencing: lease lost: the attempt no longer holds the job")

// ErrNoLease means the context does not belong to an attempt run by a client
// with the fencing plugin installed. A state write made with such a context
// (river.JobCompleteTx under rivertest.WorkContext, for example) proves no
// attempt: it applies, as River's would, only to a running job that no
// fenced attempt leases, and is otherwise refused with a *NoLeaseError.
var ErrNoLease = errors.New("fencing: no lease in context (not inside a job run by a fenced client with the fencing plugin)")

// ErrAlreadyCompleted means the attempt writing already completed the job
// itself: its write is a repeat. Inside the attempt's own transaction
// (river.JobCompleteTx, CompleteTx, a claimed job's state write) the repeat is
// refused and the transaction aborted, so that its writes do not commit a
// second time (a retry after an ambiguous COMMIT that did commit). A repeat
// by River's completer is not an error: River keeps the completion.
var ErrAlreadyCompleted = errors.New("fencing: the attempt already completed the job")

// ErrOutcomeConflict means the attempt writing already completed the job and
// now asked for another outcome in its own transaction. The completion
// stands; the write was refused and the transaction aborted.
var ErrOutcomeConflict = errors.New("fencing: the attempt already completed the job with another outcome")

// LeaseLostError is the error for a rejected write of one attempt: the job
// had moved on to another attempt, or left running, before the write. It
// matches ErrLeaseLost with errors.Is.
type LeaseLostError struct {
	// Attempt is the attempt whose write was rejected (0 if unknown).
	Attempt int

	// JobID is the job the write was for.
	JobID int64

	// Op names the rejected write: "complete", "set_state_<state>",
	// "heartbeat", "update" or "renew".
	Op string
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("fencing: %s of job %d attempt %d rejected: the attempt no longer holds the job (lease lost)", e.Op, e.JobID, e.Attempt)
}

// Is reports whether target is ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// AlreadyCompletedError is the error for a write that repeats the
// completion its own attempt already made, refused inside the attempt's
// transaction (which is aborted). It matches ErrAlreadyCompleted, not
// ErrLeaseLost: the attempt did not lose the job, it finished it.
type AlreadyCompletedError struct {
	// Attempt is the attempt that completed the job and wrote again.
	Attempt int

	// JobID is the completed job.
	JobID int64

	// Op names the refused write, as in LeaseLostError.
	Op string
}

func (e *AlreadyCompletedError) Error() string {
	return fmt.Sprintf("fencing: %s of job %d attempt %d refused: this attempt already completed the job; the transaction is aborted so that its writes do not commit twice",
		e.Op, e.JobID, e.Attempt)
}

// Is reports whether target is ErrAlreadyCompleted.
func (e *AlreadyCompletedError) Is(target error) bool { return target == ErrAlreadyCompleted }

// OutcomeConflictError is the error for a write, made in the attempt's own
// transaction, that asks for another outcome of a job the same attempt
// already completed. The transaction is aborted. It matches
// ErrOutcomeConflict and, since the job is completed by the attempt,
// ErrAlreadyCompleted; not ErrLeaseLost.
type OutcomeConflictError struct {
	// Attempt is the attempt that completed the job.
	Attempt int

	// JobID is the completed job.
	JobID int64

	// Op names the refused write, as in LeaseLostError.
	Op string

	// Requested is the state the refused write asked for.
	Requested string
}

func (e *OutcomeConflictError) Error() string {
	return fmt.Sprintf("fencing: %s of job %d attempt %d refused: this attempt already completed the job, which stays completed, not %s; the transaction is aborted",
		e.Op, e.JobID, e.Attempt, e.Requested)
}

// Is reports whether target is ErrOutcomeConflict or ErrAlreadyCompleted.
func (e *OutcomeConflictError) Is(target error) bool {
	return target == ErrOutcomeConflict || target == ErrAlreadyCompleted
}

// NoLeaseError is the error for a state write made outside any fenced
// attempt (its context carries no lease proof: rivertest.WorkContext, a
// client without the fencing plugin) on a job that it cannot take: the job
// is leased by a fenced attempt, or not running. Inside a caller's
// transaction the transaction is aborted. It matches ErrNoLease.
type NoLeaseError struct {
	// JobID is the job the write was for.
	JobID int64

	// Op names the refused write, as in LeaseLostError.
	Op string
}

func (e *NoLeaseError) Error() string {
	return fmt.Sprintf("fencing: %s of job %d refused: the write was made outside any fenced attempt (no lease in its context), and the job is not running without a lease",
		e.Op, e.JobID)
}

// Is reports whether target is ErrNoLease.
func (e *NoLeaseError) Is(target error) bool { return target == ErrNoLease }

// sqlStateAborted is the SQLSTATE with which abortTx aborts a caller's
// transaction.
const sqlStateAborted = "WF001"
