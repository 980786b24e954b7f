package fencing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/internal/fencingclaim"
)

// claimer is a Driver's claim API (fencingclaim.Driver), for weir's worker:
// jobs inserted already running by the process that works them, fenced like
// fetched attempts. Its documentation is fencingclaim.Driver's.
type claimer struct{ *Driver }

func init() {
	fencingclaim.Register(func(driver riverdriver.Driver[pgx.Tx]) fencingclaim.Driver {
		if d, ok := driver.(*Driver); ok && d != nil {
			return claimer{d}
		}
		return nil
	})
}

func (d claimer) InsertClaimedTx(ctx context.Context, tx pgx.Tx, params *fencingclaim.Params) (*fencingclaim.Claim, error) {
	batch := &pgx.Batch{}
	var claim *fencingclaim.Claim
	d.QueueClaims(batch, []fencingclaim.Request{{Params: *params, Done: func(c *fencingclaim.Claim) { claim = c }}})
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, err
	}
	return claim, nil
}

// QueueClaims queues one statement for claims with reserved IDs in one
// schema, else one per claim. A row left without a lease all the same (by a
// trigger of someone else's) divides by zero, so that the transaction cannot
// commit an unleased running job whatever the caller does with the error.
func (d claimer) QueueClaims(batch *pgx.Batch, claims []fencingclaim.Request) {
	if len(claims) < 2 || slices.ContainsFunc(claims, func(c fencingclaim.Request) bool {
		return c.Params.ID == 0 || c.Params.Schema != claims[0].Params.Schema
	}) {
		for _, c := range claims {
			d.queueClaim(batch, c)
		}
		return
	}
	n, queued := len(claims), time.Now()
	batch.Queue(claimManySQL(claims[0].Params.Schema), claimManyArgs(d.leaseTTLSetting(), claims)...).Query(func(rows pgx.Rows) error {
		scanned := make([]*claimAlloc, 0, n)
		targets := make([]any, claimColumns)
		for rows.Next() {
			c := new(claimAlloc)
			if rows.Scan(c.targets(targets)...) != nil {
				break // in rows.Err
			}
			scanned = append(scanned, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			// The first claim words the error (its kind, a missing lease).
			_, err = claimOf(&claims[0].Params, nil, err)
			return fmt.Errorf("fencing: inserting %d claimed jobs in one statement: %w", n, err)
		}
		// Every claim reads its row, even after one failed: each that
		// succeeds is recorded, as it would have been alone.
		var first error
		for i, c := range claims {
			row, err := claimRowOf(scanned, i, c.Params.ID)
			if err = claimed(c, row, queued, err); err != nil && first == nil {
				first = err
			}
		}
		return first
	})
}

// claimRowOf returns the row of job id among rows, looked for at i first:
// the statement returns its rows in its claims' order as a rule.
func claimRowOf(rows []*claimAlloc, i int, id int64) (*claimAlloc, error) {
	if i < len(rows) && rows[i].claim.ID == id {
		return rows[i], nil
	}
	for _, row := range rows {
		if row.claim.ID == id {
			return row, nil
		}
	}
	return nil, pgx.ErrNoRows
}

// queueClaim queues the statement of one claim.
func (d claimer) queueClaim(batch *pgx.Batch, c fencingclaim.Request) {
	p, queued := &c.Params, time.Now()
	batch.Queue(claimSQL(p.Schema), d.leaseTTLSetting(), p.ID, p.Args, p.AttemptedBy, p.Kind, p.MaxAttempts, claimMetadata(p),
		max(p.Priority, 1), p.Queue, pgtype.UUID{Bytes: mintLeaseTokens(1)[0], Valid: true}).QueryRow(func(r pgx.Row) error {
		row := new(claimAlloc)
		err := r.Scan(row.targets(make([]any, claimColumns))...)
		return claimed(c, row, queued, err)
	})
}

// claimMetadata is the metadata a claim inserts: the job's, or none.
func claimMetadata(p *fencingclaim.Params) []byte {
	if len(p.Metadata) == 0 {
		return []byte("{}")
	}
	return p.Metadata
}

// claimed hands c's Done the Claim its statement's row (or err) makes, the
// statement having been queued at local time queued.
func claimed(c fencingclaim.Request, row *claimAlloc, queued time.Time, err error) error {
	claim, err := claimOf(&c.Params, row, err)
	if err != nil {
		return err
	}
	row.st.leaseFrom = queued
	c.Done(claim)
	return nil
}

// claimOf is the Claim of the job p describes that a claim statement's row,
// scanned into c (claimAlloc.targets), or err tells.
func claimOf(p *fencingclaim.Params, c *claimAlloc, err error) (*fencingclaim.Claim, error) {
	switch {
	case refusedInStatement(err):
		return nil, fmt.Errorf("fencing: claimed job %s has no lease: is the fencing migration applied? %w: %w", p.Kind, ErrNoLease, err)
	case err != nil:
		return nil, fmt.Errorf("fencing: inserting claimed job %s: %w", p.Kind, err)
	case c.st.token == "" || c.st.expiresAt.IsZero(): // the statement's check says otherwise; fail closed all the same
		return nil, fmt.Errorf("fencing: claimed job %d (%s) has no lease: is the fencing migration applied? %w", c.claim.ID, p.Kind, ErrNoLease)
	}
	c.st.schema = p.Schema
	id := c.claim.ID // the sequence's, for a claim without a reserved ID
	c.claim.Params, c.claim.AttemptedAt, c.claim.Lease = *p, c.st.attemptedAt, c
	c.claim.ID, c.claim.Metadata, c.claim.Priority = id, claimMetadata(p), max(p.Priority, 1)
	return &c.claim, nil
}

// claimAlloc is a Claim and the state of the attempt that works it
// (WorkClaimed), allocated as one, into which its claim statement's row is
// scanned: the job's ID, and the lease (token, expiry) and attempt's start
// into the state's own fields.
type claimAlloc struct {
	claim fencingclaim.Claim
	st    attemptState
}

// claimColumns is the number of columns of a claim statement's row: the
// job's ID, attempted_at, created_at (attempted_at: one transaction's
// time), lease token and lease_expires_at, and the statement's check.
const claimColumns = 6

// targets sets t (claimColumns long) to the scan targets of a claim
// statement's row; created_at and the check's column are skipped.
func (c *claimAlloc) targets(t []any) []any {
	t[0], t[1], t[2], t[3], t[4], t[5] = &c.claim.ID, &c.st.attemptedAt, nil, &c.st.token, &c.st.expiresAt, nil
	return t
}

// WorkClaimed works the claim's attempt in the state its allocation holds.
// A claim worked again (the contract is once), after its first WorkClaimed
// began and never alongside it, gets a state of its own, with the lease as
// it stands. A Claim that no claim statement made has no lease.
func (d claimer) WorkClaimed(ctx context.Context, claim *fencingclaim.Claim, deadline time.Time,
	fn func(ctx context.Context, cancel context.CancelCauseFunc) error,
) error {
	c, ok := claim.Lease.(*claimAlloc)
	var st *attemptState
	switch {
	case !ok:
		st = &attemptState{}
	case c.st.driver == nil:
		st = &c.st
	default:
		c.st.mu.Lock()
		st = &attemptState{expiresAt: c.st.expiresAt, leaseFrom: c.st.leaseFrom, schema: c.st.schema, token: c.st.token}
		c.st.mu.Unlock()
	}
	st.attempt, st.attemptedAt, st.driver, st.jobID = 1, claim.AttemptedAt, d.Driver, claim.ID
	st.localStart = time.Now()
	st.observed, st.stuckAfter = true, river.JobStuckThresholdDefault
	if !deadline.IsZero() {
		st.renewUntil = st.renewalEnd(deadline)
	}
	return d.runAttempt(ctx, st, false, func(ctx context.Context) error { return fn(ctx, st.cancel) })
}

func (d claimer) SetClaimedStateTx(ctx context.Context, tx pgx.Tx, params *riverdriver.JobSetStateIfRunningParams) error {
	st := attemptFromContext(ctx)
	if st == nil || st.jobID != params.ID {
		return fmt.Errorf("fencing: setting state of job %d outside its claimed attempt: %w", params.ID, ErrNoLease)
	}
	// Raw values: the caller's updates pass through unchanged (no float64
	// rounding of large numbers).
	updates := map[string]json.RawMessage{}
	if len(params.MetadataUpdates) > 0 {
		if err := json.Unmarshal(params.MetadataUpdates, &updates); err != nil {
			return fmt.Errorf("fencing: metadata updates of job %d: %w", params.ID, err)
		}
	}
	proof, err := json.Marshal(st.proof().encode())
	if err != nil {
		return err
	}
	updates[proofKey] = proof
	metadata, err := json.Marshal(updates)
	if err != nil {
		return err
	}
	rows, err := d.pilot.JobSetStateIfRunningMany(ctx, d.UnwrapExecutor(tx), &riverdriver.JobSetStateIfRunningManyParams{
		ID:              []int64{params.ID},
		Attempt:         []*int{params.Attempt},
		ErrData:         [][]byte{params.ErrData},
		FinalizedAt:     []*time.Time{params.FinalizedAt},
		MetadataDoMerge: []bool{true},
		MetadataUpdates: [][]byte{metadata},
		ScheduledAt:     []*time.Time{params.ScheduledAt},
		Schema:          st.schema,
		State:           []rivertype.JobState{params.State},
	})
	switch {
	case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrAlreadyCompleted): // an OutcomeConflictError too
		return err
	case err != nil:
		return fmt.Errorf("fencing: setting state of job %d: %w", params.ID, err)
	case len(rows) != 1 || rows[0].State != params.State && !cancelledInstead(params.State, rows[0]):
		// The Pilot aborts a refused write itself; this fails closed on a
		// job that is gone or a write River did not apply as asked.
		lost := &LeaseLostError{Attempt: st.attempt, JobID: params.ID, Op: "set_state_" + string(params.State)}
		abortTx(ctx, d.UnwrapExecutor(tx), lost)
		return lost
	}
	// The attempt is not marked finished here: the write is not committed
	// yet, and a transaction that rolls back must leave its lease renewed.
	// Once it committed, the lease keeper's next renewal finds the job ended
	// with this attempt's token and stops renewing it (leaseKeeper.renew).
	return nil
}

