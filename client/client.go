package client

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/eventstore"
	"github.com/weirhq/weir/internal/handoff"
	"github.com/weirhq/weir/internal/lazytx"
	"github.com/weirhq/weir/internal/runstate"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/task"
)

const (
	// NamespaceDefault is the namespace of runs started without one.
	NamespaceDefault = "default"

	// PollIntervalDefault is how often Get re-reads a run's state when no
	// notification arrives (notifications make it return at once; polling
	// covers a lost listener connection).
	PollIntervalDefault = 2 * time.Second

	// QueueDefault is weir's default River queue ("weir", not River's
	// "default"): of workflow tasks started without a queue, and what a
	// worker serves unless configured; an application's River client on
	// River's default queue never fetches weir's jobs.
	QueueDefault = task.QueueDefault

	// MaxPayloadBytesDefault is the default cap on an encoded payload.
	MaxPayloadBytesDefault = 2 << 20
)

// WorkflowArgs are a workflow's arguments. Kind names the workflow type; it is
// persisted, so renaming it is a data migration. Like River's JobArgs.
type WorkflowArgs interface {
	Kind() string
}

// Config configures a Client. The zero value works.
//
// No setting bounds how many eager starts (StartOpts.EagerStart) commit at
// once: the client groups them, and how many groups it keeps in flight
// follows their latency, from 2 up to half the pool's MaxConns while
// latency holds, down to 1 while it rises. Size the pool instead.
type Config struct {
	// Codec encodes args and results. Workers must use a matching codec.
	// Defaults to JSONCodec.
	Codec Codec

	// Interceptors wrap the client's calls, the first outermost. Defaults to
	// none.
	Interceptors []Interceptor

	// MaxPayloadBytes caps the encoded size of workflow args; larger ones are
	// a *PayloadError matching ErrPayloadTooLarge. Defaults to
	// MaxPayloadBytesDefault.
	MaxPayloadBytes int

	// Logger receives the client's warnings. Defaults to discarding.
	Logger *slog.Logger

	// Namespace is used when StartOpts gives none. Defaults to
	// NamespaceDefault.
	Namespace string

	// PollInterval is how often Get re-reads a run's state without a
	// notification. Defaults to PollIntervalDefault.
	PollInterval time.Duration

	// Schema is the Postgres schema of River's and weir's tables; it must
	// match the workers'. Defaults to empty: the search_path's first.
	Schema string
}

func (c *Config) withDefaults() *Config {
	out := *c
	if out.Codec == nil {
		out.Codec = JSONCodec{}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	out.Namespace = cmp.Or(out.Namespace, NamespaceDefault)
	out.PollInterval = cmp.Or(out.PollInterval, PollIntervalDefault)
	out.MaxPayloadBytes = cmp.Or(out.MaxPayloadBytes, MaxPayloadBytesDefault)
	return &out
}

func (c *Config) validate() error {
	if c.PollInterval < 0 || c.MaxPayloadBytes < 0 {
		return errors.New("client config: PollInterval and MaxPayloadBytes must not be negative")
	}
	if err := ValidateNamespace(c.Namespace); err != nil {
		return err
	}
	return nil
}

// Client starts workflow runs and awaits their results. It is safe for
// concurrent use. It owns no goroutines until the first Get, which starts the
// single listener connection all of its waiters share; Close releases it.
type Client struct {
	config *Config
	names  *dbschema.Names
	events *eventstore.Store // weir_event, folded or not
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	store  *store.Store

	startRunSQL        string       // startRunSQL(names)
	startAheadGuardSQL string       // startAheadGuardSQL(names)
	startRunManySQL    string       // startRunManySQL(names)
	starts             *startGroups // concurrent eager starts, grouped
	knownIDs           knownIDs     // workflow IDs seen taken (startAhead)

	listenerOnce sync.Once
	listener     *listener
}

// New returns a Client over pool. A nil config means defaults.
func New(pool *pgxpool.Pool, config *Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("client: pool is required")
	}
	if config == nil {
		config = &Config{}
	}
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	// An insert-only River client: it enqueues workflow tasks and runs no
	// goroutines of its own. Its FetchCooldown only paces its insert
	// notifications (one per queue per cooldown): at River's 100 ms, a start
	// that follows another within 100 ms would wake no worker and wait for
	// the next notification or poll; at the minimum every start wakes them.
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown: river.FetchCooldownMin, Logger: config.Logger, Schema: config.Schema,
	})
	if err != nil {
		return nil, fmt.Errorf("creating River client: %w", err)
	}
	names := dbschema.New(config.Schema)
	c := &Client{
		config: config, events: eventstore.New(names), names: names, pool: pool, river: riverClient,
		startRunSQL: startRunSQL(names), startRunManySQL: startRunManySQL(names), startAheadGuardSQL: startAheadGuardSQL(names),
	}
	c.store = store.New(names)
	c.starts = &startGroups{c: c, limit: startGroupsFor(pool)}
	return c, nil
}

