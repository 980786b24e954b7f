package fencing

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivershared/riverpilot"
	"github.com/riverqueue/river/rivershared/startstop"
	"github.com/riverqueue/river/rivershared/util/timeoututil"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/internal/fencingclaim"
)

// pilot is the fencing layer's River Pilot (Driver.PluginPilot): it fences
// every fetch and job state write River routes through it, and, as
// riverpilot.PilotJobRescuer, keeps River's rescuer off jobs with a live lease.
type pilot struct {
	riverpilot.StandardPilot

	driver *Driver
	reaper *leaseReaper

	// calls counts River's calls into the Pilot's fencing seams, for the
	// conformance test.
	calls struct {
		fetch    atomic.Int64
		setState atomic.Int64
		known    atomic.Int64 // state writes answered without a statement (knownRepeats)
	}

	fencedMu sync.Mutex
	fenced   map[string]fencedState // by schema

	fetched *shardedMap[*fetchRecord] // by job ID: attempts this process fetched

	schemasMu sync.Mutex
	schemas   map[string]struct{} // schemas River has used with this pilot
}

var _ riverpilot.PilotJobRescuer = (*pilot)(nil)

// fencedState is an answer to "is the fencing migration installed in this
// schema?", and when it was asked.
type fencedState struct {
	checkedAt time.Time
	fenced    bool
}

// fetchRecord is an attempt this process fetched, as the fetch saw it.
type fetchRecord struct {
	attempt     int
	attemptedAt time.Time
	details     []byte
	expiresAt   time.Time
	leaseFrom   time.Time         // local time before the fetch was sent (attemptState.leaseFrom)
	row         *rivertype.JobRow // as fetched; never written
	schema      string
	token       string

	// completedAt is when the attempt's own completion, which committed,
	// finalized the job (committed); zero until then. Read and written
	// under the record's shard lock only.
	completedAt time.Time
}

func newPilot(driver *Driver) *pilot {
	p := &pilot{
		driver:  driver,
		fenced:  make(map[string]fencedState),
		fetched: newShardedMap[*fetchRecord](),
		schemas: make(map[string]struct{}),
	}
	p.reaper = newLeaseReaper(driver, p)
	return p
}

// PluginServices returns the lease keeper and the lease reaper, which River
// runs on every client that works jobs. The reaper elects among fenced
// processes alone which one reaps (reaperElection), not through River's
// leader, which may be a plain riverpgxv5 process.
func (p *pilot) PluginServices() []startstop.Service {
	return []startstop.Service{p.driver.keeper, p.reaper}
}

// PluginMaintenanceServices returns nothing: the lease reaper does not
// follow River's leader (PluginServices).
func (p *pilot) PluginMaintenanceServices() []startstop.Service { return nil }

func (p *pilot) noteSchema(schema string) {
	p.schemasMu.Lock()
	defer p.schemasMu.Unlock()
	p.schemas[schema] = struct{}{}
}

func (p *pilot) knownSchemas() []string {
	p.schemasMu.Lock()
	defer p.schemasMu.Unlock()
	return slices.Sorted(maps.Keys(p.schemas))
}

// queryRower is what both River executors and pgx pools offer.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) riverdriver.Row
}

// isFenced reports whether the fencing migration is installed in schema.
// Before it is (a River application that migrates fencing in after River's
// own tables), the Pilot only strips proofs and delegates to River. A
// negative answer is re-checked every HeartbeatInterval, so a running client
// starts fencing shortly after the migration; a positive one is kept.
func (p *pilot) isFenced(ctx context.Context, exec queryRower, schema string) (bool, error) {
	p.fencedMu.Lock()
	state, ok := p.fenced[schema]
	p.fencedMu.Unlock()
	if ok && (state.fenced || time.Since(state.checkedAt) < p.driver.config.HeartbeatInterval) {
		return state.fenced, nil
	}
	// to_regclass never errors on a missing table, so this is safe inside a
	// caller's transaction.
	state = fencedState{checkedAt: time.Now()}
	if err := exec.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL",
		tableName(schema, "weir_job_attempt")).Scan(&state.fenced); err != nil {
		return false, fmt.Errorf("checking for the fencing migration in schema %q: %w", schema, err)
	}
	p.fencedMu.Lock()
	defer p.fencedMu.Unlock()
	if newer, ok := p.fenced[schema]; ok && newer.checkedAt.After(state.checkedAt) {
		// A check that began after this one answered first: this one's
		// answer may be from before a migration that one saw.
		return newer.fenced, nil
	}
	p.fenced[schema] = state
	return state.fenced, nil
}

// querier is what pgx pools and transactions offer for reading many rows,
// which River's executors do not.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// querier returns the pgx pool or transaction under one of this driver's
// executors, or nil for an executor it does not know (the Pilot then takes
// River's statements).
func (p *pilot) querier(exec riverdriver.Executor) querier {
	switch e := exec.(type) {
	case *executor:
		if p.driver.pool != nil {
			return p.driver.pool
		}
	case *executorTx:
		if inner, ok := e.ExecutorTx.(*riverpgxv5.ExecutorTx); ok {
			return p.driver.Driver.UnwrapTx(inner)
		}
	case *riverpgxv5.ExecutorTx:
		return p.driver.Driver.UnwrapTx(e)
	}
	return nil
}