func (d claimer) Completion(ctx context.Context, jobID int64, finalizedAt time.Time, metadata []byte) (fencingclaim.Completion, error) {
	st := attemptFromContext(ctx)
	if st == nil || st.jobID != jobID {
		return fencingclaim.Completion{}, fmt.Errorf("fencing: setting state of job %d outside its claimed attempt: %w", jobID, ErrNoLease)
	}
	if len(metadata) == 0 {
		metadata = nil // NULL: nothing to merge
	}
	return fencingclaim.Completion{
		JobID: jobID, FinalizedAt: finalizedAt, Metadata: metadata, Attempt: st.attempt, Schema: st.schema, Token: st.token, Ctx: ctx,
	}, nil
}

// refused is the error of completion c refused in a statement of its own,
// told to the driver's observer in c's attempt context.
func (d claimer) refused(c *fencingclaim.Completion) error {
	const op = "set_state_" + string(rivertype.JobStateCompleted)
	d.counters.emit(c.Ctx, &Event{Attempt: c.Attempt, JobID: c.JobID, Kind: EventStaleWriteRejected, Op: op})
	return &LeaseLostError{Attempt: c.Attempt, JobID: c.JobID, Op: op}
}

// QueueCompletions queues one statement for completions in one schema,
// else one each. A completion is not finished on its attempt once written:
// see SetClaimedStateTx.
func (d claimer) QueueCompletions(batch *pgx.Batch, completions []fencingclaim.Completion) {
	if len(completions) < 2 || slices.ContainsFunc(completions, func(c fencingclaim.Completion) bool {
		return c.Schema != completions[0].Schema
	}) {
		for _, c := range completions {
			batch.Queue(completeClaimedSQL(c.Schema), c.JobID, c.Token, c.Attempt, c.FinalizedAt, c.Metadata).QueryRow(func(row pgx.Row) error {
				var one int
				err := row.Scan(&one)
				switch {
				case refusedInStatement(err):
					return d.refused(&c) // and the transaction is aborted
				case err != nil:
					return fmt.Errorf("fencing: setting state of job %d: %w", c.JobID, err)
				}
				return nil
			})
		}
		return
	}
	n := len(completions)
	batch.Queue(completeClaimedManySQL(completions[0].Schema), completeClaimedManyArgs(completions)...).QueryRow(func(row pgx.Row) error {
		var one int
		if err := row.Scan(&one); err != nil {
			if refusedInStatement(err) {
				return fmt.Errorf("fencing: completing %d claimed jobs: one no longer holds its job (the transaction is aborted): %w", n, err)
			}
			return fmt.Errorf("fencing: completing %d claimed jobs: %w", n, err)
		}
		return nil
	})
}