// Close stops the client's listener, if Get started one. Waiting Gets
// return ctx-independent errors after Close. Close is idempotent.
func (c *Client) Close() error {
	c.listenerOnce.Do(func() {}) // no listener may start after Close
	if c.listener != nil {
		c.listener.close()
	}
	return nil
}

// IDReusePolicy says whether a workflow ID whose last run has closed may
// start again.
type IDReusePolicy int

const (
	// IDReuseAllowDuplicate allows a new run once the last one closed,
	// however it ended. The default.
	IDReuseAllowDuplicate IDReusePolicy = iota

	// IDReuseAllowDuplicateFailedOnly allows a new run only if the last one
	// did not complete (it failed, was cancelled or terminated, or timed out).
	IDReuseAllowDuplicateFailedOnly

	// IDReuseRejectDuplicate never starts a workflow ID twice.
	IDReuseRejectDuplicate
)

func (p IDReusePolicy) String() string {
	switch p {
	case IDReuseAllowDuplicate:
		return "AllowDuplicate"
	case IDReuseAllowDuplicateFailedOnly:
		return "AllowDuplicateFailedOnly"
	case IDReuseRejectDuplicate:
		return "RejectDuplicate"
	}
	return fmt.Sprintf("IDReusePolicy(%d)", int(p))
}

// StartOpts are options of Start. A nil *StartOpts means defaults.
type StartOpts struct {
	// EagerStart asks Start (not StartTx) to hand the run's first workflow
	// task to a worker of this process that shares the client's pool and
	// serves the workflow in the run's queue (eager workflow start, as
	// Temporal's EnableEagerStart). That worker runs the task inside the
	// start's transaction, right after the run's row is inserted: the run's
	// first events, and the activities they schedule (claimed by the
	// worker, started once the start commits), commit with the run, with no
	// task job, fetch or second transaction. Start then also runs the first
	// task's workflow code, for at most the worker's DeadlockTimeout; a task
	// that fails or runs out of that time is rolled back and queued through
	// River, which retries it (the start itself succeeds). Without such a
	// worker, or with too little time left on ctx, Start queues the task as
	// usual.
	//
	// Many eager starts made at once (no RunTimeout, ExecutionTimeout or
	// client interceptors) share transactions of up to 32 starts, with their
	// first tasks' writes merged: each still returns what it would alone. A
	// start in such a group waits for the group's commit, not for ctx. One
	// made alone is one round trip once the worker knows the database's
	// time: the worker runs the first task before anything is sent, dated
	// by its estimate of that time (the run's creation time), and the run's
	// insert, the task's writes and the COMMIT go in one batch. A start
	// that finds the workflow ID taken (a replay, a refusal, a later
	// generation) then costs a rolled-back batch more, and one whose first
	// task must write first (a timer, a child, an activity this worker
	// does not run) runs the task twice; the client and worker remember
	// such IDs and workflow kinds and start them as before, in two round
	// trips.
	// Defaults to false.
	EagerStart bool

	// ExecutionTimeout bounds the workflow across all its runs (a
	// continued-as-new chain); past it the run ends timed_out. Defaults to
	// none.
	ExecutionTimeout time.Duration

	// IDReusePolicy says whether the workflow ID may start again after its
	// last run closed. Defaults to IDReuseAllowDuplicate.
	IDReusePolicy IDReusePolicy

	// Namespace isolates workflow IDs. Defaults to the client's Namespace.
	Namespace string

	// Queue is the River queue of the run's workflow tasks; workers serving
	// the queue run it. Defaults to QueueDefault.
	Queue string

	// RunTimeout bounds this run; past it the run ends timed_out and Get
	// returns a *WorkflowFailedError matching ErrWorkflowTimedOut. Defaults
	// to none.
	RunTimeout time.Duration

	// RequestID makes the start idempotent: starting again with the same
	// request ID and the same request returns the run the first start
	// created (Created false), whatever state it is in now; the same
	// request ID with a different request is a *RequestConflictError. The
	// request is the workflow kind, the args as canonical JSON (the order
	// of object keys and whitespace do not matter), Queue, RunTimeout,
	// ExecutionTimeout and IDReusePolicy. Namespace and WorkflowID scope the
	// request ID; EagerStart and interceptors' headers are not part of it.
	// Defaults to a random ID (every start is new).
	RequestID string

	// WorkflowID is the run's stable identity, chosen by the caller (an
	// order ID, say). At most one run per workflow ID is live at a time.
	// Defaults to a random UUID.
	WorkflowID string
}