// Fenced reports whether fencing is active for schema ("" for the
// search_path's first): the fencing migration is installed there. Before it
// is, a fenced client works like a plain River client. Use it in readiness
// checks.
func (d *Driver) Fenced(ctx context.Context, schema string) (bool, error) {
	if d.pool == nil {
		return false, errNoPool
	}
	return d.pilot.isFenced(ctx, d.Driver.GetExecutor(), schema)
}

// JobGetAvailable fetches jobs with River's own query. When fencing is active
// it fetches with fetchInlineSQL instead: River's statement that also mints
// the tokens and sets the leases' expiry, in one statement (no transaction
// around it, no second read). The tokens stay in memory (never in metadata)
// and reach the attempts through the plugin.
func (p *pilot) JobGetAvailable(ctx context.Context, exec riverdriver.Executor, state riverpilot.ProducerState, params *riverdriver.JobGetAvailableParams) (*riverdriver.JobGetAvailableResult, error) {
	p.calls.fetch.Add(1)
	p.noteSchema(params.Schema)
	fenced, err := p.isFenced(ctx, exec, params.Schema)
	if err != nil {
		return nil, err
	}
	if !fenced {
		res, err := p.StandardPilot.JobGetAvailable(ctx, exec, state, params)
		if err != nil {
			return nil, err
		}
		p.recordFetched(params.Schema, res.Jobs, nil, time.Time{})
		return res, nil
	}
	q := p.querier(exec)
	if q == nil {
		return nil, fmt.Errorf("fencing: fetching jobs through a %T, not an executor of this driver", exec)
	}
	// As River's StandardPilot.JobGetAvailable.
	if params.MaxToLock <= 0 {
		return &riverdriver.JobGetAvailableResult{}, nil
	}
	return timeoututil.WithTimeoutV(ctx, hotOperationTimeout, "fencing.Pilot.JobGetAvailable", func(ctx context.Context) (*riverdriver.JobGetAvailableResult, error) {
		sent := time.Now()
		rows, err := q.Query(ctx, fetchInlineSQL(params.Schema),
			params.Now,
			int32(min(params.MaxAttemptedBy, math.MaxInt32)), //nolint:gosec // clamped
			params.ClientID,
			params.Queue,
			params.Kind,
			int32(min(params.MaxToLock, math.MaxInt32)), //nolint:gosec // clamped
			p.driver.config.LeaseTTL,
			mintLeaseTokens(min(params.MaxToLock, mintedTokensMax)),
		)
		if err != nil {
			return nil, fmt.Errorf("fetching jobs: %w", err)
		}
		res, leases, err := scanInlineFetch(rows)
		if err != nil {
			return nil, fmt.Errorf("fetching jobs: %w", err)
		}
		p.recordFetched(params.Schema, res.Jobs, leases, sent)
		return res, nil
	})
}

// hotOperationTimeout is River's rivercommon.HotOperationTimeout, which
// River's StandardPilot puts on every fetch.
const hotOperationTimeout = 10 * time.Second

// recordFetched records the attempts of jobs fetched in schema; leases, if
// not nil, holds the record of each job at its index.
func (p *pilot) recordFetched(schema string, jobs []*rivertype.JobRow, leases []*fetchRecord, sent time.Time) {
	for i, job := range jobs {
		var rec *fetchRecord
		if leases != nil {
			rec = leases[i]
		} else {
			rec = &fetchRecord{}
		}
		rec.attempt, rec.row = job.Attempt, job
		if job.AttemptedAt != nil {
			rec.attemptedAt = *job.AttemptedAt
		}
		rec.schema, rec.leaseFrom = schema, sent
		p.fetched.update(job.ID, func(m map[int64]*fetchRecord) { m[job.ID] = rec })
	}
}

// fetchedRecord returns the record of an attempt this process fetched.
func (p *pilot) fetchedRecord(jobID int64, attempt int) *fetchRecord {
	rec, _ := p.fetched.load(jobID)
	if rec == nil || rec.attempt != attempt {
		return nil
	}
	return rec
}

// fetchedProof returns the proof of the attempt of jobID this process
// fetched last, for a write that carries no proof of its own (an attempt
// that failed before the plugin ran).
func (p *pilot) fetchedProof(jobID int64) *proof {
	if rec, _ := p.fetched.load(jobID); rec != nil {
		return &proof{Attempt: rec.attempt, AttemptedAt: rec.attemptedAt, Token: rec.token}
	}
	return nil
}

// forgetFetched drops the records of the attempts whose writes are done.
func (p *pilot) forgetFetched(jobIDs []int64, proofs []*proof) {
	for i, pr := range proofs {
		if pr == nil {
			continue
		}
		p.fetched.update(jobIDs[i], func(m map[int64]*fetchRecord) {
			if rec := m[jobIDs[i]]; rec != nil && rec.attempt == pr.Attempt && rec.attemptedAt.Equal(pr.AttemptedAt) {
				delete(m, jobIDs[i])
			}
		})
	}
}

