// Package client starts workflow runs and awaits their results.
//
//	c, err := client.New(pool, &client.Config{Schema: "weir"})
//	...
//	run, err := c.Start(ctx, OrderArgs{ID: "o-1"}, &client.StartOpts{
//		WorkflowID: "order-o-1", // the run's stable identity
//		RequestID:  "req-1",     // makes this start idempotent
//	})
//	receipt, err := client.GetResult[Receipt](ctx, run)
//
// Every state change also comes as XxxTx(ctx, tx, …): StartTx creates the run
// inside the caller's transaction, so a workflow starts if and only if the
// caller's own rows commit.
//
// Guarantees, enforced by Postgres:
//   - one live run per workflow ID (an advisory lock serializes concurrent
//     starts; a partial unique index backs it up). A start while a run is live
//     is a *WorkflowAlreadyStartedError carrying the live run's identity —
//     never a success;
//   - the same request ID with the same args returns the run it created
//     (Run.Created false); with different args it is a *RequestConflictError;
//   - generations (1, 2, …) come from a per-workflow-ID counter that
//     retention never deletes, so they never go back.
//
// Get waits on one LISTEN connection per Client, shared by all waiters, with
// polling as a fallback; Close releases it.
//
// Talking to runs: Signal (+Tx, deduplicated by request ID), SignalWithStart
// (+Tx: signal the live run or start one, as one step), Cancel (+Tx; the
// workflow's code sees its context cancelled and may clean up) and Query
// (answered by a worker from the run's replayed history, open or closed).
//
// Operating runs: Describe (state, deadlines, pending activities with their
// attempt and lease, pending inbox), History (paged) and WriteHistoryJSON,
// List (filters and a keyset cursor, each served by an index), Terminate
// (+Tx). StartOpts add an IDReusePolicy and run and execution timeouts.
//
// # Errors
//
// Every error a caller can act on is typed, matched with errors.As, and has a
// sentinel for errors.Is; each carries the IDs involved:
//
//	*WorkflowAlreadyStartedError  ErrWorkflowAlreadyStarted  a live run has the workflow ID (its RunID, Generation)
//	*WorkflowIDReuseError         ErrWorkflowIDReuse         the IDReusePolicy refuses a new run (the last run, its state)
//	*RequestConflictError         ErrRequestConflict         a request ID reused with other args
//	*RunNotFoundError             ErrRunNotFound             no such run
//	*RunClosedError               ErrRunClosed               the run already closed (in State)
//	*WorkflowFailedError          ErrWorkflowFailed          Get of a run that did not complete (its Failure, State);
//	                              ErrWorkflowTimedOut        … that timed out
//	                              ErrWorkflowTerminated      … that was terminated
//	*PayloadError                 ErrPayload                 a payload can't be encoded or decoded;
//	                              ErrPayloadTooLarge         … or exceeds Config.MaxPayloadBytes
//	                              ErrInvalidCursor           a List cursor no List returned
//	*QueryTimeoutError            ErrQueryTimeout            no worker answered a Query in time
//	*QueryFailedError             ErrQueryFailed             the workflow could not answer (its Failure; Type "UnknownQuery" for no handler)
//
// For example:
//
//	run, err := c.Start(ctx, args, &client.StartOpts{WorkflowID: id})
//	var started *client.WorkflowAlreadyStartedError
//	switch {
//	case errors.As(err, &started):
//		run = c.GetRun(started.WorkflowID, started.RunID) // await the live run instead
//	case err != nil:
//		return err
//	}
//	receipt, err := client.GetResult[Receipt](ctx, run)
//	if errors.Is(err, client.ErrWorkflowTimedOut) {
//		// …
//	}
package client