// Run identifies a workflow run. Its identity never changes, however many
// times its tasks and activities are retried or recovered.
type Run struct {
	// Created is true when this call created the run, false when it
	// returned the run an earlier start with the same request ID created.
	Created bool

	// Generation counts the runs of this workflow ID: 1, 2, … Monotonic even
	// after old runs are deleted.
	Generation int64

	// Namespace is the run's namespace.
	Namespace string

	// RunID is the run's unique ID.
	RunID uuid.UUID

	// WorkflowID is the run's workflow ID.
	WorkflowID string

	client *Client
}

// Start is StartTx in a transaction of its own, whose BEGIN goes with its
// first statements. With StartOpts.EagerStart, a worker of this process may
// run the run's first workflow task inside that transaction (see
// StartOpts.EagerStart). A start with a request ID that was used before
// replays that start if it asked for the same run (the workflow kind, the
// args as canonical JSON, Queue, RunTimeout, ExecutionTimeout and
// IDReusePolicy: see StartOpts.RequestID) and is a *RequestConflictError
// otherwise.
func (c *Client) Start(ctx context.Context, args WorkflowArgs, opts *StartOpts) (run *Run, err error) {
	if req, info := c.groupableStart(args, opts); req != nil {
		run, err = c.starts.start(ctx, req)
	} else {
		run, err = c.startAlone(ctx, args, opts, info)
	}
	var (
		started *WorkflowAlreadyStartedError
		reuse   *WorkflowIDReuseError
		request *RequestConflictError
	)
	if opts != nil && opts.EagerStart && opts.WorkflowID != "" &&
		(err == nil || errors.As(err, &started) || errors.As(err, &reuse) || errors.As(err, &request)) {
		// Taken: its next start goes in two round trips (startAhead).
		c.knownIDs.add(knownIDKey(cmp.Or(opts.Namespace, c.config.Namespace), opts.WorkflowID))
	}
	return run, err
}

// startAlone is Start in a transaction of its own; info, if not nil, is
// the start's, checked already (startInfo).
func (c *Client) startAlone(ctx context.Context, args WorkflowArgs, opts *StartOpts, info *StartInfo) (run *Run, err error) {
	run, ok, fallback, err := c.startAhead(ctx, args, opts, info)
	if ok {
		return run, err
	}
	var handed []func(committed bool)
	// Whatever happens (a panicking interceptor included), the worker that
	// ran the first task learns whether it committed.
	defer func() {
		for _, done := range handed {
			done(err == nil)
		}
	}()
	err = lazytx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) (err error) {
		run, err = c.startTx(ctx, tx, args, opts, &handed, fallback)
		return err
	})
	if replayed, ok := errors.AsType[*startReplayedError](err); ok {
		return replayed.run, nil
	}
	if err != nil {
		return nil, err
	}
	return run, nil
}

var (
	nameRE      = regexp.MustCompile(`\A[\w][\w\-\[\]<>\/.·:+]*\z`)
	namespaceRE = regexp.MustCompile(`\A[A-Za-z0-9][A-Za-z0-9_.\-]*\z`)
)

// ValidateNamespace reports whether name can be a namespace: 1–128 letters,
// digits, '_', '.' and '-', starting with a letter or digit.
func ValidateNamespace(name string) error {
	if len(name) == 0 || len(name) > 128 || !namespaceRE.MatchString(name) {
		return fmt.Errorf("weir: invalid namespace %q: 1–128 letters, digits, '_', '.' and '-', starting with a letter or digit", name)
	}
	return nil
}

func validateName(what, name string) error {
	if len(name) == 0 || len(name) > 128 || !nameRE.MatchString(name) {
		return fmt.Errorf("weir: invalid %s %q: 1–128 characters of letters, digits and _-[]<>/.·:+, starting with a letter, digit or _", what, name)
	}
	return nil
}

// StartTx creates a run on tx. Workers can't see it until tx commits and a
// rollback removes it, so a run is created atomically with the caller's own
// rows. Concurrent starts of one workflow ID are serialized by a
// transaction-scoped advisory lock, and a partial unique index allows one live
// run per workflow ID whatever else writes the table. The lock is keyed on
// the resolved schema: clients that reach one schema through Config.Schema
// or through the search_path take the same lock. A start that still meets
// the index (a writer that took no lock, an older build say) reads what
// committed: Start answers as a replay or with a refusal naming the run in
// the way; StartTx, whose transaction the collision aborted, answers the
// replay of its own request with an error that matches
// *WorkflowAlreadyStartedError and names the run.
func (c *Client) StartTx(ctx context.Context, tx pgx.Tx, args WorkflowArgs, opts *StartOpts) (*Run, error) {
	return c.startTx(ctx, tx, args, opts, nil, nil)
}

