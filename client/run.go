package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
)

// listenerReadyWait bounds how long the first Get waits for the shared
// listener to be in place before it reads the run's state.
const listenerReadyWait = 5 * time.Second

// GetRun returns a handle on a run started elsewhere, in the client's
// namespace. A zero runID means the workflow's latest run, looked up by each
// Get. It does not check that the run exists; Get does.
func (c *Client) GetRun(workflowID string, runID uuid.UUID) *Run {
	return &Run{Namespace: c.config.Namespace, RunID: runID, WorkflowID: workflowID, client: c}
}

// Get waits until the run closes and decodes its result into out (a pointer;
// nil to discard the result). A run that continued as new is followed to the
// run that continued it, and so on: Get returns the workflow's result. A run that closed in any state but completed
// returns a *WorkflowFailedError. Get returns ctx's error if ctx ends first;
// the run goes on regardless.
func (r *Run) Get(ctx context.Context, out any) error {
	if r.client == nil {
		return errors.New("weir: Run has no client; get runs from Client.Start or Client.GetRun")
	}
	return r.client.await(ctx, r, out)
}

// GetResult is Get returning the typed result.
func GetResult[R any](ctx context.Context, run *Run) (R, error) {
	var out R
	err := run.Get(ctx, &out)
	return out, err
}

func (c *Client) sharedListener() *listener {
	c.listenerOnce.Do(func() {
		c.listener = newListener(c.pool, []string{
			dbschema.Channel(c.config.Schema, dbschema.RunClosedChannel),
			dbschema.Channel(c.config.Schema, dbschema.QueryAnsweredChannel),
			dbschema.Channel(c.config.Schema, dbschema.UpdateDoneChannel),
		}, c.config.Logger)
	})
	return c.listener
}

func (c *Client) await(ctx context.Context, run *Run, out any) error {
	l := c.sharedListener()
	ticker := time.NewTicker(c.config.PollInterval)
	defer ticker.Stop()

	// A run that continued as new hands over to the next run of its chain:
	// follow it and await that one.
	runID := run.RunID
	if runID == uuid.Nil {
		latest, err := c.resolveRun(ctx, c.pool, run.WorkflowID, uuid.Nil)
		if err != nil {
			return err
		}
		runID = latest
	}
	for {
		var wake <-chan struct{}
		unregister := func() {}
		if l != nil {
			wake, unregister = l.register(dbschema.Channel(c.config.Schema, dbschema.RunClosedChannel), runID.String())
			l.waitReady(ctx, listenerReadyWait)
		} // else: the client was closed; poll.

		next, err := c.awaitOne(ctx, run, runID, out, wake, ticker.C)
		unregister()
		if err != nil || next == uuid.Nil {
			return err
		}
		runID = next
	}
}

// awaitOne waits for runID to close; next is the run that continued it, if
// it continued as new.
func (c *Client) awaitOne(ctx context.Context, run *Run, runID uuid.UUID, out any, wake <-chan struct{}, tick <-chan time.Time) (uuid.UUID, error) {
	for {
		done, next, err := c.readResult(ctx, run, runID, out)
		if done || err != nil {
			return next, err
		}
		select {
		case <-ctx.Done():
			return uuid.Nil, ctx.Err()
		case <-wake:
		case <-tick:
		}
	}
}

// readResult reads the run once: done is true when it has closed, and next
// is the run that continued it, if it continued as new.
func (c *Client) readResult(ctx context.Context, run *Run, runID uuid.UUID, out any) (bool, uuid.UUID, error) {
	r, err := c.store.GetRun(ctx, c.pool, runID)
	if err == nil && r.WorkflowID != run.WorkflowID {
		err = pgx.ErrNoRows
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, uuid.Nil, &RunNotFoundError{RunID: runID, WorkflowID: run.WorkflowID}
	case err != nil:
		return false, uuid.Nil, fmt.Errorf("reading run %s of workflow %s: %w", runID, run.WorkflowID, err)
	}

	switch r.State {
	case "running":
		return false, uuid.Nil, nil
	case "continued_as_new":
		if r.Next == nil {
			return false, uuid.Nil, fmt.Errorf("run %s of workflow %s continued as new, but no run follows it", runID, run.WorkflowID)
		}
		return true, *r.Next, nil
	case "completed":
		if out == nil {
			return true, uuid.Nil, nil
		}
		if err := c.config.Codec.Decode(r.Result, out); err != nil {
			return true, uuid.Nil, fmt.Errorf("decoding result of workflow %s run %s: %w", run.WorkflowID, runID, err)
		}
		return true, uuid.Nil, nil
	default:
		return true, uuid.Nil, &WorkflowFailedError{
			Failure: decodeFailure(r.Failure), Generation: r.Generation, RunID: runID, State: r.State, WorkflowID: run.WorkflowID,
		}
	}
}
