package fencing

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivershared/uniquestates"
	"github.com/riverqueue/river/rivertype"
)

// With the fencing migration installed, the Pilot's fetch and its state
// writes each take one statement that also does the lease work (decision
// 0002). The SQL is River v0.51.2's (riverpgxv5's JobGetAvailable and
// JobSetStateIfRunningMany) with the lease columns added; the conformance
// tests run it against River's own statements.

// jobColumnNames are the river_job columns River's driver reads into a
// JobRow, in its order (scannedJob.dest scans them in this order).
var jobColumnNames = []string{
	"id", "args", "attempt", "attempted_at", "attempted_by", "created_at", "errors", "finalized_at", "kind", "max_attempts",
	"metadata", "priority", "queue", "state", "scheduled_at", "tags", "unique_key", "unique_states",
}

// jobColumns lists jobColumnNames for a select.
var jobColumns = strings.Join(jobColumnNames, ", ")

// qualifiedColumns lists jobColumnNames qualified by alias.
func qualifiedColumns(alias string) string {
	return alias + "." + strings.Join(jobColumnNames, ", "+alias+".")
}

// The inline statements by schema: they are built once, not on every fetch
// and completion batch.
var fetchInlineCache, setStateInlineCache sync.Map

func cachedSQL(cache *sync.Map, schema string, build func(string) string) string {
	if sql, ok := cache.Load(schema); ok {
		return sql.(string)
	}
	sql, _ := cache.LoadOrStore(schema, build(schema))
	return sql.(string)
}

// A write's proof against its job's row (alias row): proofHoldsSQL is true
// when the proof (a token, uuid, with the attempt it was minted for; or, for
// an attempt without a token, attempt and attemptedAt) is the running
// attempt's, proofRepeatsSQL when the attempt that completed the job writes
// again, whatever state it asks for. A proof whose token and attempt
// disagree holds nothing (fail closed). A write without any proof holds a
// running job that no fenced attempt leases, as River's write would, and
// nothing else. Both state-write paths judge with these, so they cannot
// judge differently. Each is one CASE, which the planner cannot take apart
// into a state test that scans every running job (decision 0004).
func proofHoldsSQL(row, token, attempt, attemptedAt string) string {
	return `CASE WHEN ` + row + `.state <> 'running' THEN false
            WHEN ` + token + ` IS NOT NULL THEN ` + row + `.lease_token = ` + token + ` AND ` + row + `.attempt = ` + attempt + `
            WHEN ` + attempt + ` IS NULL THEN ` + row + `.lease_expires_at IS NULL
            ELSE ` + row + `.attempt = ` + attempt + ` AND ` + row + `.attempted_at = ` + attemptedAt + ` END IS TRUE`
}

func proofRepeatsSQL(row, token, attempt, attemptedAt string) string {
	return `CASE WHEN ` + row + `.state <> 'completed' THEN false
            WHEN ` + token + ` IS NOT NULL THEN ` + row + `.lease_last_token = ` + token + ` AND ` + row + `.attempt = ` + attempt + `
            ELSE ` + row + `.attempt = ` + attempt + ` AND ` + row + `.attempted_at = ` + attemptedAt + ` END IS TRUE`
}

// verdictSQL judges a write against its job's row (alias row, locked):
// 'ok' when its proof holds the job, 'repeat' when the attempt that
// completed the job writes again, else 'stale'.
func verdictSQL(row, token, attempt, attemptedAt string) string {
	return `CASE
            WHEN ` + proofHoldsSQL(row, token, attempt, attemptedAt) + ` THEN 'ok'
            WHEN ` + proofRepeatsSQL(row, token, attempt, attemptedAt) + ` THEN 'repeat'
            ELSE 'stale'
        END`
}

// fetchInlineSQL is River's JobGetAvailable that also gives every job it
// moves to running a lease token, the next of the fresh tokens in $8 (one
// per job it may lock: mintLeaseTokens, decision 0005), and its lease expiry
// ($7). A fetch that locks more jobs than it brought tokens for
// (mintedTokensMax) has Postgres mint the rest.
func fetchInlineSQL(schema string) string {
	return cachedSQL(&fetchInlineCache, schema, buildFetchInlineSQL)
}

