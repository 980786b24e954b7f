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
// namespace. It does not check that the run exists; Get does.
func (c *Client) GetRun(workflowID string, runID uuid.UUID) *Run {
	return &Run{Namespace: c.config.Namespace, RunID: runID, WorkflowID: workflowID, client: c}
}

// Get waits until the run closes and decodes its result into out (a pointer;
// nil to discard the result). A run that closed in any state but completed
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
		c.listener = newListener(c.pool, dbschema.Channel(c.config.Schema, dbschema.RunClosedChannel), c.config.Logger)
	})
	return c.listener
}

func (c *Client) await(ctx context.Context, run *Run, out any) error {
	l := c.sharedListener()
	var wake <-chan struct{}
	if l != nil {
		ch, unregister := l.register(run.RunID)
		defer unregister()
		l.waitReady(ctx, listenerReadyWait)
		wake = ch
	} // else: the client was closed; poll.

	ticker := time.NewTicker(c.config.PollInterval)
	defer ticker.Stop()
	for {
		done, err := c.readResult(ctx, run, out)
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-ticker.C:
		}
	}
}

// readResult reads the run once: done is true when it has closed.
func (c *Client) readResult(ctx context.Context, run *Run, out any) (bool, error) {
	var (
		generation int64
		state      string
		result     []byte
		failure    []byte
	)
	err := c.pool.QueryRow(ctx, "SELECT generation, state, result, failure FROM "+c.names.Run+
		" WHERE run_id = $1 AND workflow_id = $2", run.RunID, run.WorkflowID).Scan(&generation, &state, &result, &failure)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, &RunNotFoundError{RunID: run.RunID, WorkflowID: run.WorkflowID}
	case err != nil:
		return false, fmt.Errorf("reading run %s of workflow %s: %w", run.RunID, run.WorkflowID, err)
	}
	run.Generation = generation

	switch state {
	case "running":
		return false, nil
	case "completed":
		if out == nil {
			return true, nil
		}
		if err := c.config.Codec.Decode(result, out); err != nil {
			return true, fmt.Errorf("decoding result of workflow %s run %s: %w", run.WorkflowID, run.RunID, err)
		}
		return true, nil
	default:
		return true, &WorkflowFailedError{
			Failure: decodeFailure(failure), Generation: generation, RunID: run.RunID, State: state, WorkflowID: run.WorkflowID,
		}
	}
}