// startTx is StartTx; with handed set, it may hand the run's first task to a
// worker in this process (Start), and appends to handed what to tell the
// worker once tx ended. With fallback set, the start could have gone in one
// round trip (startAhead): it keeps the info drawn there (IDs included),
// the encoding of what it writes when that was done, and the failure of a
// first task that ran ahead.
func (c *Client) startTx(ctx context.Context, tx pgx.Tx, args WorkflowArgs, opts *StartOpts, handed *[]func(committed bool), fallback *aheadFallback) (*Run, error) {
	if opts == nil {
		opts = &StartOpts{}
	}
	var info *StartInfo
	if fallback != nil {
		info = fallback.info
	} else {
		var err error
		if info, err = c.startInfo(args, opts); err != nil {
			return nil, err
		}
	}
	return c.interceptStart(ctx, info, func(ctx context.Context) (*Run, error) {
		return c.insertRun(ctx, tx, args, info, opts, handed, fallback)
	})
}

// startInfo checks a start's args and options and names what it starts.
func (c *Client) startInfo(args WorkflowArgs, opts *StartOpts) (*StartInfo, error) {
	if args == nil {
		return nil, errors.New("weir: Start needs workflow args")
	}
	kind := args.Kind()
	if err := validateName("workflow kind", kind); err != nil {
		return nil, err
	}
	namespace := cmp.Or(opts.Namespace, c.config.Namespace)
	if err := ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	queue := cmp.Or(opts.Queue, QueueDefault)
	workflowID := cmp.Or(opts.WorkflowID, uuid.NewString())
	if len(workflowID) > 1000 {
		return nil, fmt.Errorf("weir: workflow ID is %d bytes; at most 1000", len(workflowID))
	}
	requestID := cmp.Or(opts.RequestID, uuid.NewString())
	if len(requestID) > 255 {
		return nil, fmt.Errorf("weir: request ID is %d bytes; at most 255", len(requestID))
	}

	if opts.RunTimeout < 0 || opts.ExecutionTimeout < 0 {
		return nil, errors.New("weir: RunTimeout and ExecutionTimeout must not be negative")
	}
	return &StartInfo{Kind: kind, Namespace: namespace, Queue: queue, RequestID: requestID, WorkflowID: workflowID}, nil
}

// encodeStart encodes what a start writes: the args, the request's hash and
// the trace context (the interceptors' headers).
func (c *Client) encodeStart(args WorkflowArgs, info *StartInfo, opts *StartOpts) (payload, hash, traceContext []byte, err error) {
	if payload, err = c.config.Codec.Encode(args); err != nil {
		return nil, nil, nil, err
	}
	if len(payload) > c.config.MaxPayloadBytes {
		return nil, nil, nil, &PayloadError{Op: "checking size of", Err: fmt.Errorf("%w: args of workflow %s are %d bytes, the limit is %d",
			ErrPayloadTooLarge, info.WorkflowID, len(payload), c.config.MaxPayloadBytes)}
	}
	if hash, err = requestHash(info, opts, args); err != nil {
		return nil, nil, nil, err
	}
	traceContext = []byte("{}")
	if len(info.Headers) > 0 {
		if traceContext, err = json.Marshal(info.Headers); err != nil {
			return nil, nil, nil, fmt.Errorf("encoding headers of workflow %s: %w", info.WorkflowID, err)
		}
	}
	return payload, hash, traceContext, nil
}

// eagerTaker returns the worker of this process that takes the first task
// of the run info names (it shares the client's pool and serves the run's
// queue and workflow), or nil.
func (c *Client) eagerTaker(info *StartInfo) handoff.Taker {
	return handoff.Newest(handoff.Key{Pool: c.pool, Schema: c.names.Schema, Queue: info.Queue, Kind: task.Kind(info.Namespace, info.Kind)})
}

// commitsWithFirstTask reports whether a start with opts commits right
// after its first task's writes (EagerStart, and no interceptor code or
// deadline job after them): the starts a group of starts or a start in one
// round trip can take.
func (c *Client) commitsWithFirstTask(opts *StartOpts) bool {
	return opts != nil && opts.EagerStart && len(c.config.Interceptors) == 0 && opts.RunTimeout == 0 && opts.ExecutionTimeout == 0
}

// queueStartLock queues in batch the lock that serializes the starts of
// info's workflow ID until the transaction ends (W1).
func (c *Client) queueStartLock(batch *pgx.Batch, info *StartInfo) {
	batch.Queue("SELECT pg_advisory_xact_lock("+dbschema.StartLockSQL("$1", "$2")+")",
		c.names.Schema, dbschema.StartLockID(info.Namespace, info.WorkflowID))
}