func buildFetchInlineSQL(schema string) string {
	table := tableName(schema, "river_job")
	return `
WITH locked_jobs AS (
    SELECT id
    FROM ` + table + `
    WHERE
        state = 'available'
        AND queue = $4::text
        AND ($5::text[] IS NULL OR kind = ANY($5::text[]))
        AND scheduled_at <= coalesce($1::timestamptz, now())
    ORDER BY
        priority ASC,
        scheduled_at ASC,
        id ASC
    LIMIT $6::integer
    FOR UPDATE
    SKIP LOCKED
),
-- FOR UPDATE allows no window function beside it: the rows are numbered
-- once locked, once (MATERIALIZED: never evaluated again).
numbered_jobs AS MATERIALIZED (
    SELECT id, row_number() OVER () AS n FROM locked_jobs
)
UPDATE ` + table + ` river_job
SET
    state = 'running',
    attempt = river_job.attempt + 1,
    attempted_at = coalesce($1::timestamptz, now()),
    attempted_by = array_append(
        CASE WHEN array_length(river_job.attempted_by, 1) >= $2::int
        THEN river_job.attempted_by[array_length(river_job.attempted_by, 1) + 2 - $2:]
        ELSE river_job.attempted_by
        END,
        $3::text
    ),
    lease_token = coalesce(($8::uuid[])[numbered_jobs.n], gen_random_uuid()),
    lease_expires_at = now() + $7::interval
FROM numbered_jobs
WHERE river_job.id = numbered_jobs.id
RETURNING ` + qualifiedColumns("river_job") + `, river_job.lease_token::text, river_job.lease_expires_at, river_job.lease_details::text`
}

// setStateInlineSQL is the Pilot's judge and River's JobSetStateIfRunningMany
// in one statement (decision 0002): River's UPDATE, applied only where the
// write's proof holds its job (proofHoldsSQL, re-checked by Postgres on the
// row's latest version), that also revokes those attempts' leases and logs
// those that leave their jobs unfinished (an attempt that finalizes its job
// stays on the job's row, fencing 003; an attempt without a token is left to
// the trigger). It returns, for each write whose job exists, its verdict and
// the job: as River's statement returns it for an applied write or a repeat,
// as it is for a stale one. A write that was not applied is a repeat or
// stale, never ok. A single write has a statement of its own over scalars,
// which Postgres plans once per connection (an unnest statement is planned
// again on every call).
func setStateInlineSQL(schema string, single bool) string {
	if single {
		return cachedSQL(&setStateSingleCache, schema, buildSetStateSingleSQL)
	}
	return cachedSQL(&setStateInlineCache, schema, buildSetStateInlineSQL)
}

var setStateSingleCache sync.Map

func buildSetStateInlineSQL(schema string) string {
	return buildSetStateSQL(schema, "= ANY($1::bigint[])", setStateInput(true))
}

func buildSetStateSingleSQL(schema string) string {
	return buildSetStateSQL(schema, "= $1::bigint", setStateInput(false))
}

// setStateColumns are the columns of setStateInlineSQL's writes from its
// parameters $1 to $12, with their types.
var setStateColumns = [...]struct{ name, typ string }{
	{"id", "bigint"}, {"attempt_do_update", "boolean"}, {"new_attempt", "int"}, {"errors_do_update", "boolean"},
	{"new_error", "jsonb"}, {"finalized_at_do_update", "boolean"}, {"new_finalized_at", "timestamptz"},
	{"metadata_do_merge", "boolean"}, {"metadata_updates", "jsonb"}, {"scheduled_at_do_update", "boolean"},
	{"new_scheduled_at", "timestamptz"}, {"new_state", "text"},
}

// setStateInput is the select of setStateInlineSQL's writes, one row per
// write: from arrays, unnested in the select list as River's statement does
// (cheaper than in FROM), or from scalars. A write without a proof has an
// empty token and attempt 0 (no attempt is 0 while running): NULLs, which
// prove nothing.
func setStateInput(arrays bool) string {
	param := func(n int, typ string) string {
		if arrays {
			return fmt.Sprintf("unnest($%d::%s[])", n, typ)
		}
		return fmt.Sprintf("$%d::%s", n, typ)
	}
	columns := make([]string, 0, len(setStateColumns)+3)
	for i, c := range setStateColumns {
		columns = append(columns, param(i+1, c.typ)+" AS "+c.name)
	}
	columns = append(columns, "nullif("+param(14, "text")+", '')::uuid AS proof_token",
		"nullif("+param(15, "int")+", 0) AS proof_attempt", param(16, "timestamptz")+" AS proof_attempted_at")
	return "\n    SELECT\n        " + strings.Join(columns, ",\n        ")
}

