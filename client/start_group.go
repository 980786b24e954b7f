package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/group"
	"github.com/weirhq/weir/internal/handoff"
	"github.com/weirhq/weir/internal/lazytx"
	"github.com/weirhq/weir/internal/limit"
	"github.com/weirhq/weir/internal/task"
)

// Starts that many callers make at once (Start with EagerStart) are grouped
// into one transaction, as a worker groups the outcomes of its activities:
// a start pays Postgres's costs per statement and per commit in full, and
// in a burst each start was a transaction of its own with about ten
// statements. A group of starts locks its workflow IDs, looks up and
// inserts its runs in one statement over arrays (startRunManySQL), has the
// worker run every run's first task (handoff.GroupTaker), and sends their
// last writes, merged, with one COMMIT. Each start then returns what it
// would have returned alone.
//
// A start goes alone, as ever, when no group is needed (fewer groups than
// the limit are in flight and none waits), and whenever its
// group cannot decide it: its workflow ID's lock is taken (the group takes
// locks without waiting, so it never deadlocks with a transaction that
// holds one), or the group failed (it rolled back; each of its starts then
// runs alone, where only a faulty one fails). A start that the group found
// refused or replayed returns that at once: it wrote nothing.
//
// A start waits in the queue for as long as its ctx allows; once a group
// took it, it waits for the group, not for its ctx: the group's COMMIT
// decides whether its run exists, and it runs under the group's own
// deadline (startGroupTimeout). A group that may have committed (its
// connection failed after the COMMIT went) reports the error to each of its
// starts, as a start alone does, instead of running them again; one that
// rolled back runs each alone with the workflow and request IDs it used, so
// a retry is the same start. The worker declines, in a group, a first task
// that starts a child (the child's start lock is taken waiting): it goes
// through River.

const (
	// startGroupMembers bounds the starts in one group.
	startGroupMembers = 32

	// startGroupTimeout bounds a group's transaction.
	startGroupTimeout = time.Minute
)

// startGroupsFor is how many groups of starts (and starts alone) a client
// on pool may have in flight, each holding a connection: learned from each
// one's latency per start (internal/limit), starting at 2 and bounded by
// half the pool's connections; it grows only while the pool has room for
// another. Fewer, fuller groups cost Postgres less than
// more, smaller ones (a group's statements are one per table over arrays,
// whatever its size), which the limit sees as latency and backs off from.
func startGroupsFor(pool *pgxpool.Pool) *limit.Limiter {
	most := max(1, int(pool.Config().MaxConns)/2)
	return limit.New(limit.Config{Initial: min(2, most), Max: most})
}

// newStartGroups returns the group committer of a client's eager starts.
func newStartGroups(c *Client) *group.Committer[string, *startRequest] {
	return group.New(group.Config[string, *startRequest]{
		Limit: startGroupsFor(c.pool), Size: startGroupMembers,
		Key:     func(r *startRequest) string { return r.lockKey },
		Joins:   func(first, r *startRequest) bool { return r.taker == first.taker },
		Commit:  c.commitStarts,
		Alone:   c.startAloneAfterGroup,
		HasRoom: func() bool { return limit.PoolHasRoom(c.pool) },
	})
}

// startRequest is a start that a group may take, and, once prepared, with
// everything the start writes ready.
type startRequest struct {
	ctx     context.Context
	args    WorkflowArgs
	opts    *StartOpts
	info    *StartInfo
	lockKey string
	taker   handoff.GroupTaker

	payload      []byte
	hash         []byte
	traceContext []byte
	runID        uuid.UUID
	taskArgs     task.Args

	// The start's verdict: its run or error, or that it runs alone.
	alone bool
	run   *Run
	err   error
}

// groupableStart returns Start's request for a group, or nil when the start
// must go alone: not eager, with interceptors (they wrap each start), with
// a deadline (its River job), with invalid input (alone reports it), or
// with no worker of this process that takes groups of first tasks. The
// start's info, when it drew it, comes back either way, so that a start
// alone does not draw it again.
func (c *Client) groupableStart(ctx context.Context, args WorkflowArgs, opts *StartOpts) (*startRequest, *StartInfo) {
	if !c.commitsWithFirstTask(opts) {
		return nil, nil
	}
	info, err := c.startInfo(args, opts)
	if err != nil {
		return nil, nil
	}
	taker, ok := c.eagerTaker(info).(handoff.GroupTaker)
	if !ok {
		return nil, info
	}
	return &startRequest{
		ctx: ctx, args: args, opts: opts, info: info, lockKey: dbschema.StartLockID(info.Namespace, info.WorkflowID), taker: taker,
	}, info
}

