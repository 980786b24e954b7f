package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/eagerstart"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/task"
)

// A start goes one of four ways, chosen by Start (startBy): alone
// (start_alone.go: its own transaction, StartTx's way, where the linked
// worker may run the first task), in a group of starts made at once
// (start_group.go), or by itself in one round trip: an eager start when
// its first task can run before anything is sent (start_ahead.go), any
// other with its first task queued through River (start_queued.go).

// start is one start of a run: what it asks for, checked, and once encoded
// what it writes.
type start struct {
	args  WorkflowArgs
	opts  *StartOpts
	info  StartInfo // what interceptors are told (&info)
	runID uuid.UUID
	taker eagerstart.Taker // the linked worker's, for an eager Start
	// reserved: the start holds room for its run in taker's worker
	// (eagerstart.Taker.Reserve) until Start returns.
	reserved bool

	encoded                     bool
	payload, hash, traceContext []byte
	// failedAhead is the failure of the first task, run ahead of the start
	// (start_ahead.go): the start queues the task through River with it.
	failedAhead error
	// jobs inserts the jobs of Start's own transactions (Client.jobsOn):
	// &quiet, or nil for StartTx.
	jobs  *quietJobs
	quiet quietJobs

	// In a group (start_group.go): the caller's ctx, and the start's
	// verdict, its run or error, or that it runs alone.
	ctx   context.Context
	alone bool
	run   *Run
	err   error
}

// Start is StartTx in a transaction of its own, whose BEGIN goes with its
// first statements. With StartOpts.EagerStart, the linked worker
// (Config.EagerStarter) may run the run's first workflow task inside that
// transaction (see StartOpts.EagerStart). A start with a request ID that
// was used before replays that start if it asked for the same run (the
// workflow kind, the args as canonical JSON, Queue, RunTimeout,
// ExecutionTimeout and IDReusePolicy: see StartOpts.RequestID) and is a
// *RequestConflictError otherwise.
//
// Many starts made at once (without RunTimeout, ExecutionTimeout or client
// interceptors) share transactions; each still returns
// what it would alone, and once its group took it, waits for the group's
// commit, not for ctx. A start made while no other waits goes alone.
func (c *Client) Start(ctx context.Context, args WorkflowArgs, opts *StartOpts) (*Run, error) {
	s, err := c.newStart(args, opts)
	if err != nil {
		return nil, err
	}
	if s.opts.EagerStart && c.config.EagerStarter != nil {
		// The linked worker's taker, if it serves the run's queue and workflow.
		s.taker = c.config.EagerStarter.FirstTaskTaker(eagerstart.Key{
			Schema: c.names.Schema, Queue: s.info.Queue, Kind: task.Kind(s.info.Namespace, s.info.Kind),
		})
	}
	if s.taker != nil {
		// Room for the run in flight, awaited before the start sends
		// anything and held until the task's Done ran (each way of
		// starting calls it before it returns).
		var release func()
		if release, s.reserved = s.taker.Reserve(ctx); s.reserved {
			defer release()
		}
	}
	s.quiet.Client = c.quiet
	s.jobs = &s.quiet
	run, err := c.startBy(ctx, s)
	if err == nil && len(s.jobs.queues) > 0 {
		c.announce(context.WithoutCancel(ctx), s.jobs.queues)
	}
	if s.opts.EagerStart && s.opts.WorkflowID != "" && (err == nil || idTaken(err)) {
		// Taken: its next start goes in two round trips (startAhead).
		c.knownIDs.Add(s.key(), struct{}{})
	}
	return run, err
}

// idTaken reports whether a start's err says its workflow ID has a run.
func idTaken(err error) bool {
	_, started := errors.AsType[*WorkflowAlreadyStartedError](err)
	_, reuse := errors.AsType[*WorkflowIDReuseError](err)
	_, request := errors.AsType[*RequestConflictError](err)
	return started || reuse || request
}