// committed notes, on the record of the attempt that made it, that
// completion c committed (claimer.Committed): River's completer, which
// writes "completed" again once the attempt's Work returns, is then
// answered without a statement (knownRepeats). A completion that merged
// metadata is not noted: the job it left is not the fetched row completed.
func (p *pilot) committed(c *fencingclaim.Completion) {
	if c.Token == "" || c.Metadata != nil || c.FinalizedAt.IsZero() {
		return
	}
	at := c.FinalizedAt.Truncate(time.Microsecond).UTC() // as Postgres keeps it, and River reads it
	p.fetched.update(c.JobID, func(m map[int64]*fetchRecord) {
		if rec := m[c.JobID]; rec != nil && rec.row != nil && rec.token == c.Token && rec.attempt == c.Attempt && rec.schema == c.Schema {
			rec.completedAt = at
		}
	})
}

// completedBy reports whether the attempt pr proves (with its token) is
// rec's, in schema, and its own completion committed. Callers hold rec's
// shard lock.
func (rec *fetchRecord) completedBy(schema string, pr *proof) bool {
	return !rec.completedAt.IsZero() && rec.schema == schema && rec.token == pr.Token &&
		rec.attempt == pr.Attempt && rec.attemptedAt.Equal(pr.AttemptedAt)
}

// completedRow is the job as its attempt's committed completion left it:
// the fetched row, completed at completedAt (one allocation). What others
// wrote to the job while the attempt ran (its metadata, by a cancellation
// asked meanwhile) is as fetched. Callers hold rec's shard lock.
func (rec *fetchRecord) completedRow() *rivertype.JobRow {
	c := &struct {
		row rivertype.JobRow
		at  time.Time
	}{row: *rec.row, at: rec.completedAt}
	c.row.State, c.row.FinalizedAt = rivertype.JobStateCompleted, &c.at
	return &c.row
}