// prepare encodes what the start writes, for a group: only a start that
// a group takes pays for it here (one alone encodes its own).
func (r *startRequest) prepare(c *Client) error {
	var err error
	if r.payload, r.hash, r.traceContext, err = c.encodeStart(r.args, r.info, r.opts); err != nil {
		return err
	}
	r.runID = uuid.New()
	r.taskArgs = task.NewArgs(r.info.Namespace, r.info.Kind, r.runID, r.info.WorkflowID)
	return nil
}

// startAloneAfterGroup runs a start that its group left undecided alone,
// with the same workflow and request IDs as the group used (a random
// default is drawn once).
func (c *Client) startAloneAfterGroup(_ context.Context, r *startRequest) {
	opts := *r.opts
	opts.WorkflowID, opts.RequestID = r.info.WorkflowID, r.info.RequestID
	r.run, r.err = c.startAlone(r.ctx, r.args, &opts, r.info)
}

// commitStarts runs a group of starts (one alone, in its slot), gives each
// member its verdict, and returns how many starts it decided; a member
// whose start could not be prepared runs alone, which reports why.
func (c *Client) commitStarts(members []*startRequest) (decided int, alone []bool) {
	alone = make([]bool, len(members))
	if len(members) == 1 {
		r := members[0]
		if r.run, r.err = c.startAlone(r.ctx, r.args, r.opts, r.info); r.err == nil {
			decided = 1
		}
		return decided, alone
	}
	var prepared []*startRequest
	for i, r := range members {
		if r.alone = r.prepare(c) != nil; r.alone {
			alone[i] = true
		} else {
			prepared = append(prepared, r)
		}
	}
	decided = c.runStartGroup(prepared)
	for i, r := range members {
		alone[i] = r.alone
	}
	return decided, alone
}

// runStartGroup runs one group of prepared starts in a transaction, gives
// each its verdict, and returns how many starts it decided (not left to run
// alone).
func (c *Client) runStartGroup(members []*startRequest) (decided int) {
	if len(members) < 2 {
		for _, m := range members {
			m.alone = true
		}
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), startGroupTimeout)
	defer cancel()
	var (
		dones   []func(committed bool)
		sending bool // the batch with the COMMIT went out
	)
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil { // lazytx rolled back; the members run alone
				err = fmt.Errorf("weir: a group of starts panicked: %v", r)
			}
		}()
		return lazytx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			var err error
			dones, sending, err = c.startGroupTx(ctx, tx, members)
			return err
		})
	}()
	var pgErr *pgconn.PgError
	committed := err == nil || errors.Is(err, lazytx.ErrCommittedDespiteCallback)
	for _, done := range dones {
		done(committed)
	}
	for _, m := range members {
		switch {
		case committed:
		case sending && !errors.As(err, &pgErr):
			// The COMMIT may have run (the connection went, say): as a start
			// alone, each start reports the error rather than start again.
			m.alone, m.run, m.err = false, nil, fmt.Errorf("weir: starting workflow %s in a group of %d: %w", m.info.WorkflowID, len(members), err)
		default: // rolled back: each runs alone
			m.alone = true
		}
		if !m.alone {
			decided++
		}
	}
	return decided
}

// errNoLock leaves a start whose workflow ID's lock a group could not take
// to run alone.
var errNoLock = errors.New("the workflow ID's start lock is taken")

