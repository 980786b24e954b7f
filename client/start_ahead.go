package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/handoff"
	"github.com/weirhq/weir/internal/lazytx"
	"github.com/weirhq/weir/internal/task"
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

// aheadFailure is a first task that ran ahead of its start and failed: the
// start inserts its run as info and runID say, and queues the task through
// River with err as its first attempt's.
type aheadFailure struct {
	info  *StartInfo
	runID uuid.UUID
	err   error
}

// startAhead starts a run in one round trip if the worker of this process
// that takes its first task can run the task ahead. With ok false it did
// not write anything: the caller starts as before, with failed when the
// task ran and failed.
func (c *Client) startAhead(ctx context.Context, args WorkflowArgs, opts *StartOpts) (run *Run, ok bool, failed *aheadFailure, err error) {
	if opts == nil || !opts.EagerStart || len(c.config.Interceptors) > 0 || opts.RunTimeout != 0 || opts.ExecutionTimeout != 0 {
		return nil, false, nil, nil
	}
	info, err := c.startInfo(args, opts)
	if err != nil {
		return nil, false, nil, nil // the start reports it
	}
	takers := handoff.Lookup(handoff.Key{Pool: c.pool, Schema: c.names.Schema, Queue: info.Queue, Kind: task.Kind(info.Namespace, info.Kind)})
	if len(takers) == 0 {
		return nil, false, nil, nil
	}
	taker, isAhead := takers[0].(handoff.AheadTaker)
	if !isAhead {
		return nil, false, nil, nil
	}
	payload, hash, traceContext, err := c.encodeStart(args, info)
	if err != nil {
		return nil, false, nil, nil // the start reports it
	}
	r := &handoff.Run{
		Args: payload, ID: uuid.New(), Kind: info.Kind, Namespace: info.Namespace, Queue: info.Queue,
		TraceContext: traceContext, WorkflowID: info.WorkflowID,
	}
	tasks, err := taker.RunFirstTaskAhead(ctx, r)
	var taskFailed *handoff.FailedAheadError
	switch {
	case errors.As(err, &taskFailed):
		return nil, false, &aheadFailure{info: info, runID: r.ID, err: taskFailed.Err}, nil
	case err != nil:
		return nil, false, nil, nil // declined: nothing ran that it keeps
	}

	at := r.Now
	insert := &runInsert{
		args: []any{r.ID, info.Namespace, info.WorkflowID, info.Kind, info.Queue, payload, info.RequestID, hash,
			int64(0), int64(0), traceContext},
		policy: opts.IDReusePolicy,
		sql:    c.startRunSQL,
		at:     &at,
	}
	batch := &pgx.Batch{}
	batch.Queue("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", c.startLockKey(info.Namespace, info.WorkflowID))
	insert.queue(batch, true)
	var dbNow time.Time
	batch.Queue(c.startAheadGuardSQL, r.ID).QueryRow(func(row pgx.Row) error {
		var one int
		return row.Scan(&dbNow, &one)
	})
	batch.QueuedQueries = append(batch.QueuedQueries, tasks.Last.QueuedQueries...)
	err = lazytx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if !lazytx.QueueCommit(tx, batch) {
			return errors.New("weir: a start in one round trip could not queue its COMMIT") // cannot happen: tx is new
		}
		err := tx.SendBatch(ctx, batch).Close()
		if err == nil || errors.Is(err, lazytx.ErrCommittedDespiteCallback) {
			tasks.Sent() // committed: what the batch read is recorded
		}
		return err
	})
	committed := err == nil || errors.Is(err, lazytx.ErrCommittedDespiteCallback)
	tasks.Done[0](committed)
	if committed {
		if err != nil {
			// The guard passed: the run is in, at generation 1.
			c.config.Logger.WarnContext(ctx, "weir: workflow started, but reading one of its start's results failed",
				slog.String("workflow_id", info.WorkflowID), slog.String("run_id", r.ID.String()), slog.String("error", err.Error()))
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
		replayed, refused := c.startRefusal(insert.found, hash, info, opts.IDReusePolicy)
		switch {
		case refused != nil:
			return nil, true, nil, refused
		case replayed != nil:
			return replayed, true, nil, nil
		}
	}
	return nil, false, nil, nil
}