func (d claimer) Committed(completions []fencingclaim.Completion) {
	for i := range completions {
		d.pilot.committed(&completions[i])
	}
}

// completeClaimedManySQL is completeClaimedSQL for many jobs: their count
// ($1), which the statement must complete or divide by zero, and arrays of
// job ($2), token ($3), attempt ($4), finalized_at ($5) and metadata to
// merge ($6, NULL for none; a NULL array, which unnest pads with NULLs, for
// none at all).
func completeClaimedManySQL(schema string) string {
	return cachedSQL(&completeClaimedManyCache, schema, buildCompleteClaimedManySQL)
}

var completeClaimedManyCache sync.Map

func buildCompleteClaimedManySQL(schema string) string {
	return `
WITH v AS (
    SELECT * FROM unnest($2::bigint[], $3::text[], $4::int[], $5::timestamptz[], $6::text[])
        AS v(id, token, attempt, finalized_at, metadata)
),
updated AS (
    UPDATE ` + tableName(schema, "river_job") + ` j
    SET
        finalized_at = v.finalized_at,
        metadata = CASE WHEN v.metadata IS NULL THEN j.metadata ELSE j.metadata || v.metadata::jsonb END,
        state = 'completed',
        lease_last_token = j.lease_token,
        lease_token = NULL,
        lease_expires_at = NULL
    FROM v
    -- IS TRUE: no index serves it (decision 0004).
    WHERE j.id = ANY($2) AND j.id = v.id AND (j.state = 'running') IS TRUE AND j.lease_token = v.token::uuid AND j.attempt = v.attempt
    RETURNING 1
)
SELECT 1 / (count(*) = $1)::int FROM updated`
}

