// Package fencingclaim is the fencing driver's claim API, for weir's worker alone:
// a River job inserted already running, claimed by its inserter to work
// itself without River fetching it, and fenced like a fetched attempt.
// River users have no use for it (package fencing does not export it); the
// fencing driver provides it (For), and package fencing's tests cover it.
package fencingclaim

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
)

// Params describe a job to insert already claimed by its inserter.
type Params struct {
	// Args are the job's encoded args (JSON).
	Args []byte

	// ID is a job ID the caller reserved for this job (ReserveJobIDs), or 0
	// for the next of river_job's ID sequence. Claims with reserved IDs
	// queued together are one statement (Driver.QueueClaims), and a
	// statement queued behind the claim can name its job by ID instead of
	// reading the sequence's currval.
	ID int64

	// AttemptedBy names the claiming client (River's Client.ID), as River's
	// attempted_by does for fetched jobs.
	AttemptedBy string

	// Kind, MaxAttempts, Metadata, Priority and Queue are the job's, as for
	// an insert; Metadata and Priority may be left empty (none, priority 1).
	Kind        string
	MaxAttempts int
	Metadata    []byte
	Priority    int
	Queue       string

	// Schema is River's schema (River's Config.Schema); empty for the
	// search_path's.
	Schema string
}

// Claim is a job its inserter claimed in the same transaction
// (Driver.InsertClaimedTx) to work itself, without River fetching it:
// attempt 1, running, under a lease of the driver's LeaseTTL. It is fenced
// like a fetched attempt: Driver.WorkClaimed renews its lease and cancels it
// when the lease is lost, Driver.SetClaimedStateTx is its only way to
// finalize, and if its process dies the lease reaper recovers the job
// once the lease expires.
type Claim struct {
	// Params are the job as inserted: its ID set, its metadata ("{}" for
	// none) and priority (1 for none) as written.
	Params

	// AttemptedAt is when the attempt began: the insert's transaction
	// time, the job's created_at and scheduled_at too.
	AttemptedAt time.Time

	// Lease is the claimed attempt's lease, which only the driver that
	// claimed the job reads.
	Lease any
}

// Row is the job's row as the claim inserted it (a new one each call).
func (c *Claim) Row() *rivertype.JobRow {
	at := c.AttemptedAt
	return &rivertype.JobRow{
		ID: c.ID, Attempt: 1, AttemptedAt: &at, AttemptedBy: []string{c.AttemptedBy}, CreatedAt: at, EncodedArgs: c.Args,
		Kind: c.Kind, MaxAttempts: c.MaxAttempts, Metadata: c.Metadata, Priority: c.Priority, Queue: c.Queue, ScheduledAt: at,
		State: rivertype.JobStateRunning,
	}
}

// Request is a claim to queue (Driver.QueueClaims): the job to insert,
// and Done, which receives its Claim when the batch runs.
type Request struct {
	Params Params
	Done   func(*Claim)
}

// Completion is a claimed attempt's completion of its job
// (Driver.Completion), to queue with others (Driver.QueueCompletions).
type Completion struct {
	JobID       int64
	FinalizedAt time.Time
	Metadata    []byte // merged into the job's metadata; nil for none

	// Attempt, Schema and Token are the claimed attempt's lease, which the
	// statement proves.
	Attempt int
	Schema  string
	Token   string

	// Ctx is the attempt's context the completion was made in: the
	// driver's observer learns in it of a completion refused in a
	// statement of its own. A completion lives no longer than its batch.
	Ctx context.Context
}

