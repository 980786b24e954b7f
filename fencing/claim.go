package fencing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	if err := d.QueueClaim(batch, params, func(c *fencingclaim.Claim) { claim = c }); err != nil {
		return nil, err
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, err
	}
	return claim, nil
}

func (d claimer) QueueClaim(batch *pgx.Batch, params *fencingclaim.Params, done func(*fencingclaim.Claim)) error {
	if params.MaxAttempts < 1 {
		return fmt.Errorf("fencing: claimed job %s: MaxAttempts must be at least 1", params.Kind)
	}
	metadata := params.Metadata
	if len(metadata) == 0 {
		metadata = []byte("{}")
	}
	priority := max(params.Priority, 1)
	ttl := d.leaseTTLSetting()
	// The insert gives the row its lease (token minted here, expiry of the
	// TTL). As a backstop, a row left without a lease all the same (by a
	// trigger of someone else's) divides by zero: the statement fails in
	// the database, so the transaction cannot commit an unleased running job
	// even when the caller ignores the error or its COMMIT rides in the
	// same batch. Without the fencing migration the lease columns are
	// missing and the insert fails outright.
	token := mintLeaseToken()
	var q *pgx.QueuedQuery
	if params.ID != 0 {
		q = batch.Queue(claimWithIDSQL(params.Schema),
			ttl, params.ID, params.Args, params.AttemptedBy, params.Kind, params.MaxAttempts, metadata, priority, params.Queue, token)
	} else {
		q = batch.Queue(claimSQL(params.Schema),
			ttl, params.Args, params.AttemptedBy, params.Kind, params.MaxAttempts, metadata, priority, params.Queue, token)
	}
	q.QueryRow(func(row pgx.Row) error {
		var c claimRowValues
		err := row.Scan(c.targets()...)
		id, attemptedAt, createdAt, token, expiresAt := c.id, c.attemptedAt, c.createdAt, c.token, c.expiresAt
		switch {
		case refusedInStatement(err):
			return fmt.Errorf("fencing: claimed job %s has no lease: is the fencing migration applied? %w: %w", params.Kind, ErrNoLease, err)
		case err != nil:
			return fmt.Errorf("fencing: inserting claimed job %s: %w", params.Kind, err)
		case token == "" || expiresAt == nil: // the statement's check says otherwise; fail closed all the same
			return fmt.Errorf("fencing: claimed job %d (%s) has no lease: is the fencing migration applied? %w", id, params.Kind, ErrNoLease)
		}
		done(&fencingclaim.Claim{
			Job: &rivertype.JobRow{
				ID: id, Attempt: 1, AttemptedAt: &attemptedAt, AttemptedBy: []string{params.AttemptedBy}, CreatedAt: createdAt,
				EncodedArgs: params.Args, Kind: params.Kind, MaxAttempts: params.MaxAttempts, Metadata: metadata,
				Priority: priority, Queue: params.Queue, ScheduledAt: attemptedAt, State: rivertype.JobStateRunning,
			},
			ExpiresAt: *expiresAt,
			Schema:    params.Schema,
			Token:     token,
		})
		return nil
	})
	return nil
}

