package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/eagerstart"
	"github.com/weirhq/weir/internal/lazytx"
	"github.com/weirhq/weir/internal/store"
)

// A start in one round trip. An eager start alone pays two round trips:
// its lock and insert, which read the run's generation and the database's
// time, then its first task's writes with the COMMIT. A worker that can run
// the task ahead (eagerstart.Taker.RunFirstTaskAhead) runs it first, at
// generation 1 and at its estimate of the database's time; the start then
// sends its lock, its run's insert (created at that time), a guard
// (store.QueueStartAheadGuard) and the task's writes, with BEGIN and
// COMMIT, in one batch, on generic plans (dbschema.GenericPlansSQL). The
// lookup in the insert's statement still runs under the lock (W1), and the
// insert inserts nothing that a refusal or a replay finds (W2); the guard
// divides by zero unless the insert made the run at generation 1, which
// fails the batch, COMMIT included, in the database. A start whose lookup
// found a replay or a refusal returns it (it wrote nothing); any other
// failed batch, a later generation of a workflow ID say, starts as before.

// knownIDsMax bounds the workflow IDs a client remembers as taken
// (Client.knownIDs): workflow IDs that its eager starts saw taken (Start
// returned their run or a refusal). A start of one of them again (a retry
// with its request ID, a later generation) is refused or makes a later
// generation, which fails the guard of a start in one round trip, so it
// goes in two. (A failed batch also drops its statements from the
// connection's statement cache.)
const knownIDsMax = 4096

// startAhead starts s in one round trip if its taker runs its first task
// ahead; s is eager, commits right after its first task, and is encoded.
// With ok false it wrote nothing: the caller starts s alone (with the
// task's failure, when it ran ahead and failed).
func (c *Client) startAhead(ctx context.Context, s *start) (run *Run, ok bool, err error) {
	info := &s.info
	if s.opts.WorkflowID != "" && c.knownIDs.Contains(s.key()) {
		return nil, false, nil
	}
	r := &eagerstart.Run{
		Args: s.payload, ID: s.runID, Kind: info.Kind, Namespace: info.Namespace, Queue: info.Queue,
		TraceContext: s.traceContext, WorkflowID: info.WorkflowID, Reserved: s.reserved,
	}
	tasks, err := s.taker.RunFirstTaskAhead(ctx, r)
	var taskFailed *eagerstart.FailedAheadError
	switch {
	case errors.As(err, &taskFailed):
		s.failedAhead = taskFailed.Err
		return nil, false, nil
	case err != nil:
		return nil, false, nil // declined: nothing ran that it keeps
	}

	var (
		runs  [1]store.StartRunResult
		found = &runs[0]
		dbNow time.Time
	)
	params := s.runParams(true)
	params.CreatedAt, params.NextEventID = &r.Now, r.NextEventID
	batch := &pgx.Batch{}
	batch.Queue(dbschema.GenericPlansSQL)
	c.store.QueueStartLock(batch, info.Namespace, info.WorkflowID)
	c.store.QueueStartRuns(batch, &params, runs[:])
	c.store.QueueStartAheadGuard(batch, s.runID, &dbNow)
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
		if err != nil || !found.Read || !found.Inserted || found.Generation != 1 {
			// The guard passed, so the run is in, at generation 1.
			c.config.Logger.WarnContext(ctx, "weir: workflow started, but reading one of its start's results failed",
				slog.String("workflow_id", info.WorkflowID), slog.String("run_id", s.runID.String()), slog.Any("error", err))
		}
		s.taker.ObserveNow(dbNow)
		return s.created(c, 1), true, nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		// Not the database's refusal: the COMMIT may have run (the
		// connection went, say), so the start reports the error, as a
		// start in two round trips does, rather than start again.
		return nil, true, fmt.Errorf("starting workflow %s: %w", info.WorkflowID, err)
	}
	if found.Read {
		// The lookup ran under the lock: what it found holds.
		replayed, refused := s.refusal(c, found)
		switch {
		case refused != nil:
			return nil, true, refused
		case replayed != nil:
			return replayed, true, nil
		}
	}
	return nil, false, nil
}