// startBy chooses how s goes: alone, unless it commits right after its
// run's insert and first task (groupable); then in a group, or by itself
// when no group is needed (start_group.go).
func (c *Client) startBy(ctx context.Context, s *start) (*Run, error) {
	if !c.groupable(s.opts) {
		return c.startAlone(ctx, s)
	}
	if err := s.encode(c); err != nil {
		return nil, err
	}
	s.ctx = ctx
	if err := c.starts.Do(ctx, s); err != nil {
		return nil, err
	}
	return s.run, s.err
}

// startOne starts s, which groupable would let in a group, by itself: in
// one round trip if it can (ahead of its first task when eager, else with
// the task queued), else alone.
func (c *Client) startOne(ctx context.Context, s *start) (*Run, error) {
	switch {
	case s.taker != nil:
		if run, ok, err := c.startAhead(ctx, s); ok {
			return run, err
		}
	case s.jobs != nil:
		if run, ok, err := c.startQueued(ctx, s); ok {
			return run, err
		}
	}
	return c.startAlone(ctx, s)
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
	s, err := c.newStart(args, opts)
	if err != nil {
		return nil, err
	}
	return c.interceptStart(ctx, &s.info, func(ctx context.Context) (*Run, error) {
		return c.insertRun(ctx, tx, s, nil)
	})
}

// startKey is a start's workflow ID and its namespace: what its start
// lock serializes (W1).
type startKey struct{ namespace, workflowID string }

func (s *start) key() startKey { return startKey{s.info.Namespace, s.info.WorkflowID} }

// noStartOpts are the options of a start given none. A start's options are
// read only: a caller's are not copied either.
var noStartOpts StartOpts

// newStart checks a start's args and options and names what it starts,
// drawing the IDs it defaults.
func (c *Client) newStart(args WorkflowArgs, opts *StartOpts) (*start, error) {
	if opts == nil {
		opts = &noStartOpts
	}
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
	workflowID := opts.WorkflowID // a new UUID's text, drawn only if none was given
	if workflowID == "" {
		workflowID = uuid.NewString()
	}
	if len(workflowID) > 1000 {
		return nil, fmt.Errorf("weir: workflow ID is %d bytes; at most 1000", len(workflowID))
	}
	requestID := opts.RequestID
	if requestID == "" {
		requestID = uuid.NewString()
	}
	if len(requestID) > 255 {
		return nil, fmt.Errorf("weir: request ID is %d bytes; at most 255", len(requestID))
	}
	if opts.RunTimeout < 0 || opts.ExecutionTimeout < 0 {
		return nil, errors.New("weir: RunTimeout and ExecutionTimeout must not be negative")
	}
	queue := cmp.Or(opts.Queue, QueueDefault)
	if err := validateQueue(queue); err != nil {
		return nil, err
	}
	info := StartInfo{Kind: kind, Namespace: namespace, Queue: queue, RequestID: requestID, WorkflowID: workflowID}
	return &start{args: args, opts: opts, info: info, runID: uuid.New()}, nil
}

// noHeaders is the trace context of a start without headers, shared: read
// only.
var noHeaders = []byte("{}")

// encode encodes what s writes, once: the args, the request's hash and the
// trace context (the interceptors' headers).
func (s *start) encode(c *Client) (err error) {
	if s.encoded {
		return nil
	}
	if s.payload, err = c.encodePayload("args of workflow", s.info.WorkflowID, s.args); err != nil {
		return err
	}
	var marshaled []byte // the args as json.Marshal encodes them, if known
	switch c.config.Codec.(type) {
	case JSONCodec, *JSONCodec:
		marshaled = s.payload
	}
	if s.hash, err = requestHash(&s.info, s.opts, s.args, marshaled); err != nil {
		return err
	}
	s.traceContext = noHeaders
	if len(s.info.Headers) > 0 {
		if s.traceContext, err = json.Marshal(s.info.Headers); err != nil {
			return fmt.Errorf("encoding headers of workflow %s: %w", s.info.WorkflowID, err)
		}
	}
	s.encoded = true
	return nil
}