// claimSQL is a claim's insert (QueueClaims): $1 the lease's TTL, $2 the
// job's ID (0: the next of river_job's ID sequence, which also sets the
// session's currval), then the job's args, claimer, kind, max attempts,
// metadata, priority and queue ($3-$9), and its lease token ($10). The
// insert gives the job its lease itself; the insert trigger leaves such a
// row alone. The lease runs from the statement's start, not its
// transaction's, so that it starts after the claim was queued
// (attemptState.leaseFrom) even in a transaction begun long before.
func claimSQL(schema string) string {
	return cachedSQL(&claimCache, schema, func(schema string) string {
		table := tableName(schema, "river_job")
		return "WITH claimed AS (INSERT INTO " + table +
			"  (id, args, attempt, attempted_at, attempted_by, kind, max_attempts, metadata, priority, queue, lease_token," +
			"   lease_expires_at, scheduled_at, state, tags)" +
			"  VALUES (coalesce(nullif($2::bigint, 0), nextval(pg_get_serial_sequence('" + strings.ReplaceAll(table, "'", "''") + "', 'id')))," +
			"   $3, 1, now(), ARRAY[$4::text], $5, $6, $7, $8, $9, $10::uuid, statement_timestamp() + $1::interval, now(), 'running', '{}')" +
			"  RETURNING id, attempted_at, created_at, coalesce(lease_token::text, '') AS token, lease_expires_at)" +
			" SELECT id, attempted_at, created_at, token, lease_expires_at," +
			"  1 / (token <> '' AND lease_expires_at IS NOT NULL)::int FROM claimed"
	})
}