// buildSetStateSQL is setStateInlineSQL with jobInput, the select of the
// writes (one row per write), and idsMatch, the test of a job ID against the
// writes' ($1). Both joins of river_job with the writes also restrict the
// job by idsMatch, which the join implies, so that the jobs are taken by
// primary key whatever the plan (decision 0004).
func buildSetStateSQL(schema, idsMatch, jobInput string) string {
	table := tableName(schema, "river_job")
	stateType := tableName(schema, "river_job_state")
	return `
WITH job_input AS (` + jobInput + `
),
updated AS (
    UPDATE ` + table + ` river_job
    SET
        attempt = CASE
            WHEN river_job.state = 'running'
                 AND NOT (v.new_state IN ('available','retryable','scheduled') AND river_job.metadata ? 'cancel_attempted_at')
                 AND v.attempt_do_update
            THEN v.new_attempt
            ELSE river_job.attempt
        END,
        errors = CASE
            WHEN river_job.state = 'running'
                 AND v.errors_do_update
            THEN array_append(river_job.errors, v.new_error)
            ELSE river_job.errors
        END,
        finalized_at = CASE
            WHEN river_job.state = 'running'
                 AND (v.new_state IN ('available','retryable','scheduled') AND river_job.metadata ? 'cancel_attempted_at')
            THEN coalesce($13::timestamptz, now())
            WHEN river_job.state = 'running'
                 AND v.finalized_at_do_update
            THEN v.new_finalized_at
            ELSE river_job.finalized_at
        END,
        metadata = CASE
            WHEN v.metadata_do_merge
            THEN river_job.metadata || v.metadata_updates
            ELSE river_job.metadata
        END,
        scheduled_at = CASE
            WHEN river_job.state = 'running'
                 AND NOT (v.new_state IN ('available','retryable','scheduled') AND river_job.metadata ? 'cancel_attempted_at')
                 AND v.scheduled_at_do_update
            THEN v.new_scheduled_at
            ELSE river_job.scheduled_at
        END,
        state = CASE
            WHEN river_job.state = 'running'
                 AND (v.new_state IN ('available','retryable','scheduled') AND river_job.metadata ? 'cancel_attempted_at')
            THEN 'cancelled'::` + stateType + `
            WHEN river_job.state = 'running'
            THEN v.new_state::` + stateType + `
            ELSE river_job.state
        END,
        -- A write without a proof (no attempt) leaves the lease columns to
        -- the trigger, which revokes and logs with the row's own attempt.
        lease_last_token = CASE WHEN v.new_state <> 'running' AND v.proof_attempt IS NOT NULL THEN river_job.lease_token ELSE river_job.lease_last_token END,
        lease_token = CASE WHEN v.new_state <> 'running' AND v.proof_attempt IS NOT NULL THEN NULL ELSE river_job.lease_token END,
        lease_expires_at = CASE WHEN v.new_state <> 'running' AND v.proof_attempt IS NOT NULL THEN NULL ELSE river_job.lease_expires_at END
    FROM job_input v
    WHERE river_job.id = v.id
        AND river_job.id ` + idsMatch + `
        AND ` + proofHoldsSQL("river_job", "v.proof_token", "v.proof_attempt", "v.proof_attempted_at") + `
    -- The ended attempt: the proof's, with its token (NULL when the
    -- trigger logged the attempt).
    RETURNING ` + qualifiedColumns("river_job") + `,
        river_job.lease_last_token AS ended_token, v.proof_attempt AS ended_attempt, v.new_state
),
logged AS (
    INSERT INTO ` + tableName(schema, "weir_job_attempt") + `
        (job_id, attempt, lease_token, attempted_by, started_at, outcome)
    SELECT id, ended_attempt, ended_token, attempted_by[array_upper(attempted_by, 1)], attempted_at, state::text
    FROM updated
    WHERE ended_token IS NOT NULL AND ended_attempt IS NOT NULL AND new_state <> 'running'
        AND state NOT IN ('completed', 'cancelled', 'discarded') -- a final attempt stays on its job (fencing 003)
),
-- The writes not applied, judged on their jobs' latest rows (FOR SHARE),
-- which stay locked until the caller commits.
unapplied AS (
    SELECT ` + qualifiedColumns("j") + `, j.lease_last_token,
        v.proof_token, v.proof_attempt, v.proof_attempted_at, v.new_state
    FROM job_input v
    JOIN ` + table + ` j ON j.id = v.id AND j.id ` + idsMatch + `
    WHERE v.id NOT IN (SELECT id FROM updated) -- IDs are never NULL
    FOR SHARE OF j
)
SELECT ` + inlineVerdictOK + `, ` + jobColumns + `
FROM updated
UNION ALL
SELECT CASE WHEN ` + proofRepeatsSQL("u", "u.proof_token", "u.proof_attempt", "u.proof_attempted_at") + `
        THEN ` + inlineVerdictRepeat + ` ELSE ` + inlineVerdictStale + ` END,
    ` + qualifiedColumns("u") + `
FROM unapplied u
ORDER BY id`
}