// runParams are s's lookup and insert (store.QueueStartRuns), the insert
// only if insert.
func (s *start) runParams(insert bool) store.StartRunParams {
	return store.StartRunParams{
		RunID: s.runID, Namespace: s.info.Namespace, WorkflowID: s.info.WorkflowID, Kind: s.info.Kind, Queue: s.info.Queue,
		Args: s.payload, RequestID: s.info.RequestID, RequestHash: s.hash,
		RunTimeout: s.opts.RunTimeout, ExecutionTimeout: s.opts.ExecutionTimeout, TraceContext: s.traceContext,
		Insert: insert, RejectAny: s.opts.IDReusePolicy == IDReuseRejectDuplicate,
		RejectCompleted: s.opts.IDReusePolicy == IDReuseAllowDuplicateFailedOnly,
	}
}

// eagerRun is s's run, just inserted, as its first task reads it.
func (s *start) eagerRun(found *store.StartRunResult, lastInTx bool) *eagerstart.Run {
	return &eagerstart.Run{
		Args: s.payload, Generation: found.Generation, ID: s.runID, Kind: s.info.Kind, Namespace: s.info.Namespace,
		Now: found.CreatedAt, Queue: s.info.Queue, TraceContext: s.traceContext, WorkflowID: s.info.WorkflowID, LastInTx: lastInTx,
		Reserved: s.reserved,
	}
}

// created is the run s created.
func (s *start) created(c *Client, generation int64) *Run {
	return &Run{Created: true, Generation: generation, Namespace: s.info.Namespace, RunID: s.runID, WorkflowID: s.info.WorkflowID, client: c}
}

// refusal reads what s's lookup found: the run an earlier start with the
// same request created (W2: a replay), or why the start is refused;
// neither when it may insert its run.
func (s *start) refusal(c *Client, found *store.StartRunResult) (replayed *Run, refused error) {
	info, policy := &s.info, s.opts.IDReusePolicy
	switch byRequest, live, last := found.ByRequest, found.Live, found.Last; {
	case byRequest != nil && !bytes.Equal(byRequest.RequestHash, s.hash):
		return nil, &RequestConflictError{Generation: byRequest.Generation, RequestID: info.RequestID, RunID: byRequest.RunID, WorkflowID: info.WorkflowID}
	case byRequest != nil:
		return &Run{Generation: byRequest.Generation, Namespace: info.Namespace, RunID: byRequest.RunID, WorkflowID: info.WorkflowID, client: c}, nil
	case live != nil:
		return nil, &WorkflowAlreadyStartedError{Generation: live.Generation, Namespace: info.Namespace, RunID: live.RunID, WorkflowID: info.WorkflowID}
	case last != nil && (policy == IDReuseRejectDuplicate || policy == IDReuseAllowDuplicateFailedOnly && last.State == "completed"):
		return nil, &WorkflowIDReuseError{
			Generation: last.Generation, LastState: last.State, Policy: policy, RunID: last.RunID, WorkflowID: info.WorkflowID,
		}
	}
	return nil, nil
}

// commitsWithFirstTask reports whether a start with opts commits right
// after its first task's writes (EagerStart, and groupable): those writes
// are its transaction's last.
func (c *Client) commitsWithFirstTask(opts *StartOpts) bool {
	return opts.EagerStart && c.groupable(opts)
}

// groupable reports whether a start with opts commits right after its
// run's insert and, when its linked worker runs it, its first task's
// writes (no interceptor code or deadline job after them): the starts a
// group of starts can take.
func (c *Client) groupable(opts *StartOpts) bool {
	return len(c.config.Interceptors) == 0 && opts.RunTimeout == 0 && opts.ExecutionTimeout == 0
}