var claimCache, claimManyCache sync.Map

// claimManySQL is claimSQL for many jobs with reserved IDs, over arrays:
// the lease's TTL ($1), the jobs' lease tokens ($2), then their IDs and
// claimSQL's $3-$9 ($3-$10). Its rows are claimSQL's, one per job.
func claimManySQL(schema string) string {
	return cachedSQL(&claimManyCache, schema, func(schema string) string {
		return "WITH claimed AS (INSERT INTO " + tableName(schema, "river_job") +
			"  (id, args, attempt, attempted_at, attempted_by, kind, max_attempts, metadata, priority, queue, lease_token, lease_expires_at," +
			"   scheduled_at, state, tags)" +
			"  SELECT v.id, v.args, 1, now(), ARRAY[v.attempted_by], v.kind, v.max_attempts, v.metadata, v.priority, v.queue, v.token," +
			"   statement_timestamp() + $1::interval, now(), 'running', '{}'" +
			"  FROM unnest($3::bigint[], $4::text[]::jsonb[], $5::text[], $6::text[], $7::int[], $8::text[]::jsonb[], $9::int[], $10::text[], $2::uuid[])" +
			"   AS v(id, args, attempted_by, kind, max_attempts, metadata, priority, queue, token)" +
			"  RETURNING id, attempted_at, created_at, coalesce(lease_token::text, '') AS token, lease_expires_at)" +
			" SELECT id, attempted_at, created_at, token, lease_expires_at," +
			"  1 / (token <> '' AND lease_expires_at IS NOT NULL)::int FROM claimed"
	})
}

// cancelledInstead reports whether River's state write, asked to make the job
// available, retryable or scheduled, cancelled it instead, as River does for
// a job whose cancellation was requested while it ran (JobCancel sets
// cancel_attempted_at).
func cancelledInstead(wanted rivertype.JobState, row *rivertype.JobRow) bool {
	switch wanted {
	case rivertype.JobStateAvailable, rivertype.JobStateRetryable, rivertype.JobStateScheduled:
		return row.State == rivertype.JobStateCancelled
	}
	return false
}

// completeClaimedSQL completes one claimed job ($1) whose running attempt
// holds the lease token $2 with attempt $3: River's completion (finalized_at
// $4, metadata merged with $5 unless NULL) and the lease revoked, as
// setStateInlineSQL does for a write with a token (the attempt, which
// finalizes its job, stays on the job's row: fencing 003). A refused write
// divides by zero, which aborts the transaction.
func completeClaimedSQL(schema string) string {
	return cachedSQL(&completeClaimedCache, schema, buildCompleteClaimedSQL)
}

var completeClaimedCache sync.Map

func buildCompleteClaimedSQL(schema string) string {
	return `
WITH updated AS (
    UPDATE ` + tableName(schema, "river_job") + `
    SET
        finalized_at = $4,
        metadata = CASE WHEN $5::jsonb IS NULL THEN metadata ELSE metadata || $5::jsonb END,
        state = 'completed',
        lease_last_token = lease_token,
        lease_token = NULL,
        lease_expires_at = NULL
    WHERE id = $1 AND state = 'running' AND lease_token = $2::uuid AND attempt = $3
    RETURNING 1
)
SELECT 1 / count(*)::int FROM updated`
}

// refusedInStatement reports whether err is a statement's own refusal: the
// claim and claimed-completion statements divide by zero when their check
// fails, so that the database aborts the transaction whatever the caller
// does with the error.
func refusedInStatement(err error) bool {
	return sqlState(err) == pgerrcode.DivisionByZero
}