// newRunInsert is the lookup and insert (startRunSQL) of run runID, as info
// and opts name it, with what encodeStart encoded.
func (c *Client) newRunInsert(runID uuid.UUID, info *StartInfo, opts *StartOpts, payload, hash, traceContext []byte) *runInsert {
	return &runInsert{
		args: []any{runID, info.Namespace, info.WorkflowID, info.Kind, info.Queue, payload, info.RequestID, hash,
			opts.RunTimeout.Microseconds(), opts.ExecutionTimeout.Microseconds(), traceContext},
		policy: opts.IDReusePolicy,
		sql:    c.startRunSQL,
	}
}

func (c *Client) insertRun(ctx context.Context, tx pgx.Tx, args WorkflowArgs, info *StartInfo, opts *StartOpts, handed *[]func(committed bool), fallback *aheadFallback) (*Run, error) {
	kind, namespace, queue, workflowID := info.Kind, info.Namespace, info.Queue, info.WorkflowID
	var (
		payload, hash, traceContext []byte
		err                         error
	)
	if fallback != nil && fallback.encoded {
		payload, hash, traceContext = fallback.payload, fallback.hash, fallback.traceContext
	} else if payload, hash, traceContext, err = c.encodeStart(args, info, opts); err != nil {
		return nil, err
	}

	// The first task is queued first, so the run's row is written once,
	// naming it, together with its generation; or, handed to a worker of
	// this process, it runs right after the row is inserted.
	runID := uuid.New()
	var failedAhead error // the first task's failure, ahead of this start
	if fallback != nil && fallback.failure != nil {
		runID, failedAhead = fallback.runID, fallback.failure
	}
	taskArgs := task.NewArgs(namespace, kind, runID, workflowID)
	var taker handoff.Taker
	if handed != nil && opts.EagerStart {
		taker = c.eagerTaker(info)
	}
	insert := c.newRunInsert(runID, info, opts, payload, hash, traceContext)

	// W1: serialize starts of this workflow ID until tx ends. The lookup
	// rides in the same round trip, after the lock: each statement of a
	// batch takes its own snapshot, so it sees every start that committed
	// before the lock was granted. A start handed to a worker inserts its
	// run in that statement too, unless the lookup finds a reason not to
	// (the same conditions as below, in SQL), and takes its savepoint: one
	// round trip to the first task.
	batch := &pgx.Batch{}
	c.queueStartLock(batch, info)
	insert.queue(batch, taker != nil)
	if taker != nil {
		batch.Queue("SAVEPOINT weir_first_task")
	}
	if err := sendStartBatch(ctx, tx, batch, namespace, workflowID); err != nil {
		return nil, c.answerCollision(ctx, err, args, info, opts, hash)
	}
	replayed, refused := c.startRefusal(insert.found, hash, info, args, opts.IDReusePolicy)
	switch {
	case (replayed != nil || refused != nil) && insert.inserted: // the SQL's conditions and these differ: fail closed
		return nil, fmt.Errorf("weir: start of workflow %s inserted its run although it is refused or replays a start: %w",
			workflowID, cmp.Or(refused, errors.New("replay")))
	case refused != nil:
		return nil, refused
	case replayed != nil:
		return replayed, nil
	}

	var taskJobID *int64
	if taker == nil {
		if taskJobID, err = c.queueFirstTask(ctx, tx, taskArgs, queue); err != nil {
			return nil, fmt.Errorf("queueing the first task of workflow %s: %w", workflowID, err)
		}
		insert.taskJobID = taskJobID
		batch = &pgx.Batch{}
		insert.queue(batch, true)
		if err := sendStartBatch(ctx, tx, batch, namespace, workflowID); err != nil {
			return nil, c.answerCollision(ctx, err, args, info, opts, hash)
		}
	}
	if !insert.inserted {
		// Only a writer bypassing the advisory lock gets here.
		return nil, c.answerCollision(ctx, fmt.Errorf("starting workflow %s: %w", workflowID, errStartCollided), args, info, opts, hash)
	}
	generation, createdAt := insert.generation, insert.createdAt
	runDeadline, executionDeadline := insert.runDeadline, insert.executionDeadline
	if taker != nil && failedAhead != nil && generation == 1 {
		// The task failed at this generation: it is not run again here.
		if err := c.requeueFirstTask(ctx, tx, taskArgs, queue, failedAhead); err != nil {
			return nil, fmt.Errorf("queueing the first task of workflow %s through River (%w): %w", workflowID, failedAhead, err)
		}
	} else if taker != nil {
		done, taskErr := taker.RunFirstTask(ctx, tx, &handoff.Run{
			Args: payload, Generation: generation, ID: runID, Kind: kind, Namespace: namespace, Now: createdAt, Queue: queue,
			TraceContext: traceContext, WorkflowID: workflowID,
			// Start commits right after this unless a deadline's job is
			// still to be inserted (below) or an interceptor's code runs
			// in the transaction after it (and may fail the start).
			LastInTx: opts.RunTimeout <= 0 && opts.ExecutionTimeout <= 0 && len(c.config.Interceptors) == 0,
		})
		if taskErr == nil {
			*handed = append(*handed, done)
		} else if err := c.requeueFirstTask(ctx, tx, taskArgs, queue, taskErr); err != nil {
			return nil, fmt.Errorf("queueing the first task of workflow %s through River (%w): %w", workflowID, taskErr, err)
		}
	}

	// A deadline is enforced by a River job due then.
	if opts.RunTimeout > 0 || opts.ExecutionTimeout > 0 {
		due := earliest(runDeadline, executionDeadline)
		if _, err := c.river.InsertTx(ctx, tx, runstate.TimeoutArgs{RunID: runID}, &river.InsertOpts{
			MaxAttempts: 25, Queue: queue, ScheduledAt: due,
		}); err != nil {
			return nil, fmt.Errorf("scheduling the timeout of workflow %s: %w", workflowID, err)
		}
	}

	return &Run{Created: true, Generation: generation, Namespace: namespace, RunID: runID, WorkflowID: workflowID, client: c}, nil
}