// setStateInlineSQL's verdicts, as numbers (scanning them allocates
// nothing).
const (
	inlineVerdictOK     = "0"
	inlineVerdictRepeat = "1"
	inlineVerdictStale  = "2"
)

// inlineVerdicts maps them to judge's verdicts.
var inlineVerdicts = [...]string{verdictOK, verdictRepeat, verdictStale}

// setStateInlineArgs are setStateInlineSQL's arguments, encoded as River's
// driver encodes JobSetStateIfRunningMany's.
func setStateInlineArgs(params *riverdriver.JobSetStateIfRunningManyParams, proofs []*proof) []any {
	n := len(params.ID)
	var (
		attemptDoUpdate     = make([]bool, n)
		attempt             = make([]int32, n)
		errorsDoUpdate      = make([]bool, n)
		finalizedAtDoUpdate = make([]bool, n)
		finalizedAt         = make([]time.Time, n)
		metadataDoMerge     = make([]bool, n)
		metadataUpdates     = make([][]byte, n)
		scheduledAtDoUpdate = make([]bool, n)
		scheduledAt         = make([]time.Time, n)
		state               = make([]string, n)
		tokens              = make([]string, n)
		proofAttempts       = make([]int32, n)
		proofAttemptedAts   = make([]time.Time, n)
	)
	for i := range n {
		if params.Attempt[i] != nil {
			attemptDoUpdate[i] = true
			attempt[i] = int32(*params.Attempt[i]) //nolint:gosec // attempts are smallint
		}
		if params.ErrData[i] != nil {
			errorsDoUpdate[i] = true
		}
		if params.FinalizedAt[i] != nil {
			finalizedAtDoUpdate[i] = true
			finalizedAt[i] = *params.FinalizedAt[i]
		}
		if params.MetadataDoMerge[i] {
			metadataDoMerge[i] = true
			metadataUpdates[i] = params.MetadataUpdates[i]
		}
		if params.ScheduledAt[i] != nil {
			scheduledAtDoUpdate[i] = true
			scheduledAt[i] = *params.ScheduledAt[i]
		}
		state[i] = string(params.State[i])
		if pr := proofs[i]; pr != nil {
			tokens[i] = pr.Token
			proofAttempts[i] = int32(pr.Attempt) //nolint:gosec // attempts are smallint
			proofAttemptedAts[i] = pr.AttemptedAt
		}
	}
	if n == 1 {
		// setStateInlineSQL(schema, true)'s scalars.
		return []any{params.ID[0], attemptDoUpdate[0], attempt[0], errorsDoUpdate[0], params.ErrData[0], finalizedAtDoUpdate[0],
			finalizedAt[0], metadataDoMerge[0], metadataUpdates[0], scheduledAtDoUpdate[0], scheduledAt[0], state[0], params.Now,
			tokens[0], proofAttempts[0], proofAttemptedAts[0]}
	}
	// Arrays of values, not pointers: pgx encodes those without reflection.
	return []any{params.ID, attemptDoUpdate, attempt, errorsDoUpdate, params.ErrData, finalizedAtDoUpdate,
		finalizedAt, metadataDoMerge, metadataUpdates, scheduledAtDoUpdate, scheduledAt, state, params.Now,
		tokens, proofAttempts, proofAttemptedAts}
}

// scannedJob holds a river_job row as River's driver reads it
// (dbsqlc.RiverJob): value types where the column is NOT NULL, so scanning
// allocates no more than River's does.
type scannedJob struct {
	id           int64
	args         []byte
	attempt      int16
	attemptedAt  *time.Time
	attemptedBy  []string
	createdAt    time.Time
	errors       [][]byte
	finalizedAt  *time.Time
	kind         string
	maxAttempts  int16
	metadata     []byte
	priority     int16
	queue        string
	state        string
	scheduledAt  time.Time
	tags         []string
	uniqueKey    []byte
	uniqueStates pgtype.Bits
}

func (s *scannedJob) dest() []any {
	return []any{&s.id, &s.args, &s.attempt, &s.attemptedAt, &s.attemptedBy, &s.createdAt, &s.errors,
		&s.finalizedAt, &s.kind, &s.maxAttempts, &s.metadata, &s.priority, &s.queue, &s.state,
		&s.scheduledAt, &s.tags, &s.uniqueKey, &s.uniqueStates}
}

