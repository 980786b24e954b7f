package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/internal/lazytx"
	"github.com/weirhq/weir/internal/store"
)

// A queued start in one round trip. A start whose first task goes through
// River (no linked worker takes it) and that commits right after its run's
// insert sends BEGIN, its lock (W1), its lookup and insert, which also
// queues the first task's job, and COMMIT in one batch: one round trip
// where a start alone pays three (its lock and lookup, its insert, its
// COMMIT). The lookup runs under the lock and inserts nothing when it
// finds a replay or a refusal (W2, the reuse policy), so that the COMMIT
// then ends a transaction that wrote nothing. A batch the database failed
// wrote nothing either: the start then goes alone, which answers what it
// met (a run inserted by a writer that bypassed the lock, say).

// startQueued starts s, a groupable start without a taker, in one round
// trip. With ok false it wrote nothing: the caller starts s alone.
func (c *Client) startQueued(ctx context.Context, s *start) (run *Run, ok bool, err error) {
	var runs [1]store.StartRunResult
	found := &runs[0]
	params := s.runParams(true)
	params.QueueTask = true
	batch := &pgx.Batch{}
	c.store.QueueStartLock(batch, s.info.Namespace, s.info.WorkflowID)
	c.store.QueueStartRuns(batch, &params, runs[:])
	committed := false
	err = lazytx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if !lazytx.QueueCommit(tx, batch) {
			return errors.New("weir: a start in one round trip could not queue its COMMIT") // cannot happen: tx is new
		}
		err := tx.SendBatch(ctx, batch).Close()
		committed = lazytx.Committed(tx)
		return err
	})
	var pgErr *pgconn.PgError
	switch {
	case !committed && errors.As(err, &pgErr):
		return nil, false, nil // the database refused the batch: nothing was written
	case !committed:
		// The COMMIT may have run (the connection went, say): the start
		// reports the error, as a start alone does, rather than start again.
		return nil, true, fmt.Errorf("starting workflow %s: %w", s.info.WorkflowID, err)
	case err != nil || !found.Read:
		return nil, true, fmt.Errorf("weir: the start of workflow %s (run %s) committed, but reading what it did failed; "+
			"start it again with the same request ID to learn its run: %w", s.info.WorkflowID, s.runID, err)
	}
	switch decided, err := s.judge(c, found); {
	case err != nil:
		return nil, true, err
	case decided:
		return s.run, true, s.err
	case !found.Inserted:
		return nil, false, nil // only a writer bypassing the lock gets here; the start alone answers it
	}
	s.jobs.queues = append(s.jobs.queues, s.info.Queue) // announced once Start returns
	return s.created(c, found.Generation), true, nil
}