// startRunSQL looks up the runs a start must know of (by request ID, the
// live one, the last one) and, when $13 is true and none of them refuses
// the start, inserts the run with its generation: rows 1, 2 and 3 are what
// was found, row 0 the inserted run. $14 refuses any last run
// (IDReuseRejectDuplicate), $15 a completed one
// (IDReuseAllowDuplicateFailedOnly); $16 is the run's creation time, now()
// when NULL (a start in one round trip sets it: startAhead). Every lookup
// reads the snapshot from before the insert.
func startRunSQL(names *dbschema.Names) string {
	return "WITH found AS (" +
		"  (SELECT 1 AS which, run_id, generation, request_hash, state FROM " + names.Run +
		"   WHERE namespace = $2 AND workflow_id = $3 AND request_id = $7)" +
		"  UNION ALL (SELECT 2, run_id, generation, NULL, state FROM " + names.Run +
		"   WHERE namespace = $2 AND workflow_id = $3 AND state = 'running')" +
		"  UNION ALL (SELECT 3, run_id, generation, NULL, state FROM " + names.Run +
		"   WHERE namespace = $2 AND workflow_id = $3 ORDER BY generation DESC LIMIT 1))," +
		" g AS (INSERT INTO " + names.Workflow + " AS w (namespace, workflow_id, last_generation)" +
		"  SELECT $2, $3, 1 WHERE $13::boolean AND NOT EXISTS (SELECT 1 FROM found" +
		"   WHERE which < 3 OR $14::boolean OR ($15::boolean AND state = 'completed'))" +
		"  ON CONFLICT (namespace, workflow_id) DO UPDATE SET last_generation = w.last_generation + 1 RETURNING last_generation)," +
		" inserted AS (INSERT INTO " + names.Run +
		"  (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash, run_deadline, execution_deadline, trace_context, task_job_id, created_at)" +
		"  SELECT $1, $2, $3, g.last_generation, $4, $5, $6, $7, $8," +
		"   now() + nullif($9::bigint, 0) * interval '1 microsecond', now() + nullif($10::bigint, 0) * interval '1 microsecond', $11, $12," +
		"   coalesce($16::timestamptz, now()) FROM g" +
		"  RETURNING generation, run_deadline, execution_deadline, created_at)" +
		" SELECT which, run_id, generation, request_hash, state, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz FROM found" +
		" UNION ALL SELECT 0, $1, generation, NULL, 'running', run_deadline, execution_deadline, created_at FROM inserted"
}

// startRefusal reads what a start's lookup found (startRunSQL's rows 1, 2
// and 3): the run an earlier start with the same request created (W2: a
// replay), or why the start is refused; neither when it may insert its run.
func (c *Client) startRefusal(found [4]*foundRun, hash []byte, info *StartInfo, args WorkflowArgs, policy IDReusePolicy) (replayed *Run, refused error) {
	byRequest, live, last := found[1], found[2], found[3]
	switch {
	case byRequest != nil && !sameRequest(byRequest.hash, hash, info, args):
		return nil, &RequestConflictError{Generation: byRequest.generation, RequestID: info.RequestID, RunID: byRequest.runID, WorkflowID: info.WorkflowID}
	case byRequest != nil:
		return &Run{Generation: byRequest.generation, Namespace: info.Namespace, RunID: byRequest.runID, WorkflowID: info.WorkflowID, client: c}, nil
	case live != nil:
		return nil, &WorkflowAlreadyStartedError{Generation: live.generation, Namespace: info.Namespace, RunID: live.runID, WorkflowID: info.WorkflowID}
	case last != nil && (policy == IDReuseRejectDuplicate || policy == IDReuseAllowDuplicateFailedOnly && last.state == "completed"):
		return nil, &WorkflowIDReuseError{
			Generation: last.generation, LastState: last.state, Policy: policy, RunID: last.runID, WorkflowID: info.WorkflowID,
		}
	}
	return nil, nil
}