// jobRow decodes the row as riverpgxv5 does (jobRowFromInternalPartial): a
// row is always returned, with the fields that could not be decoded left
// empty and the error returned beside it.
func (s *scannedJob) jobRow() (*rivertype.JobRow, error) {
	row := new(struct {
		job         rivertype.JobRow
		attemptedAt time.Time
	})
	err := s.decode(&row.job, &row.attemptedAt)
	return &row.job, err
}

// decode is jobRow into job, whose AttemptedAt, if set, points to
// attemptedAt.
func (s *scannedJob) decode(job *rivertype.JobRow, attemptedAt *time.Time) error {
	if s.attemptedAt != nil {
		*attemptedAt = s.attemptedAt.UTC()
	} else {
		attemptedAt = nil
	}
	var decodeErr error
	errs := make([]rivertype.AttemptError, len(s.errors))
	for i, raw := range s.errors {
		if err := riverdriver.UnmarshalAttemptError(raw, &errs[i]); err != nil {
			decodeErr = fmt.Errorf("error unmarshaling `errors`: %w", err)
			errs = nil
			break
		}
	}
	var finalizedAt *time.Time
	if s.finalizedAt != nil {
		t := s.finalizedAt.UTC()
		finalizedAt = &t
	}
	var uniqueStatesByte byte
	if s.uniqueStates.Valid && len(s.uniqueStates.Bytes) > 0 {
		uniqueStatesByte = s.uniqueStates.Bytes[0]
	}
	*job = rivertype.JobRow{
		ID:           s.id,
		Attempt:      max(int(s.attempt), 0),
		AttemptedAt:  attemptedAt,
		AttemptedBy:  s.attemptedBy,
		CreatedAt:    s.createdAt.UTC(),
		EncodedArgs:  s.args,
		Errors:       errs,
		FinalizedAt:  finalizedAt,
		Kind:         s.kind,
		MaxAttempts:  max(int(s.maxAttempts), 0),
		Metadata:     s.metadata,
		Priority:     max(int(s.priority), 0),
		Queue:        s.queue,
		ScheduledAt:  s.scheduledAt.UTC(),
		State:        rivertype.JobState(s.state),
		Tags:         s.tags,
		UniqueKey:    s.uniqueKey,
		UniqueStates: uniquestates.UniqueBitmaskToStates(uniqueStatesByte),
	}
	return decodeErr
}

// fetchedJob is a fetched job's row and its record, allocated as one.
type fetchedJob struct {
	rec         fetchRecord
	job         rivertype.JobRow
	attemptedAt time.Time
}

// scanInlineFetch reads fetchInlineSQL's rows: River's result plus each job's
// lease, in the record at the job's index (its row set, for recordFetched).
func scanInlineFetch(rows pgx.Rows) (*riverdriver.JobGetAvailableResult, []*fetchRecord, error) {
	defer rows.Close()
	res := &riverdriver.JobGetAvailableResult{}
	var leases []*fetchRecord
	// One set of scan targets for all rows, zeroed before each (pgx then
	// allocates every value it scans anew). The statement sets every row's
	// state (running) and attempted_at: attempted_at is scanned into a
	// value, not a new pointer, and the state is not read.
	t := new(struct {
		s           scannedJob
		attemptedAt time.Time
		token       string
		expires     time.Time
		details     []byte
	})
	dest := append(t.s.dest(), &t.token, &t.expires, &t.details)
	for i, d := range dest {
		switch d {
		case &t.s.attemptedAt:
			dest[i] = &t.attemptedAt
		case &t.s.state:
			dest[i] = nil
		}
	}
	for rows.Next() {
		t.s = scannedJob{attemptedAt: &t.attemptedAt, state: string(rivertype.JobStateRunning)}
		t.attemptedAt, t.token, t.expires, t.details = time.Time{}, "", time.Time{}, nil
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, err
		}
		f := &fetchedJob{rec: fetchRecord{details: t.details, expiresAt: t.expires, token: t.token}}
		if err := t.s.decode(&f.job, &f.attemptedAt); err != nil {
			if res.DecodeErrors == nil {
				res.DecodeErrors = make(map[int64]error)
			}
			res.DecodeErrors[f.job.ID] = err
		}
		res.Jobs, leases = append(res.Jobs, &f.job), append(leases, &f.rec)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return res, leases, nil
}
