package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/internal/closing"
	"github.com/weirhq/weir/internal/eagerstart"
	"github.com/weirhq/weir/internal/lazytx"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/task"
)

// startAlone is Start in a transaction of its own (StartTx's, with the
// start's interceptors), whose BEGIN goes with its first statements.
func (c *Client) startAlone(ctx context.Context, s *start) (run *Run, err error) {
	var handed []func(committed bool)
	// Whatever happens (a panicking interceptor included), the worker that
	// ran the first task learns whether it committed.
	defer func() {
		for _, done := range handed {
			done(err == nil)
		}
	}()
	err = lazytx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) (err error) {
		run, err = c.interceptStart(ctx, &s.info, func(ctx context.Context) (*Run, error) {
			return c.insertRun(ctx, tx, s, &handed)
		})
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

// insertRun inserts s's run on tx, as StartTx does. With handed set (Start),
// s.taker, if set, runs the first task right after the run's insert, and
// what to tell it once tx ended is appended to handed.
func (c *Client) insertRun(ctx context.Context, tx pgx.Tx, s *start, handed *[]func(committed bool)) (*Run, error) {
	if err := s.encode(c); err != nil {
		return nil, err
	}
	workflowID := s.info.WorkflowID
	var taker eagerstart.Taker
	if handed != nil {
		taker = s.taker
	}

	// W1: serialize starts of this workflow ID until tx ends. The lookup
	// rides in the same round trip, after the lock: each statement of a
	// batch takes its own snapshot, so it sees every start that committed
	// before the lock was granted. A start handed to a worker inserts its
	// run in that statement too, unless the lookup finds a reason not to
	// (the same conditions as below, in SQL), and takes its savepoint: one
	// round trip to the first task. Otherwise the run's row is written once,
	// naming its first task's job, together with its generation: in Start's
	// own transaction the run's insert queues the job, in StartTx's River
	// queues it first.
	var runs [1]store.StartRunResult
	found := &runs[0]
	batch := &pgx.Batch{}
	c.store.QueueStartLock(batch, s.info.Namespace, workflowID)
	lookup := s.runParams(taker != nil)
	c.store.QueueStartRuns(batch, &lookup, runs[:])
	if taker != nil {
		c.store.QueueFirstTaskSavepoint(batch)
	}
	if err := sendStartBatch(ctx, tx, batch, workflowID); err != nil {
		return nil, c.answerCollision(ctx, err, s)
	}
	replayed, refused := s.refusal(c, found)
	switch {
	case (replayed != nil || refused != nil) && found.Inserted: // the SQL's conditions and these differ: fail closed
		return nil, fmt.Errorf("weir: start of workflow %s inserted its run although it is refused or replays a start: %w",
			workflowID, cmp.Or(refused, errors.New("replay")))
	case refused != nil:
		return nil, refused
	case replayed != nil:
		return replayed, nil
	}

	if taker == nil {
		params := s.runParams(true)
		if s.jobs != nil { // announced once committed, as s.jobs's own
			params.QueueTask = true
			s.jobs.queues = append(s.jobs.queues, s.info.Queue)
		} else {
			jobID, err := c.queueFirstTask(ctx, tx, s)
			if err != nil {
				return nil, fmt.Errorf("queueing the first task of workflow %s: %w", workflowID, err)
			}
			params.TaskJobID = &jobID
		}
		batch = &pgx.Batch{}
		c.store.QueueStartRuns(batch, &params, runs[:])
		if err := sendStartBatch(ctx, tx, batch, workflowID); err != nil {
			return nil, c.answerCollision(ctx, err, s)
		}
	}
	if !found.Inserted {
		// Only a writer bypassing the advisory lock gets here.
		return nil, c.answerCollision(ctx, fmt.Errorf("starting workflow %s: %w", workflowID, errStartCollided), s)
	}
	if err := c.runFirstTask(ctx, tx, s, taker, found, handed); err != nil {
		return nil, err
	}

	// A deadline is enforced by a River job due then.
	if due := found.RunDeadline; due != nil || found.ExecutionDeadline != nil {
		if due == nil || found.ExecutionDeadline != nil && found.ExecutionDeadline.Before(*due) {
			due = found.ExecutionDeadline
		}
		if _, err := s.jobsOn(c, tx).InsertTx(ctx, tx, closing.TimeoutArgs{RunID: s.runID}, &river.InsertOpts{
			MaxAttempts: 25, Queue: s.info.Queue, ScheduledAt: *due,
		}); err != nil {
			return nil, fmt.Errorf("scheduling the timeout of workflow %s: %w", workflowID, err)
		}
	}
	return s.created(c, found.Generation), nil
}

// runFirstTask has taker (if not nil) run the first task of s's run, just
// inserted in tx, or queues the task through River when it fails there or
// already failed ahead of the start at this generation.
func (c *Client) runFirstTask(ctx context.Context, tx pgx.Tx, s *start, taker eagerstart.Taker, found *store.StartRunResult, handed *[]func(committed bool)) error {
	if taker == nil {
		return nil
	}
	taskErr := s.failedAhead // not run again at the generation it failed at
	if taskErr == nil || found.Generation != 1 {
		// Start commits right after the task unless a deadline's job is
		// still to be inserted or an interceptor's code runs in the
		// transaction after it (and may fail the start).
		var done func(committed bool)
		if done, taskErr = taker.RunFirstTask(ctx, tx, s.eagerRun(found, c.commitsWithFirstTask(s.opts))); taskErr == nil {
			*handed = append(*handed, done)
			return nil
		}
	}
	// Undone back to the savepoint taken after the run's insert, the task
	// goes through River instead.
	err := c.store.RollbackFirstTask(ctx, tx)
	if err == nil {
		err = c.queueFailedFirstTask(ctx, tx, s, taskErr)
	}
	if err != nil {
		return fmt.Errorf("queueing the first task of workflow %s through River (%w): %w", s.info.WorkflowID, taskErr, err)
	}
	return nil
}

// sendStartBatch sends a start's batch: its lookup or its insert.
func sendStartBatch(ctx context.Context, tx pgx.Tx, batch *pgx.Batch, workflowID string) error {
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
func (c *Client) answerCollision(ctx context.Context, err error, s *start) error {
	if !errors.Is(err, errStartCollided) {
		return err
	}
	found := make([]store.StartRunResult, 1)
	batch := &pgx.Batch{}
	lookup := s.runParams(false)
	c.store.QueueStartRuns(batch, &lookup, found)
	if readErr := c.pool.SendBatch(ctx, batch).Close(); readErr != nil {
		return fmt.Errorf("%w; reading the run it met: %w", err, readErr)
	}
	replayed, refused := s.refusal(c, &found[0])
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

// jobsOn is what inserts s's jobs on tx: Start's own (s.jobs), or tx's.
func (s *start) jobsOn(c *Client, tx pgx.Tx) closing.RiverClient {
	if s.jobs != nil {
		return s.jobs
	}
	return c.jobsOn(tx)
}

// queueFirstTask inserts the job of s's first task through River.
func (c *Client) queueFirstTask(ctx context.Context, tx pgx.Tx, s *start) (int64, error) {
	inserted, err := s.jobsOn(c, tx).InsertTx(ctx, tx,
		task.NewArgs(s.info.Namespace, s.info.Kind, s.runID, s.info.WorkflowID), task.InsertOpts(s.info.Queue))
	if err != nil {
		return 0, err
	}
	return inserted.Job.ID, nil
}

// queueFailedFirstTask queues through River the first task of s's run,
// which its start inserted and its worker declined or failed to run
// (before it wrote anything). A failed task's job shows the failed attempt
// (attempt 1, with taskErr), as if River had run it, and River retries it.
func (c *Client) queueFailedFirstTask(ctx context.Context, tx pgx.Tx, s *start, taskErr error) error {
	jobID, err := c.queueFirstTask(ctx, tx, s)
	if err != nil {
		return err
	}
	p := store.QueuedFirstTaskParams{RunID: s.runID, JobID: jobID}
	if !errors.Is(taskErr, eagerstart.ErrDeclined) {
		if p.AttemptError, err = json.Marshal(&rivertype.AttemptError{At: time.Now().UTC(), Attempt: 1, Error: taskErr.Error()}); err != nil {
			return err
		}
	}
	batch := &pgx.Batch{}
	c.store.QueueQueuedFirstTask(batch, p)
	return tx.SendBatch(ctx, batch).Close()
}
