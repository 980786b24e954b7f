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
package client