// extractProof takes the attempt's proof out of its metadata updates.
func extractProof(updates []byte, doMerge bool) (*proof, []byte, bool, error) {
	if !doMerge || len(updates) == 0 {
		return nil, updates, doMerge, nil
	}
	// The proof alone needs no JSON decoding (decision 0025).
	if rest, ok := bytes.CutPrefix(updates, []byte(`{"`+proofKey+`":"`)); ok {
		if encoded, ok := bytes.CutSuffix(rest, []byte(`"}`)); ok && !bytes.ContainsAny(encoded, `"\`) {
			pr, err := decodeProof(string(encoded))
			return pr, nil, false, err
		}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(updates, &m); err != nil {
		return nil, nil, false, fmt.Errorf("decoding metadata updates: %w", err)
	}
	raw, ok := m[proofKey]
	if !ok {
		return nil, updates, doMerge, nil
	}
	var encoded string
	if err := json.Unmarshal(raw, &encoded); err != nil {
		return nil, nil, false, fmt.Errorf("decoding lease proof: %w", err)
	}
	pr, err := decodeProof(encoded)
	if err != nil {
		return nil, nil, false, err
	}
	delete(m, proofKey)
	if len(m) == 0 {
		return pr, nil, false, nil
	}
	stripped, err := json.Marshal(m)
	if err != nil {
		return nil, nil, false, fmt.Errorf("encoding metadata updates: %w", err)
	}
	return pr, stripped, true, nil
}

// verdicts of judge.
const (
	verdictMissing = "missing" // no such job (deleted): River returns no row
	verdictOK      = "ok"      // the write's attempt holds the job
	verdictRepeat  = "repeat"  // the attempt that just finished the job, again
	verdictStale   = "stale"   // anything else: rejected
)

// judge locks the jobs (FOR UPDATE, in id order) and says, per write, whether
// its proof shows it comes from the job's current attempt (verdictSQL). It
// must run in the transaction of the write that follows, so the answer holds
// for it.
func (p *pilot) judge(ctx context.Context, exec riverdriver.Executor, schema string, ids []int64, proofs []*proof) ([]string, error) {
	tokens := make([]*string, len(ids))
	attempts := make([]*int32, len(ids))
	attemptedAts := make([]*time.Time, len(ids))
	for i, pr := range proofs {
		if pr == nil {
			continue
		}
		if pr.Token != "" {
			tokens[i] = &pr.Token
		}
		// No attempt is 0 while running: a proof of attempt 0 proves nothing,
		// as on the one-statement path.
		if pr.Attempt > 0 {
			attempts[i] = new(int32(pr.Attempt)) //nolint:gosec // attempts are smallint
		}
		attemptedAts[i] = new(pr.AttemptedAt)
	}
	var verdicts []string
	err := exec.QueryRow(ctx, `
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::int[], $4::timestamptz[])
        WITH ORDINALITY AS x(id, token, attempt, attempted_at, ord)
),
locked AS (
    SELECT j.id, j.state, j.lease_token, j.lease_last_token, j.lease_expires_at, j.attempt, j.attempted_at
    FROM `+tableName(schema, "river_job")+` j
    WHERE j.id = ANY($1::bigint[])
    ORDER BY j.id
    FOR UPDATE
)
SELECT coalesce(array_agg(CASE
        WHEN l.id IS NULL THEN 'missing'
        ELSE `+verdictSQL("l", "x.token::uuid", "x.attempt", "x.attempted_at")+`
    END ORDER BY x.ord), '{}')
FROM input x
LEFT JOIN locked l ON l.id = x.id`, ids, tokens, attempts, attemptedAts).Scan(&verdicts)
	if err != nil {
		return nil, fmt.Errorf("checking leases of %d jobs: %w", len(ids), err)
	}
	if len(verdicts) != len(ids) {
		return nil, fmt.Errorf("checking leases: %d verdicts for %d jobs", len(verdicts), len(ids))
	}
	return verdicts, nil
}

// abortTx puts a caller's transaction into the aborted state, so that its
// Commit fails (pgx returns ErrTxCommitRollback) even if the caller ignores
// the error it was given (why: that error). None of its writes can commit.
func abortTx(ctx context.Context, exec riverdriver.Executor, why error) {
	// The message goes into a dollar-quoted string: no dollar sign may end
	// it early.
	msg := strings.ReplaceAll(why.Error(), "$", "")
	_ = exec.Exec(ctx, "DO $weir$BEGIN RAISE EXCEPTION USING MESSAGE = $m$"+msg+"; transaction aborted$m$, ERRCODE = '"+sqlStateAborted+"'; END$weir$")
}

// JobSetStateIfRunningMany is River's state write, fenced: a write that does
// not prove it comes from the job's current attempt changes nothing; it is
// dropped and counted from River's completer, and aborts a caller's
// transaction (JobCompleteTx) with its error (rejectStale, refuseRepeat).
// The package doc states the contract.
func (p *pilot) JobSetStateIfRunningMany(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobSetStateIfRunningManyParams) ([]*rivertype.JobRow, error) {
	p.calls.setState.Add(1)
	p.noteSchema(params.Schema)
	stripped, proofs, err := p.stripProofs(params)
	if err != nil {
		return nil, err
	}
	fenced, err := p.isFenced(ctx, exec, params.Schema)
	if err != nil {
		return nil, err
	}
	if !fenced {
		rows, err := p.StandardPilot.JobSetStateIfRunningMany(ctx, exec, stripped)
		if err == nil {
			p.writeDone(params.ID, proofs)
		}
		return rows, err
	}
	_, inCallerTx := exec.(riverdriver.ExecutorTx)
	var rows []*rivertype.JobRow
	if !inCallerTx {
		// River's completer: the repeats known here need no statement; the
		// other writes go to the database without them.
		var rest []int
		if rows, rest = p.knownRepeats(params, proofs); rows != nil && len(rest) > 0 {
			restProofs := make([]*proof, len(rest))
			for j, i := range rest {
				restProofs[j] = proofs[i]
			}
			written, err := p.setStateFenced(ctx, exec, false, subsetParams(params, rest), subsetParams(stripped, rest), restProofs)
			if err != nil {
				return nil, err
			}
			rows = append(rows, written...)
		}
	}
	if rows == nil {
		if rows, err = p.setStateFenced(ctx, exec, inCallerTx, params, stripped, proofs); err != nil {
			return nil, err
		}
	}
	p.writeDone(params.ID, proofs)
	return rows, nil
}

// setStateFenced is JobSetStateIfRunningMany's write of params (stripped,
// their proofs taken out) once fencing is active.
func (p *pilot) setStateFenced(ctx context.Context, exec riverdriver.Executor, inCallerTx bool,
	params, stripped *riverdriver.JobSetStateIfRunningManyParams, proofs []*proof,
) ([]*rivertype.JobRow, error) {
	inline := p.querier(exec) != nil && inlineWritable(params)
	txExec := exec
	var (
		ownTx riverdriver.ExecutorTx
		err   error
	)
	// The one-statement path needs no transaction of its own unless
	// OnFinalized must run in it.
	if !inCallerTx && (!inline || p.driver.config.OnFinalized != nil) {
		if ownTx, err = exec.Begin(ctx); err != nil {
			return nil, err
		}
		defer func() { _ = ownTx.Rollback(context.WithoutCancel(ctx)) }()
		txExec = ownTx
	}

	var (
		verdicts []string
		rows     []*rivertype.JobRow
	)
	if inline {
		if verdicts, rows, err = p.setStateInline(ctx, p.querier(txExec), stripped, proofs); err != nil {
			return nil, err
		}
	} else if verdicts, err = p.judge(ctx, txExec, params.Schema, params.ID, proofs); err != nil {
		return nil, err
	}
	keep, refused := p.sortVerdicts(ctx, inCallerTx, params, stripped, proofs, verdicts)
	if refused != nil && inCallerTx {
		// On the one-statement path the writes that held their jobs are
		// applied already; aborting the caller's transaction undoes them.
		abortTx(ctx, exec, refused)
		return nil, refused
	}
	if !inline && len(keep) > 0 {
		if err := p.endLeases(ctx, txExec, stripped, verdicts); err != nil {
			return nil, err
		}
		if rows, err = p.StandardPilot.JobSetStateIfRunningMany(ctx, txExec, subsetParams(stripped, keep)); err != nil {
			return nil, err
		}
	}
	if p.driver.config.OnFinalized != nil {
		if err := p.finalized(ctx, txExec, params, finalizedByWrites(params, verdicts, keep, rows)); err != nil {
			return nil, err
		}
	}
	if ownTx != nil {
		if err := ownTx.Commit(ctx); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// knownRepeats answers, without a statement, the writes of params (River's
// completer's) that ask for the completion their attempt committed itself
// (committed): a repeat, which changes nothing and returns the job as it is
// (setStateInline). It returns their rows, the job as its attempt completed
// it, and the indexes of the other writes; nil rows when there are none.
// Writes whose attempt completed its job elsewhere (another process, a
// commit whose outcome is unknown) or not at all, or that ask for another
// state, go to the database.
func (p *pilot) knownRepeats(params *riverdriver.JobSetStateIfRunningManyParams, proofs []*proof) (rows []*rivertype.JobRow, rest []int) {
	for i, id := range params.ID {
		var row *rivertype.JobRow
		if pr := proofs[i]; pr != nil && pr.Token != "" && params.State[i] == rivertype.JobStateCompleted {
			p.fetched.update(id, func(m map[int64]*fetchRecord) {
				if rec := m[id]; rec != nil && rec.completedBy(params.Schema, pr) {
					row = rec.completedRow()
				}
			})
		}
		if row == nil {
			rest = append(rest, i)
			continue
		}
		rows = append(rows, row)
	}
	p.calls.known.Add(int64(len(rows)))
	return rows, rest
}

// stripProofs takes each write's proof out of its metadata updates (or,
// for a write without one, takes the proof of the attempt this process
// fetched last) and returns params without them. Only the metadata updates
// change; River's completer retries a failed batch with the same params, so
// they are copied.
func (p *pilot) stripProofs(params *riverdriver.JobSetStateIfRunningManyParams) (*riverdriver.JobSetStateIfRunningManyParams, []*proof, error) {
	stripped := *params
	stripped.MetadataDoMerge = slices.Clone(params.MetadataDoMerge)
	stripped.MetadataUpdates = slices.Clone(params.MetadataUpdates)
	proofs := make([]*proof, len(params.ID))
	for i, id := range params.ID {
		pr, updates, doMerge, err := extractProof(params.MetadataUpdates[i], params.MetadataDoMerge[i])
		if err != nil {
			return nil, nil, fmt.Errorf("setting state of job %d: %w", id, err)
		}
		stripped.MetadataUpdates[i], stripped.MetadataDoMerge[i] = updates, doMerge
		if pr == nil {
			pr = p.fetchedProof(id)
		}
		proofs[i] = pr
	}
	return &stripped, proofs, nil
}

// writeDone drops the records of the attempts whose writes are done (not
// before: River's completer retries a failed batch with the same params)
// and tells the lease keeper their outcomes are written.
func (p *pilot) writeDone(jobIDs []int64, proofs []*proof) {
	p.forgetFetched(jobIDs, proofs)
	p.driver.keeper.outcomeWritten(jobIDs, proofs)
}

// sortVerdicts returns the indexes of the writes of params to apply, and the
// first write refused (for a caller's transaction). A harmless repeat is
// kept with nothing to merge (stripped's updates cleared): River's query
// leaves a row that is no longer running alone and returns it, so the
// completer still reports the attempt's outcome (the completion).
func (p *pilot) sortVerdicts(ctx context.Context, inCallerTx bool, params, stripped *riverdriver.JobSetStateIfRunningManyParams, proofs []*proof, verdicts []string) (keep []int, refused error) {
	keep = make([]int, 0, len(verdicts))
	for i, verdict := range verdicts {
		var why error
		switch verdict {
		case verdictOK, verdictMissing:
			keep = append(keep, i)
		case verdictRepeat:
			if why = p.refuseRepeat(ctx, inCallerTx, params, i, proofs[i]); why == nil {
				stripped.MetadataDoMerge[i], stripped.MetadataUpdates[i] = false, nil
				keep = append(keep, i)
			}
		default:
			why = p.rejectStale(ctx, params, i, proofs[i])
		}
		if refused == nil {
			refused = why
		}
	}
	return keep, refused
}

// finalizedByWrites returns the jobs that the kept writes of params moved to
// a final state, as rows (River's returned rows) show; a repeat finalizes
// nothing.
func finalizedByWrites(params *riverdriver.JobSetStateIfRunningManyParams, verdicts []string, keep []int, rows []*rivertype.JobRow) []int64 {
	var finalized []int64
	for _, i := range keep {
		if verdicts[i] == verdictRepeat || !isFinalState(params.State[i]) {
			continue
		}
		if slices.ContainsFunc(rows, func(row *rivertype.JobRow) bool { return row.ID == params.ID[i] && row.State == params.State[i] }) {
			finalized = append(finalized, params.ID[i])
		}
	}
	return finalized
}

// finalized calls Config.OnFinalized for the jobs the writes of params
// finalized, in the writes' transaction.
func (p *pilot) finalized(ctx context.Context, txExec riverdriver.Executor, params *riverdriver.JobSetStateIfRunningManyParams, jobIDs []int64) error {
	if len(jobIDs) == 0 {
		return nil
	}
	execTx, ok := txExec.(riverdriver.ExecutorTx)
	if !ok {
		return fmt.Errorf("fencing: finalizing jobs %v outside a transaction", jobIDs)
	}
	return p.driver.onFinalized(ctx, p.driver.UnwrapTx(execTx), params.Schema, jobIDs, "jobs")
}

// onFinalized calls Config.OnFinalized, if set, for the jobs (what names
// them in its error) that just finalized in tx.
func (d *Driver) onFinalized(ctx context.Context, tx pgx.Tx, schema string, jobIDs []int64, what string) error {
	hook := d.config.OnFinalized
	if hook == nil || len(jobIDs) == 0 {
		return nil
	}
	if err := hook(ctx, tx, schema, jobIDs); err != nil {
		return fmt.Errorf("fencing: OnFinalized for %s %v: %w", what, jobIDs, err)
	}
	return nil
}

// refuseRepeat returns the error refusing write i of params, judged a repeat
// (its attempt completed the job), or nil when the repeat is harmless. Only
// the attempt's own write in its own transaction (its context is the
// attempt's) is refused: that transaction holds the attempt's work, which
// committed with the completion already (F2).
func (p *pilot) refuseRepeat(ctx context.Context, inCallerTx bool, params *riverdriver.JobSetStateIfRunningManyParams, i int, pr *proof) error {
	st := attemptFromContext(ctx)
	if !inCallerTx || st == nil || st.jobID != params.ID[i] {
		return nil
	}
	attempt := st.attempt
	if pr != nil {
		attempt = pr.Attempt
	}
	op := "set_state_" + string(params.State[i])
	if params.State[i] == rivertype.JobStateCompleted {
		return &AlreadyCompletedError{Attempt: attempt, JobID: params.ID[i], Op: op}
	}
	return &OutcomeConflictError{Attempt: attempt, JobID: params.ID[i], Op: op, Requested: string(params.State[i])}
}

// rejectStale counts and logs write i of params, judged stale, and returns
// the error telling its caller: a *NoLeaseError for a write without any
// proof (made outside a fenced attempt), else a *LeaseLostError.
func (p *pilot) rejectStale(ctx context.Context, params *riverdriver.JobSetStateIfRunningManyParams, i int, pr *proof) error {
	op := "set_state_" + string(params.State[i])
	var attempt int
	if pr != nil {
		attempt = pr.Attempt
	}
	p.driver.counters.emit(ctx, &Event{Attempt: attempt, JobID: params.ID[i], Kind: EventStaleWriteRejected, Op: op})
	if pr == nil || pr.Attempt <= 0 && pr.Token == "" {
		p.driver.logger().WarnContext(ctx, "fencing: rejected a write made outside any fenced attempt",
			slog.Int64("job_id", params.ID[i]), slog.String("op", op))
		return &NoLeaseError{JobID: params.ID[i], Op: op}
	}
	p.driver.logger().WarnContext(ctx, "fencing: rejected a stale write",
		slog.Int64("job_id", params.ID[i]), slog.Int("attempt", attempt), slog.String("op", op))
	return &LeaseLostError{Attempt: attempt, JobID: params.ID[i], Op: op}
}

// endLeases ends, in the write's transaction, the leases of the jobs whose
// writes (judged ok) take them out of running, before River's own statement
// writes them: the lease trigger refuses River's statement on a job
// whose lease is alive, since the statement itself proves no attempt. The
// judge holds the rows locked, so the verdicts still hold.
func (p *pilot) endLeases(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobSetStateIfRunningManyParams, verdicts []string) error {
	var ids []int64
	for i, verdict := range verdicts {
		if verdict == verdictOK && params.State[i] != rivertype.JobStateRunning {
			ids = append(ids, params.ID[i])
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if err := exec.Exec(ctx, `
UPDATE `+tableName(params.Schema, "river_job")+`
SET lease_expires_at = NULL
WHERE id = ANY($1::bigint[]) AND state = 'running' AND lease_expires_at IS NOT NULL`, ids); err != nil {
		return fmt.Errorf("ending the leases of %d jobs: %w", len(ids), err)
	}
	return nil
}

// inlineWritable reports whether setStateInline can take a batch: job IDs
// are distinct (River's completer keys its batch by job ID) and no write
// asks for running, which would leave the lease where it is.
func inlineWritable(params *riverdriver.JobSetStateIfRunningManyParams) bool {
	seen := make(map[int64]struct{}, len(params.ID))
	for i, id := range params.ID {
		if params.State[i] == rivertype.JobStateRunning {
			return false
		}
		if _, dup := seen[id]; dup {
			return false
		}
		seen[id] = struct{}{}
	}
	return true
}

// setStateInline is judge followed by River's JobSetStateIfRunningMany for
// the writes judged ok, in one statement (setStateInlineSQL), with the leases
// of the attempts whose writes apply revoked and logged in it too. It
// returns a verdict per write and the rows River's statement would have
// returned for the writes judged ok, missing or repeat, ordered by ID.
func (p *pilot) setStateInline(ctx context.Context, q querier, params *riverdriver.JobSetStateIfRunningManyParams, proofs []*proof) ([]string, []*rivertype.JobRow, error) {
	pgxRows, err := q.Query(ctx, setStateInlineSQL(params.Schema, len(params.ID) == 1), setStateInlineArgs(params, proofs)...)
	if err != nil {
		return nil, nil, fmt.Errorf("setting state of %d jobs: %w", len(params.ID), err)
	}
	return scanSetStateInline(pgxRows, params.ID)
}

// scanSetStateInline reads setStateInlineSQL's rows for the writes to ids: a
// verdict per write, and the rows River's statement would have returned for
// the writes judged ok, missing or repeat, ordered by ID.
func scanSetStateInline(pgxRows pgx.Rows, ids []int64) ([]string, []*rivertype.JobRow, error) {
	defer pgxRows.Close()
	n := len(ids)
	byID := make(map[int64]string, n)
	rows := make([]*rivertype.JobRow, 0, n)
	// One set of scan targets for all rows, zeroed before each (pgx then
	// allocates every value it scans anew).
	var (
		code int16
		s    scannedJob
	)
	dest := append([]any{&code}, s.dest()...)
	for pgxRows.Next() {
		code, s = -1, scannedJob{}
		if err := pgxRows.Scan(dest...); err != nil {
			return nil, nil, fmt.Errorf("setting state of %d jobs: %w", n, err)
		}
		if code < 0 || int(code) >= len(inlineVerdicts) {
			return nil, nil, fmt.Errorf("setting state of %d jobs: verdict %d for job %d", n, code, s.id)
		}
		verdict := inlineVerdicts[code]
		byID[s.id] = verdict
		if verdict != verdictStale {
			// River's driver returns a row it cannot fully decode as it is.
			row, _ := s.jobRow()
			rows = append(rows, row)
		}
	}
	if err := pgxRows.Err(); err != nil {
		return nil, nil, fmt.Errorf("setting state of %d jobs: %w", n, err)
	}
	verdicts := make([]string, n)
	for i, id := range ids {
		verdict, ok := byID[id]
		if !ok {
			verdict = verdictMissing
		}
		verdicts[i] = verdict
	}
	return verdicts, rows, nil
}

func subsetParams(params *riverdriver.JobSetStateIfRunningManyParams, keep []int) *riverdriver.JobSetStateIfRunningManyParams {
	if len(keep) == len(params.ID) {
		return params
	}
	out := &riverdriver.JobSetStateIfRunningManyParams{Now: params.Now, Schema: params.Schema}
	for _, i := range keep {
		out.ID = append(out.ID, params.ID[i])
		out.Attempt = append(out.Attempt, params.Attempt[i])
		out.ErrData = append(out.ErrData, params.ErrData[i])
		out.FinalizedAt = append(out.FinalizedAt, params.FinalizedAt[i])
		out.MetadataDoMerge = append(out.MetadataDoMerge, params.MetadataDoMerge[i])
		out.MetadataUpdates = append(out.MetadataUpdates, params.MetadataUpdates[i])
		out.ScheduledAt = append(out.ScheduledAt, params.ScheduledAt[i])
		out.State = append(out.State, params.State[i])
	}
	return out
}

// jobUpdate fences River's JobUpdate (Client.JobUpdate, Client.JobUpdateTx,
// river.ResumableSetStepTx), which bypasses the Pilot, when it is called from
// inside an attempt of the job it updates. Calls from outside any attempt
// (operators, admin tools) are not attempt writes and pass unchanged.
func (p *pilot) jobUpdate(ctx context.Context, exec riverdriver.Executor, inCallerTx bool, params *riverdriver.JobUpdateParams) (*rivertype.JobRow, error) {
	st := attemptFromContext(ctx)
	if st == nil || st.jobID != params.ID {
		return exec.JobUpdate(ctx, params)
	}
	fenced, err := p.isFenced(ctx, exec, params.Schema)
	if err != nil {
		return nil, err
	}
	if !fenced {
		return exec.JobUpdate(ctx, params)
	}
	txExec := exec
	var ownTx riverdriver.ExecutorTx
	if !inCallerTx {
		if ownTx, err = exec.Begin(ctx); err != nil {
			return nil, err
		}
		defer func() { _ = ownTx.Rollback(context.WithoutCancel(ctx)) }()
		txExec = ownTx
	}
	pr := st.proof()
	// An attempt may still update the job it completed itself (output).
	verdicts, err := p.judge(ctx, txExec, params.Schema, []int64{params.ID}, []*proof{&pr})
	if err != nil {
		return nil, err
	}
	if verdicts[0] == verdictStale {
		lost := &LeaseLostError{Attempt: st.attempt, JobID: st.jobID, Op: "update"}
		p.driver.counters.emit(ctx, &Event{Attempt: lost.Attempt, JobID: lost.JobID, Kind: EventStaleWriteRejected, Op: lost.Op})
		if inCallerTx {
			abortTx(ctx, exec, lost)
		}
		return nil, lost
	}
	row, err := txExec.JobUpdate(ctx, params)
	if err != nil {
		return nil, err
	}
	if ownTx != nil {
		if err := ownTx.Commit(ctx); err != nil {
			return nil, err
		}
	}
	return row, nil
}

// aliveLeasesSQL selects, among $1, running jobs whose lease is alive ($2
// LeaseTTL, $3 and $4 restartWatch.args). After a Postgres restart every lease lasts
// at least LeaseTTL past the restart, as for the lease reaper: workers could
// not renew while the server was down.
func aliveLeasesSQL(schema string, lock bool) string {
	sql := `
SELECT id FROM ` + tableName(schema, "river_job") + `
WHERE id = ANY($1::bigint[])
    AND state = 'running'
    AND lease_expires_at IS NOT NULL
    AND greatest(lease_expires_at, ` + restartGraceSQL("$2", "$3", "$4") + `) >= now()`
	if lock {
		sql += "\nORDER BY id FOR UPDATE"
	}
	return "SELECT coalesce(array_agg(id), '{}') FROM (" + sql + ") alive"
}

// JobGetStuck is River's rescuer query, minus jobs whose lease is alive. It
// reads further pages to fill the batch, because River's rescuer takes a
// short batch to mean there is nothing left.
func (p *pilot) JobGetStuck(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobGetStuckParams) ([]*rivertype.JobRow, error) {
	p.noteSchema(params.Schema)
	fenced, err := p.isFenced(ctx, exec, params.Schema)
	if err != nil {
		return nil, err
	}
	if !fenced {
		return exec.JobGetStuck(ctx, params)
	}
	var (
		out        []*rivertype.JobRow
		pageArg    = *params
		from, seen = p.reaper.restart.args()
	)
	for {
		jobs, err := exec.JobGetStuck(ctx, &pageArg)
		if err != nil {
			return nil, err
		}
		if len(jobs) == 0 {
			break
		}
		ids := make([]int64, len(jobs))
		for i, job := range jobs {
			ids[i] = job.ID
		}
		var alive []int64
		if err := exec.QueryRow(ctx, aliveLeasesSQL(params.Schema, false), ids, p.driver.config.LeaseTTL, from, seen).Scan(&alive); err != nil {
			return nil, fmt.Errorf("checking leases of stuck jobs: %w", err)
		}
		for _, job := range jobs {
			if !slices.Contains(alive, job.ID) {
				out = append(out, job)
			}
		}
		if len(jobs) < pageArg.Max || len(out) >= params.Max {
			break
		}
		pageArg.AfterID = jobs[len(jobs)-1].ID
	}
	if len(out) > params.Max {
		out = out[:params.Max]
	}
	return out, nil
}

// JobRescueMany is River's rescue write, minus jobs whose lease is alive
// (checked under a row lock in the same transaction, so a concurrent
// heartbeat wins).
func (p *pilot) JobRescueMany(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobRescueManyParams) (*struct{}, error) {
	p.noteSchema(params.Schema)
	fenced, err := p.isFenced(ctx, exec, params.Schema)
	if err != nil {
		return nil, err
	}
	if !fenced || len(params.ID) == 0 {
		return exec.JobRescueMany(ctx, params)
	}
	tx, err := exec.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var alive []int64
	from, seen := p.reaper.restart.args()
	if err := tx.QueryRow(ctx, aliveLeasesSQL(params.Schema, true), params.ID, p.driver.config.LeaseTTL, from, seen).Scan(&alive); err != nil {
		return nil, fmt.Errorf("checking leases of jobs to rescue: %w", err)
	}
	filtered := &riverdriver.JobRescueManyParams{Schema: params.Schema, StuckHorizon: params.StuckHorizon}
	for i, id := range params.ID {
		if slices.Contains(alive, id) {
			continue
		}
		filtered.ID = append(filtered.ID, id)
		filtered.Error = append(filtered.Error, params.Error[i])
		filtered.FinalizedAt = append(filtered.FinalizedAt, params.FinalizedAt[i])
		filtered.ScheduledAt = append(filtered.ScheduledAt, params.ScheduledAt[i])
		filtered.State = append(filtered.State, params.State[i])
	}
	if len(filtered.ID) > 0 {
		if _, err := tx.JobRescueMany(ctx, filtered); err != nil {
			return nil, err
		}
	}
	var finalized []int64
	for i, id := range filtered.ID {
		if isFinalState(rivertype.JobState(filtered.State[i])) {
			finalized = append(finalized, id)
		}
	}
	if err := p.driver.onFinalized(ctx, p.driver.UnwrapTx(tx), params.Schema, finalized, "rescued jobs"); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return &struct{}{}, nil
}

// ProducerInit notes the producer's schema (for the reaper) and delegates.
func (p *pilot) ProducerInit(ctx context.Context, exec riverdriver.Executor, params *riverpilot.ProducerInitParams) (int64, riverpilot.ProducerState, error) {
	p.noteSchema(params.Schema)
	return p.StandardPilot.ProducerInit(ctx, exec, params)
}

// JobInsertMany notes the schema (for the reaper) and delegates.
func (p *pilot) JobInsertMany(ctx context.Context, execTx riverdriver.ExecutorTx, params *riverdriver.JobInsertFastManyParams) ([]*riverdriver.JobInsertFastResult, error) {
	p.noteSchema(params.Schema)
	return p.StandardPilot.JobInsertMany(ctx, execTx, params)
}

// isFinalState reports whether a job in state has ended for good.
func isFinalState(state rivertype.JobState) bool {
	switch state {
	case rivertype.JobStateCompleted, rivertype.JobStateDiscarded, rivertype.JobStateCancelled:
		return true
	}
	return false
}