func (d claimer) WorkClaimed(ctx context.Context, claim *fencingclaim.Claim, deadline time.Time, fn func(ctx context.Context) error) error {
	st := &attemptState{
		attempt:     claim.Job.Attempt,
		attemptedAt: *claim.Job.AttemptedAt,
		driver:      d.Driver,
		expiresAt:   claim.ExpiresAt,
		jobID:       claim.Job.ID,
		localStart:  time.Now(),
		observed:    true,
		schema:      claim.Schema,
		stuckAfter:  jobStuckThresholdDefault,
		token:       claim.Token,
	}
	if !deadline.IsZero() {
		st.renewUntil = st.renewalEnd(deadline)
	}
	return d.runAttempt(ctx, st, false, fn)
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
	var (
		lost     *LeaseLostError
		repeat   *AlreadyCompletedError
		conflict *OutcomeConflictError
	)
	switch {
	case errors.As(err, &lost), errors.As(err, &repeat), errors.As(err, &conflict):
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

func (d claimer) QueueSetClaimedState(ctx context.Context, batch *pgx.Batch, params *riverdriver.JobSetStateIfRunningParams) (bool, error) {
	st := attemptFromContext(ctx)
	if st == nil || st.jobID != params.ID {
		return false, fmt.Errorf("fencing: setting state of job %d outside its claimed attempt: %w", params.ID, ErrNoLease)
	}
	if params.State != rivertype.JobStateCompleted {
		return false, nil
	}
	if params.FinalizedAt == nil {
		return false, fmt.Errorf("fencing: completing job %d: no finalized_at (build params with riverdriver.JobSetStateCompleted)", params.ID)
	}
	var metadata []byte // NULL: nothing to merge
	if len(params.MetadataUpdates) > 0 {
		metadata = params.MetadataUpdates
	}
	op := "set_state_" + string(params.State)
	batch.Queue(completeClaimedSQL(st.schema), params.ID, st.token, st.attempt, *params.FinalizedAt, metadata).QueryRow(func(row pgx.Row) error {
		var one int
		err := row.Scan(&one)
		switch {
		case refusedInStatement(err):
			// The write was refused, and the transaction is aborted.
			d.counters.emit(ctx, &Event{Attempt: st.attempt, JobID: params.ID, Kind: EventStaleWriteRejected, Op: op})
			return &LeaseLostError{Attempt: st.attempt, JobID: params.ID, Op: op}
		case err != nil:
			return fmt.Errorf("fencing: setting state of job %d: %w", params.ID, err)
		}
		return nil // not finished yet: see SetClaimedStateTx
	})
	return true, nil
}

func (claimer) MergeQueuedCompletions(batch *pgx.Batch, schema string) int {
	single := completeClaimedSQL(schema)
	var at []int
	for i, qq := range batch.QueuedQueries {
		if qq.SQL == single && len(qq.Arguments) == 5 {
			at = append(at, i)
		}
	}
	if len(at) < 2 {
		return 0
	}
	var (
		ids       = make([]int64, len(at))
		tokens    = make([]string, len(at))
		attempts  = make([]int, len(at))
		finalized = make([]time.Time, len(at))
		metadata  = make([]*string, len(at))
	)
	for k, i := range at {
		a := batch.QueuedQueries[i].Arguments
		ids[k], tokens[k], attempts[k], finalized[k] = a[0].(int64), a[1].(string), a[2].(int), a[3].(time.Time)
		if m, _ := a[4].([]byte); m != nil {
			text := string(m)
			metadata[k] = &text
		}
	}
	merged := &pgx.QueuedQuery{SQL: completeClaimedManySQL(schema), Arguments: []any{ids, tokens, attempts, finalized, metadata, len(at)}}
	merged.QueryRow(func(row pgx.Row) error {
		var one int
		if err := row.Scan(&one); err != nil {
			if refusedInStatement(err) {
				return fmt.Errorf("fencing: completing %d claimed jobs: one no longer holds its job (the transaction is aborted): %w", len(ids), err)
			}
			return fmt.Errorf("fencing: completing %d claimed jobs: %w", len(ids), err)
		}
		return nil
	})
	replaceQueued(batch, at, merged)
	return len(at)
}

// replaceQueued puts merged in batch in the place of the queries at at
// (ascending indexes), the first one's place.
func replaceQueued(batch *pgx.Batch, at []int, merged *pgx.QueuedQuery) {
	out := make([]*pgx.QueuedQuery, 0, len(batch.QueuedQueries)-len(at)+1)
	next := 0
	for i, qq := range batch.QueuedQueries {
		switch {
		case next < len(at) && i == at[next]:
			if next == 0 {
				out = append(out, merged)
			}
			next++
		default:
			out = append(out, qq)
		}
	}
	batch.QueuedQueries = out
}

// completeClaimedManySQL is completeClaimedSQL for many jobs: arrays of
// job ($1), token ($2), attempt ($3), finalized_at ($4) and metadata to
// merge ($5, NULL for none), and their count ($6), which the statement
// must complete or divide by zero. The jobs are taken by key (id = ANY)
// before the join with the arrays, so that no plan scans river_job, and the
// state test is one no index serves, so that none reads the running jobs.
func completeClaimedManySQL(schema string) string {
	return cachedSQL(&completeClaimedManyCache, schema, buildCompleteClaimedManySQL)
}

var completeClaimedManyCache sync.Map

func buildCompleteClaimedManySQL(schema string) string {
	return `
WITH v AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[], $4::timestamptz[], $5::text[])
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
    -- (j.state = 'running') IS TRUE, not j.state = 'running': Postgres cannot
    -- take rows through an index on that, so no plan reads every running job
    -- through river_job's fetching index (state first) and filters them by
    -- ID, as a generic plan made while few jobs ran would.
    WHERE j.id = ANY($1) AND j.id = v.id AND (j.state = 'running') IS TRUE AND j.lease_token = v.token::uuid AND j.attempt = v.attempt
    RETURNING j.id, j.attempt, j.attempted_at, j.attempted_by, j.lease_last_token
),
` + loggedCompletionSQL(schema) + `
SELECT 1 / (count(*) = $6)::int FROM updated`
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
// $4, metadata merged with $5 unless NULL, state completed), the lease
// revoked and the attempt logged, as setStateInlineSQL does for a write with
// a token, and the lease trigger then skips (its WHEN). It is the
// single-job shape of that statement: Postgres plans it once per connection
// (a generic plan), where the many-job statement, built on unnest, is
// planned again on every call. The proof is checked in the UPDATE's WHERE,
// which Postgres re-checks on the row's latest version when a concurrent
// writer held it. A refused write divides by zero, which aborts the
// transaction (the count is of the statement's own rows, so no plan can fold
// it into a constant).
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
    RETURNING id, attempt, attempted_at, attempted_by, lease_last_token
),
` + loggedCompletionSQL(schema) + `
SELECT 1 / count(*)::int FROM updated`
}

// loggedCompletionSQL is the CTE of a claimed completion's statements that
// logs the attempts of the jobs its CTE updated completed (their revoked
// tokens now in lease_last_token).
func loggedCompletionSQL(schema string) string {
	return `logged AS (
    INSERT INTO ` + tableName(schema, "weir_job_attempt") + `
        (job_id, attempt, lease_token, attempted_by, started_at, outcome)
    SELECT id, attempt, lease_last_token, attempted_by[array_upper(attempted_by, 1)], attempted_at, 'completed'
    FROM updated
)`
}

// refusedInStatement reports whether err is a statement's own refusal: the
// claim and claimed-completion statements divide by zero when their check
// fails, so that the database aborts the transaction whatever the caller
// does with the error.
func refusedInStatement(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DivisionByZero
}