// foundRun is a run a start's lookup found.
type foundRun struct {
	generation int64
	hash       []byte
	runID      uuid.UUID
	state      string
}

// runInsert is a start's lookup and insert (startRunSQL): its arguments
// ($1-$11), its first task's job (none when a worker takes the task), ID
// reuse policy and creation time (nil: now()), then what it found and
// inserted.
type runInsert struct {
	args      []any
	taskJobID *int64
	policy    IDReusePolicy
	sql       string
	at        *time.Time

	read                           bool         // the statement's rows were all read
	found                          [4]*foundRun // by request (1), live (2), last (3)
	inserted                       bool
	generation                     int64
	createdAt                      time.Time
	runDeadline, executionDeadline *time.Time
}

// queue queues the statement in batch, inserting the run if insert (and
// nothing found refuses it).
func (r *runInsert) queue(batch *pgx.Batch, insert bool) {
	args := append(r.args[:len(r.args):len(r.args)], r.taskJobID, insert,
		r.policy == IDReuseRejectDuplicate, r.policy == IDReuseAllowDuplicateFailedOnly, r.at)
	r.found, r.read = [4]*foundRun{}, false
	batch.Queue(r.sql, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var (
				which                                     int
				f                                         foundRun
				runDeadline, executionDeadline, createdAt *time.Time
			)
			if err := rows.Scan(&which, &f.runID, &f.generation, &f.hash, &f.state, &runDeadline, &executionDeadline, &createdAt); err != nil {
				return err
			}
			if which == 0 {
				r.inserted, r.generation, r.runDeadline, r.executionDeadline = true, f.generation, runDeadline, executionDeadline
				if createdAt != nil {
					r.createdAt = *createdAt
				}
				continue
			}
			r.found[which] = &f
		}
		if err := rows.Err(); err != nil {
			return err
		}
		r.read = true
		return nil
	})
}

// sendStartBatch sends a start's batch: its lookup or its insert.
func sendStartBatch(ctx context.Context, tx pgx.Tx, batch *pgx.Batch, namespace, workflowID string) error {
	err := tx.SendBatch(ctx, batch).Close()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == "23505" &&
		(pgErr.ConstraintName == "weir_run_live_idx" || pgErr.ConstraintName == "weir_run_request_idx"):
		// Only a writer bypassing the advisory lock gets here.
		return fmt.Errorf("starting workflow %s: %w", workflowID, errStartCollided)
	default:
		return fmt.Errorf("starting workflow %s: %w", workflowID, err)
	}
}

// errStartCollided means a start's insert met one of the unique indexes
// that back its lock (one live run, one run per request ID): a writer that
// did not take the start lock committed a run of the workflow ID first.
var errStartCollided = errors.New("a run of the workflow ID committed while this start inserted its own")

// answerCollision answers a start whose insert collided (errStartCollided,
// any other err is returned as it is) as its lookup would have under the
// lock: it reads what committed through the pool (the start's transaction
// is aborted) and returns a *startReplayedError for the run of the same
// request, or the refusal naming the run in the way.
func (c *Client) answerCollision(ctx context.Context, err error, args WorkflowArgs, info *StartInfo, opts *StartOpts, hash []byte) error {
	if !errors.Is(err, errStartCollided) {
		return err
	}
	lookup := c.newRunInsert(uuid.Nil, info, opts, nil, hash, []byte("{}"))
	batch := &pgx.Batch{}
	lookup.queue(batch, false)
	if readErr := c.pool.SendBatch(ctx, batch).Close(); readErr != nil {
		return fmt.Errorf("%w; reading the run it met: %w", err, readErr)
	}
	replayed, refused := c.startRefusal(lookup.found, hash, info, args, opts.IDReusePolicy)
	switch {
	case refused != nil:
		return refused
	case replayed != nil:
		return &startReplayedError{run: replayed}
	}
	return fmt.Errorf("%w; the run it met is gone: start again", err)
}

// startReplayedError is a start that collided with the run its own request
// ID created in another transaction. Start returns that run, as a replay;
// StartTx, whose transaction the collision aborted, returns this error, which
// unwraps to a *WorkflowAlreadyStartedError naming the run.
type startReplayedError struct {
	run *Run
}

func (e *startReplayedError) Error() string {
	return fmt.Sprintf("weir: workflow %s: request's run %s (generation %d) was committed by another transaction; this transaction is aborted",
		e.run.WorkflowID, e.run.RunID, e.run.Generation)
}

func (e *startReplayedError) Unwrap() error {
	return &WorkflowAlreadyStartedError{Generation: e.run.Generation, Namespace: e.run.Namespace, RunID: e.run.RunID, WorkflowID: e.run.WorkflowID}
}