// startGroupTx is a group's transaction: it gives its members their
// verdicts, and returns what to tell the worker once the transaction ended,
// and whether it sent its last batch (with the COMMIT).
func (c *Client) startGroupTx(ctx context.Context, tx pgx.Tx, members []*startRequest) (dones []func(bool), sending bool, err error) {
	// W1: each workflow ID's start lock, taken without waiting, so that a
	// group never waits with locks held (and never deadlocks): a start whose
	// lock is taken runs alone, after the group.
	keys := make([]string, len(members))
	for i, m := range members {
		keys[i] = m.lockKey
	}
	// Its statements over arrays are planned once per connection, not on
	// every call, and without sequential scans, so that a plan made while
	// the tables are young still takes rows by key once they filled (as a
	// group of outcomes asks: dbschema.GenericPlansSQL;
	// TestStartRunManyTakesRunsByKey checks the generic plan).
	var locked []bool
	batch := &pgx.Batch{}
	batch.Queue(dbschema.GenericPlansSQL)
	batch.Queue("SELECT coalesce(array_agg(pg_try_advisory_xact_lock("+dbschema.StartLockSQL("$2", "k")+") ORDER BY i), '{}')"+
		" FROM unnest($1::text[]) WITH ORDINALITY AS u(k, i)", keys, c.names.Schema).QueryRow(func(row pgx.Row) error { return row.Scan(&locked) })
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, false, fmt.Errorf("locking %d workflow IDs: %w", len(keys), err)
	}
	if len(locked) != len(members) {
		return nil, false, fmt.Errorf("locking %d workflow IDs: %d answers", len(members), len(locked))
	}
	var in []int // members to look up and insert
	for i := range members {
		if locked[i] {
			in = append(in, i)
		} else {
			members[i].alone, members[i].err = true, errNoLock
		}
	}
	if len(in) == 0 {
		return nil, false, nil
	}

	// The lookups and inserts, one statement for all, taking its snapshot
	// after every lock was granted.
	var (
		runIDs, queues, kinds, namespaces, workflowIDs, requestIDs, traces []string
		payloads, hashes                                                   [][]byte
		rejectAny, rejectCompleted                                         []bool
	)
	for _, i := range in {
		m := members[i]
		runIDs = append(runIDs, m.runID.String())
		namespaces = append(namespaces, m.info.Namespace)
		workflowIDs = append(workflowIDs, m.info.WorkflowID)
		kinds = append(kinds, m.info.Kind)
		queues = append(queues, m.info.Queue)
		payloads = append(payloads, m.payload)
		requestIDs = append(requestIDs, m.info.RequestID)
		hashes = append(hashes, m.hash)
		traces = append(traces, string(m.traceContext))
		rejectAny = append(rejectAny, m.opts.IDReusePolicy == IDReuseRejectDuplicate)
		rejectCompleted = append(rejectCompleted, m.opts.IDReusePolicy == IDReuseAllowDuplicateFailedOnly)
	}
	found := make([][4]*foundRun, len(in))
	inserted := make([]*handoff.Run, len(in))
	rows, err := tx.Query(ctx, c.startRunManySQL,
		runIDs, namespaces, workflowIDs, kinds, queues, payloads, requestIDs, hashes, traces, rejectAny, rejectCompleted)
	if err != nil {
		return nil, false, fmt.Errorf("starting %d workflows: %w", len(in), err)
	}
	for rows.Next() {
		var (
			k, which  int
			f         foundRun
			createdAt *time.Time
		)
		if err := rows.Scan(&k, &which, &f.runID, &f.generation, &f.hash, &f.state, &createdAt); err != nil {
			rows.Close()
			return nil, false, fmt.Errorf("starting %d workflows: %w", len(in), err)
		}
		if k < 1 || k > len(in) || which < 0 || which > 3 {
			rows.Close()
			return nil, false, fmt.Errorf("starting %d workflows: row %d of kind %d", len(in), k, which)
		}
		if which > 0 {
			found[k-1][which] = &f
			continue
		}
		m := members[in[k-1]]
		inserted[k-1] = &handoff.Run{
			Args: m.payload, Generation: f.generation, ID: m.runID, Kind: m.info.Kind, Namespace: m.info.Namespace, Now: *createdAt,
			Queue: m.info.Queue, TraceContext: m.traceContext, WorkflowID: m.info.WorkflowID, LastInTx: true,
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("starting %d workflows: %w", len(in), err)
	}

	var runs []*handoff.Run
	var started []int // members whose run was inserted, as runs
	for k, i := range in {
		m := members[i]
		replayed, refused := c.startRefusal(found[k], m.hash, m.info, m.args, m.opts.IDReusePolicy)
		switch {
		case (replayed != nil || refused != nil) && inserted[k] != nil: // the SQL's conditions and these differ: fail closed
			return nil, false, fmt.Errorf("weir: start of workflow %s inserted its run although it is refused or replays a start", m.info.WorkflowID)
		case refused != nil:
			m.err = refused
		case replayed != nil:
			m.run = replayed
		case inserted[k] == nil:
			// Only a writer bypassing the advisory lock gets here: the start
			// runs alone, which reads the run in its way (answerCollision).
			m.alone = true
		default:
			runs = append(runs, inserted[k])
			started = append(started, i)
			m.run = &Run{Created: true, Generation: inserted[k].Generation, Namespace: m.info.Namespace,
				RunID: m.runID, WorkflowID: m.info.WorkflowID, client: c}
		}
	}
	if len(runs) == 0 {
		return nil, false, nil
	}

	// The first tasks, their last writes merged; those that failed before
	// writing go through River, as a start alone queues them.
	tasks, err := members[started[0]].taker.RunFirstTasks(ctx, tx, runs)
	if err != nil {
		return nil, false, err
	}
	for _, done := range tasks.Done {
		if done != nil {
			dones = append(dones, done)
		}
	}
	for k, i := range started {
		if taskErr := tasks.Errs[k]; taskErr != nil {
			m := members[i]
			if err := c.queueFailedFirstTask(ctx, tx, m.taskArgs, m.info.Queue, taskErr); err != nil {
				return dones, false, fmt.Errorf("queueing the first task of workflow %s through River (%w): %w", m.info.WorkflowID, taskErr, err)
			}
		}
	}
	lazytx.QueueCommit(tx, tasks.Last)
	err = tx.SendBatch(ctx, tasks.Last).Close()
	if err == nil || errors.Is(err, lazytx.ErrCommittedDespiteCallback) {
		tasks.Sent() // committed: what the batch read is recorded
	}
	return dones, true, err
}

