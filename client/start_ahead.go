package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/handoff"
	"github.com/weirhq/weir/internal/lazytx"
)

// A start in one round trip. An eager start alone pays two round trips:
// its lock and insert, which read the run's generation and the database's
// time, then its first task's writes with the COMMIT. A worker that can run
// the task ahead (handoff.AheadTaker) runs it first, at generation 1 and at
// its estimate of the database's time; the start then sends its lock, its
// run's insert (created at that time), a guard and the task's writes, with
// BEGIN and COMMIT, in one batch. The lookup in the insert's statement
// still runs under the lock (W1), and the insert still inserts nothing that
// a refusal or a replay finds (W2); the guard divides by zero unless the
// insert made the run at generation 1, which fails the batch, COMMIT
// included, in the database. A start whose lookup found a replay or a
// refusal returns it (it wrote nothing); any other failed batch, a later
// generation of a workflow ID say, starts as before.

// startAheadGuardSQL fails a start's batch (division by zero) unless the
// run $1 exists at generation 1, as the start's insert, just before it,
// makes it when nothing refuses it; it returns the database's now() (the
// run's creation time is the worker's estimate of it).
func startAheadGuardSQL(names *dbschema.Names) string {
	return "SELECT now(), 1 / (SELECT count(*)::int FROM " + names.Run + " WHERE run_id = $1 AND generation = 1)"
}

// aheadFallback is what a start that did not go in one round trip keeps
// of its try: the IDs it drew (a random workflow or request ID is drawn
// once), and, when its first task ran ahead and failed, the run's ID and
// the task's failure: the start then inserts that run and queues the task
// through River with the failure as its first attempt's.
type aheadFallback struct {
	info    *StartInfo
	runID   uuid.UUID
	failure error

	// What the start writes, encoded (encodeStart) when encoded is set.
	encoded                     bool
	payload, hash, traceContext []byte
}

// knownIDsMax bounds the workflow IDs a client remembers as taken.
const knownIDsMax = 4096

// knownIDs are workflow IDs that this client's eager starts saw taken
// (Start returned their run or a refusal), newest last, up to knownIDsMax: a start of one of them again (a retry with its request
// ID, a later generation) is refused or makes a later generation, which
// fails the guard of a start in one round trip, so it goes in two. (A
// failed batch also drops its statements from the connection's statement
// cache.)
type knownIDs struct {
	mu    sync.Mutex
	set   map[string]struct{}
	order []string
}

func (k *knownIDs) has(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.set[key]
	return ok
}

func (k *knownIDs) add(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.set[key]; ok {
		return
	}
	if k.set == nil {
		k.set = make(map[string]struct{})
	}
	if len(k.order) >= knownIDsMax {
		delete(k.set, k.order[0])
		k.order = k.order[1:]
	}
	k.set[key] = struct{}{}
	k.order = append(k.order, key)
}

// knownIDKey is the knownIDs key of a workflow ID.
func knownIDKey(namespace, workflowID string) string { return namespace + "\x1f" + workflowID }

// startAhead starts a run in one round trip if the worker of this process
// that takes its first task can run the task ahead; info, if not nil, is
// the start's (startInfo). With ok false it did not write anything: the
// caller starts as before, with fallback when it drew IDs.
func (c *Client) startAhead(ctx context.Context, args WorkflowArgs, opts *StartOpts, info *StartInfo) (run *Run, ok bool, fallback *aheadFallback, err error) {
	if !c.commitsWithFirstTask(opts) {
		return nil, false, nil, nil
	}
	if info == nil {
		if info, err = c.startInfo(args, opts); err != nil {
			return nil, false, nil, nil // the start reports it
		}
	}
	// From here on, a start that goes as before keeps what this one drew.
	fallback = &aheadFallback{info: info}
	if opts.WorkflowID != "" && c.knownIDs.has(knownIDKey(info.Namespace, info.WorkflowID)) {
		return nil, false, fallback, nil
	}
	taker, isAhead := c.eagerTaker(info).(handoff.AheadTaker)
	if !isAhead {
		return nil, false, fallback, nil
	}
	payload, hash, traceContext, err := c.encodeStart(args, info, opts)
	if err != nil {
		return nil, false, fallback, nil // the start reports it
	}
	fallback.encoded, fallback.payload, fallback.hash, fallback.traceContext = true, payload, hash, traceContext
	r := &handoff.Run{
		Args: payload, ID: uuid.New(), Kind: info.Kind, Namespace: info.Namespace, Queue: info.Queue,
		TraceContext: traceContext, WorkflowID: info.WorkflowID,
	}
	tasks, err := taker.RunFirstTaskAhead(ctx, r)
	var taskFailed *handoff.FailedAheadError
	switch {
	case errors.As(err, &taskFailed):
		fallback.runID, fallback.failure = r.ID, taskFailed.Err
		return nil, false, fallback, nil
	case err != nil:
		return nil, false, fallback, nil // declined: nothing ran that it keeps
	}

	at := r.Now
	insert := c.newRunInsert(r.ID, info, opts, payload, hash, traceContext)
	insert.at = &at
	batch := &pgx.Batch{}
	c.queueStartLock(batch, info)
	insert.queue(batch, true)
	var dbNow time.Time
	batch.Queue(c.startAheadGuardSQL, r.ID).QueryRow(func(row pgx.Row) error {
		var one int
		return row.Scan(&dbNow, &one)
	})
	batch.QueuedQueries = append(batch.QueuedQueries, tasks.Last.QueuedQueries...)
	// Whatever happens (a panicking tracer included), the worker learns
	// whether the start committed.
	committed := false
	defer func() { tasks.Done[0](committed) }()
	err = lazytx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if !lazytx.QueueCommit(tx, batch) {
			return errors.New("weir: a start in one round trip could not queue its COMMIT") // cannot happen: tx is new
		}
		err := tx.SendBatch(ctx, batch).Close()
		if committed = lazytx.Committed(tx); committed {
			tasks.Sent() // what the batch read is recorded
		}
		return err
	})
	if committed {
		if err != nil || !insert.read || !insert.inserted || insert.generation != 1 {
			// The guard passed, so the run is in, at generation 1.
			c.config.Logger.WarnContext(ctx, "weir: workflow started, but reading one of its start's results failed",
				slog.String("workflow_id", info.WorkflowID), slog.String("run_id", r.ID.String()), slog.Any("error", err))
		}
		taker.ObserveNow(dbNow)
		return &Run{Created: true, Generation: 1, Namespace: info.Namespace, RunID: r.ID, WorkflowID: info.WorkflowID, client: c}, true, nil, nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		// Not the database's refusal: the COMMIT may have run (the
		// connection went, say), so the start reports the error, as a
		// start in two round trips does, rather than start again.
		return nil, true, nil, fmt.Errorf("starting workflow %s: %w", info.WorkflowID, err)
	}
	if insert.read {
		// The lookup ran under the lock: what it found holds.
		replayed, refused := c.startRefusal(insert.found, hash, info, args, opts.IDReusePolicy)
		switch {
		case refused != nil:
			return nil, true, nil, refused
		case replayed != nil:
			return replayed, true, nil, nil
		}
	}
	return nil, false, fallback, nil
}