// Driver is the claim API of a fencing driver.
type Driver interface {
	// InsertClaimedTx inserts a River job in tx already running, claimed by
	// the caller, under a fresh lease token and a lease of LeaseTTL from the
	// insert. Work it with WorkClaimed once tx has committed.
	InsertClaimedTx(ctx context.Context, tx pgx.Tx, params *Params) (*Claim, error)

	// QueueClaims queues in batch the inserts of InsertClaimedTx, for a
	// caller that sends several statements in one round trip: one
	// statement for all of claims when each has a reserved ID (Params.ID)
	// in one schema, else one per claim. Each claim's Done receives its
	// Claim when the batch runs (in a transaction: work the claim only once
	// it commits). A claim without a reserved ID names its job also as the
	// session's currval of river_job's ID sequence. If any job would be
	// inserted without a lease, or River's schema refuses one, its
	// statement fails, aborting the transaction. The statement reads claims
	// when the batch is sent: leave them as they are until it ran.
	QueueClaims(batch *pgx.Batch, claims []Request)

	// WorkClaimed runs fn as the claimed attempt, as the fencing plugin runs
	// a fetched one: fencing.LeaseFromContext and fencing.Heartbeat work in
	// fn's context, the lease is renewed while fn runs (until deadline, plus
	// River's stuck threshold, when deadline is set), and fn's context is
	// cancelled with cause fencing.ErrLeaseLost as soon as a renewal is
	// refused. cancel cancels fn's context with a cause of the caller's
	// (River's job control, as River's executor cancels a fetched attempt);
	// the first cause, the caller's or the lease's, is the one it keeps.
	WorkClaimed(ctx context.Context, claim *Claim, deadline time.Time, fn func(ctx context.Context, cancel context.CancelCauseFunc) error) error

	// SetClaimedStateTx is the state write of a claimed attempt whose work
	// context is ctx (WorkClaimed): completed, retryable, discarded,
	// cancelled or snoozed, built with riverdriver's JobSetState helpers. It
	// goes through the same fenced path as River's own writes, in tx: if the
	// attempt no longer holds its job, it returns a *fencing.LeaseLostError
	// and aborts tx, so nothing the caller wrote in tx commits. If the
	// attempt completed its job already, it returns a
	// *fencing.AlreadyCompletedError (a *fencing.OutcomeConflictError for
	// another state) and aborts tx as well.
	SetClaimedStateTx(ctx context.Context, tx pgx.Tx, params *riverdriver.JobSetStateIfRunningParams) error

	// Completion is the completion of claimed job jobID whose work context
	// is ctx (WorkClaimed), finalized at finalizedAt with metadata merged
	// into the job's (empty: none), for QueueCompletions: the write
	// SetClaimedStateTx makes of riverdriver.JobSetStateCompleted(jobID,
	// finalizedAt, metadata). Any other state goes through
	// SetClaimedStateTx.
	Completion(ctx context.Context, jobID int64, finalizedAt time.Time, metadata []byte) (Completion, error)

	// QueueCompletions queues in batch completions of claimed jobs, for a
	// caller that sends them in the same round trip as other statements of
	// its transaction: one statement for all of them when they are in one
	// schema, else one each. A statement fails, aborting the transaction,
	// unless it completed every one of its jobs, each still held by its
	// attempt. A completion refused in a statement of its own fails the
	// batch with a *fencing.LeaseLostError; which of several was refused is
	// not told. The driver's OnFinalized hook is not called for a queued
	// completion; its caller settles the job's outcome itself. The
	// statement reads completions when the batch is sent: leave them as
	// they are until then.
	QueueCompletions(batch *pgx.Batch, completions []Completion)

	// Committed tells the driver that completions, queued with
	// QueueCompletions, committed: the COMMIT of their transaction
	// succeeded. Call it only then (never after a rolled-back or an
	// ambiguous COMMIT), before the attempts' Work returns. River's
	// completer, which writes "completed" again for an attempt River
	// fetched once its Work returns, then gets the job back without a
	// statement.
	Committed(completions []Completion)
}

// of returns the claim API of a fencing driver, nil for any other driver;
// package fencing sets it (Register) when it is initialised.
var of func(driver riverdriver.Driver[pgx.Tx]) Driver

// Register makes For answer with of. Package fencing calls it once, from
// its init; nothing else may.
func Register(f func(driver riverdriver.Driver[pgx.Tx]) Driver) { of = f }

// For returns the claim API of driver, a fencing driver (fencing.NewDriver),
// or nil for any other driver.
func For(driver riverdriver.Driver[pgx.Tx]) Driver {
	if of == nil {
		return nil
	}
	return of(driver)
}

// ReserveJobIDs takes n IDs from river_job's ID sequence (in River's schema
// schema; empty for the search_path's) through tx, for claims to name their
// jobs by (Params.ID). A sequence is not transactional: the IDs stay taken
// whatever becomes of tx, and those never used leave gaps in the IDs, as a
// rolled-back insert does.
func ReserveJobIDs(ctx context.Context, tx pgx.Tx, schema string, n int) ([]int64, error) {
	if n < 1 {
		return nil, fmt.Errorf("fencing: reserving %d job IDs: at least one", n)
	}
	table := pgx.Identifier{schema, "river_job"}
	if schema == "" {
		table = pgx.Identifier{"river_job"}
	}
	// The sequence is looked up once (a catalog search), not for every ID.
	rows, err := tx.Query(ctx, "WITH s AS MATERIALIZED (SELECT pg_get_serial_sequence($1, 'id')::regclass AS seq)"+
		" SELECT nextval(s.seq) FROM s, generate_series(1, $2)", table.Sanitize(), n)
	if err != nil {
		return nil, fmt.Errorf("fencing: reserving job IDs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("fencing: reserving job IDs: %w", err)
	}
	return ids, nil
}