// startRunManySQL is startRunSQL for a group of starts, over arrays of
// their runs ($1), namespaces, workflow IDs, kinds, queues, args, request
// IDs, request hashes, trace contexts ($2–$9) and reuse policies ($10 any
// last run refuses, $11 a completed one does), in that order; starts of a
// group have no deadlines and insert no task job. Each row names its start
// by position (1, 2, …), then as startRunSQL's: 0 for the inserted run
// (with its creation time), 1–3 for what was found.
//
// Each start looks its runs up by key on its own (LATERAL, LIMIT 1: W2 and
// W1 allow one run per request ID and one live run per workflow ID), so
// that no plan joins the group against every run or every live run: a
// generic plan made while few runs were live hash-joined each group against
// all of weir_run_live_idx, reading every live run of a burst for each group.
func startRunManySQL(names *dbschema.Names) string {
	return "WITH v AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[]," +
		"  $8::bytea[], $9::text[], $10::boolean[], $11::boolean[]) WITH ORDINALITY" +
		"  AS v(run_id, namespace, workflow_id, kind, queue, args, request_id, request_hash, trace_context, reject_any, reject_completed, k))," +
		" found AS (" +
		"  SELECT v.k, 1 AS which, l.run_id, l.generation, l.request_hash, l.state FROM v CROSS JOIN LATERAL" +
		"   (SELECT run_id, generation, request_hash, state FROM " + names.Run + " r WHERE r.namespace = v.namespace" +
		"    AND r.workflow_id = v.workflow_id AND r.request_id = v.request_id LIMIT 1) l" +
		"  UNION ALL SELECT v.k, 2, l.run_id, l.generation, NULL, l.state FROM v CROSS JOIN LATERAL" +
		"   (SELECT run_id, generation, state FROM " + names.Run + " r WHERE r.namespace = v.namespace AND r.workflow_id = v.workflow_id" +
		"    AND r.state = 'running' LIMIT 1) l" +
		"  UNION ALL SELECT v.k, 3, l.run_id, l.generation, NULL, l.state FROM v CROSS JOIN LATERAL" +
		"   (SELECT run_id, generation, state FROM " + names.Run + " r WHERE r.namespace = v.namespace AND r.workflow_id = v.workflow_id" +
		"    ORDER BY generation DESC LIMIT 1) l)," +
		" ok AS (SELECT * FROM v WHERE NOT EXISTS (SELECT 1 FROM found f" +
		"  WHERE f.k = v.k AND (f.which < 3 OR v.reject_any OR (v.reject_completed AND f.state = 'completed'))))," +
		" g AS (INSERT INTO " + names.Workflow + " AS w (namespace, workflow_id, last_generation)" +
		"  SELECT namespace, workflow_id, 1 FROM ok" +
		"  ON CONFLICT (namespace, workflow_id) DO UPDATE SET last_generation = w.last_generation + 1" +
		"  RETURNING namespace, workflow_id, last_generation)," +
		" inserted AS (INSERT INTO " + names.Run +
		"  (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash, trace_context)" +
		"  SELECT ok.run_id, ok.namespace, ok.workflow_id, g.last_generation, ok.kind, ok.queue, ok.args, ok.request_id," +
		"   ok.request_hash, ok.trace_context::jsonb" +
		"  FROM ok JOIN g ON g.namespace = ok.namespace AND g.workflow_id = ok.workflow_id" +
		"  RETURNING run_id, generation, created_at)" +
		" SELECT f.k, f.which, f.run_id, f.generation, f.request_hash, f.state, NULL::timestamptz FROM found f" +
		" UNION ALL SELECT ok.k, 0, i.run_id, i.generation, NULL, 'running', i.created_at FROM inserted i JOIN ok ON ok.run_id = i.run_id"
}