// queueFirstTask inserts a run's first task job through River.
func (c *Client) queueFirstTask(ctx context.Context, tx pgx.Tx, args task.Args, queue string) (*int64, error) {
	inserted, err := c.river.InsertTx(ctx, tx, args, task.InsertOpts(queue))
	if err != nil {
		return nil, err
	}
	return &inserted.Job.ID, nil
}

// requeueFirstTask undoes what a first task that failed inside the start
// (or was declined) wrote, back to the savepoint taken after the run's
// insert, and queues the task through River instead. A failed task's job
// shows the failed attempt (attempt 1, with taskErr), as if River had run
// it, and River retries it.
func (c *Client) requeueFirstTask(ctx context.Context, tx pgx.Tx, args task.Args, queue string, taskErr error) error {
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT weir_first_task"); err != nil {
		return err
	}
	return c.queueFailedFirstTask(ctx, tx, args, queue, taskErr)
}

// queueFailedFirstTask queues through River the first task of a run that
// its start inserted, which the start's worker declined or failed to run
// (before it wrote anything).
func (c *Client) queueFailedFirstTask(ctx context.Context, tx pgx.Tx, args task.Args, queue string, taskErr error) error {
	jobID, err := c.queueFirstTask(ctx, tx, args, queue)
	if err != nil {
		return err
	}
	batch := &pgx.Batch{}
	if !errors.Is(taskErr, handoff.ErrDeclined) {
		attemptErr, err := json.Marshal(&rivertype.AttemptError{At: time.Now().UTC(), Attempt: 1, Error: taskErr.Error()})
		if err != nil {
			return err
		}
		batch.Queue("UPDATE "+c.names.RiverJob+" SET attempt = 1, attempted_at = now(), errors = array_append(errors, $2::jsonb) WHERE id = $1",
			*jobID, attemptErr)
	}
	batch.Queue("UPDATE "+c.names.Run+" SET task_job_id = $2 WHERE run_id = $1", args.RunID, *jobID)
	return tx.SendBatch(ctx, batch).Close()
}

func earliest(times ...*time.Time) time.Time {
	var out time.Time
	for _, t := range times {
		if t != nil && (out.IsZero() || t.Before(out)) {
			out = *t
		}
	}
	return out
}

// requestHashVersion leads the request hashes this build writes; a hash
// without it (sha256.Size bytes) was written by an earlier build
// (legacyRequestHash).
const requestHashVersion = 1

// requestHash identifies what a start asked for, independently of the codec
// (an encrypting codec's output differs every time): the workflow kind, the
// args as canonical JSON (object keys sorted, no insignificant whitespace)
// and every option that shapes the run (queue, run and execution timeouts,
// ID reuse policy). Namespace and workflow ID are the key it is stored
// under; EagerStart changes how the run starts, not the run.
func requestHash(info *StartInfo, opts *StartOpts, args WorkflowArgs) ([]byte, error) {
	canonical, err := canonicalJSON(args)
	if err != nil {
		return nil, &PayloadError{Err: err, Op: "encoding"}
	}
	h := sha256.New()
	for _, part := range [][]byte{
		[]byte(info.Kind), []byte(info.Queue), canonical,
		[]byte(strconv.FormatInt(int64(opts.RunTimeout), 10)),
		[]byte(strconv.FormatInt(int64(opts.ExecutionTimeout), 10)),
		[]byte(opts.IDReusePolicy.String()),
	} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return h.Sum([]byte{requestHashVersion}), nil
}

// canonicalJSON is v's JSON with object keys sorted and insignificant
// whitespace dropped; numbers keep their text.
func canonicalJSON(v any) ([]byte, error) {
	encoded, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	decoder := json.NewDecoder(bytes.NewReader(encoded))
	decoder.UseNumber()
	var tree any
	if err := decoder.Decode(&tree); err != nil {
		return nil, err
	}
	return json.Marshal(tree) // encoding/json sorts map keys
}

// legacyRequestHash is the request hash of earlier builds (kind, queue and
// args as encoded), so that a request retried across an upgrade still
// replays its start.
func legacyRequestHash(kind, queue string, args WorkflowArgs) ([]byte, error) {
	encoded, err := json.Marshal(args)
	if err != nil {
		return nil, &PayloadError{Err: err, Op: "encoding"}
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(kind), []byte(queue), encoded} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return h.Sum(nil), nil
}

// sameRequest reports whether stored, the hash of the start that used a
// request ID, is that of this start (hash, over args as info names them).
func sameRequest(stored, hash []byte, info *StartInfo, args WorkflowArgs) bool {
	if len(stored) != sha256.Size {
		return bytes.Equal(stored, hash)
	}
	legacy, err := legacyRequestHash(info.Kind, info.Queue, args)
	return err == nil && bytes.Equal(stored, legacy)
}
