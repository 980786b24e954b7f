// Package fencing gives River jobs lease tokens, so that a stale attempt can
// never finalize a job.
//
// # The problem
//
// River (v0.51.2) guards every job state write with state = 'running' only. A
// worker whose job was rescued (or whose lease, in a heartbeat design, ran
// out) and fetched again by another worker can still complete, retry, snooze,
// cancel or discard it, merge its metadata into it, and river.JobCompleteTx
// then returns err == nil while the caller's transaction commits its side
// effects.
//
// # The guarantee
//
// With the fencing Driver, every transition of a job into running mints a
// new lease token (F3), and every write River makes on behalf of an attempt
// is checked against the job's current attempt, in the same transaction as
// River's own write (F1):
//
//   - the async completer's complete, retry, discard, snooze, cancel and
//     interrupt, and the metadata the attempt set (river.MetadataSet,
//     RecordOutput, resumable checkpoints);
//   - river.JobCompleteTx and CompleteTx;
//   - the writes that bypass River's Pilot: Client.JobUpdate, JobUpdateTx and
//     river.ResumableSetStepTx made from inside an attempt;
//   - heartbeats.
//
// A write proves its attempt with the attempt's token or, for an attempt that
// never received one (fetched before the fencing migration, or set running by
// rivertest), with (attempt, attempted_at). A write that proves no current
// attempt changes nothing (F6): the async completer drops it (no row, no
// event) and counts it (Driver.Stats, Config.Observer); inside a caller's
// transaction the transaction is aborted, so Commit fails even if the caller
// ignores the returned ErrLeaseLost, and none of its writes commit (F2).
//
// A later write by the attempt that completed the job is a repeat, whatever
// state it asks for. River's completer writing for the attempt after
// JobCompleteTx (the worker returned nil, or an error) is harmless: River
// keeps the completion and emits its event, as with riverpgxv5, also inside
// rivertest.Worker's transaction. When the process itself committed the
// attempt's completion and told the driver so (weir's worker does), River's
// completer's "completed" for that attempt is answered without a statement,
// with the job as that completion left it. The attempt completing the job
// again in another transaction of its own (a retry after an ambiguous COMMIT
// that did commit) gets an *AlreadyCompletedError (ErrAlreadyCompleted; another
// outcome: *OutcomeConflictError) and that transaction is aborted, so the
// attempt's work commits once. A write made outside any fenced attempt
// (river.JobCompleteTx under rivertest.WorkContext) completes, as River's
// does, a running job that no fenced attempt leases, and otherwise gets a
// *NoLeaseError (ErrNoLease).
//
// Leases use database time only. Each process looks at the leases of its
// attempts every half HeartbeatInterval, in one batched statement, on a
// connection of its own outside the pool (so each running Driver uses one
// connection more than its pool's), and renews those at least half a
// HeartbeatInterval old, until River's completer has written the attempt's
// outcome (for at most max(1 min, 2 × LeaseTTL) after the work returned): no
// lease goes longer than one HeartbeatInterval unrenewed, and an attempt that
// ends sooner costs no renewal.
// When a renewal is refused the attempt's context is cancelled with cause
// ErrLeaseLost. A lease reaper returns jobs whose lease expired to available
// at once (discarded past max attempts), with an error entry saying so, and
// wakes fetchers. It runs in one fenced process per schema, elected among
// the fenced processes by a session advisory lock (one connection more in
// the process that holds it; clients with River's LeaderElectionDisabled
// take no part). A job whose worker died or was partitioned runs again
// within LeaseTTL + ReaperInterval + the fetch poll interval (+ the reaper's
// failover if its process died), while a job that keeps heartbeating within
// its River deadline is never recovered, however long it runs (F4). River's
// own rescuer never takes a job whose lease is alive. After a Postgres
// restart, or on Postgres 15 and later a crash reset, every lease lasts at
// least LeaseTTL past it. docs/ARCHITECTURE.md and docs/operations.md give
// the details.
//
// # Upgrading a River client
//
// Change the driver constructor, add one plugin line, and run the fencing
// migration line:
//
//	driver, err := fencing.NewDriver(dbPool, nil) // was riverpgxv5.New(dbPool)
//	if err != nil { ... }
//	client, err := river.NewClient(driver, &river.Config{
//		Plugins: []rivertype.Plugin{driver.Plugin()}, // first in the list
//		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
//		Workers: workers,
//	})
//
//	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Line: fencing.MigrationLine})
//	err = migrations.Lock(ctx, dbPool, "", func(ctx context.Context) error {
//		_, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
//		return err
//	})
//
// rivermigrate takes no lock; migrations.Lock (the lock weir's migrator and
// `weir migrate` hold) makes the migration safe to run from many processes
// at once.
//
// Workers, job args, InsertTx and river.JobCompleteTx[*fencing.Driver] keep
// compiling and working. CompleteTx is JobCompleteTx with a second,
// independent check. Inside Work, LeaseFromContext returns the attempt's
// lease (job ID, attempt, token, expiry) so that code can fence its own
// tables on the token, and Heartbeat renews the lease at once and stores
// progress details that the job's next attempt reads in Lease.Details (it
// returns ErrLeaseLost once the attempt lost its job, and ErrLeaseBusy when
// another transaction held the job's row locked for as long as it waits).
// Give each client its own Driver.
//
// # Rollout order
//
// Deploy the code first, then migrate. Before the migration the driver and
// plugin work exactly like plain River (Driver.Fenced reports false, for
// readiness checks); within one HeartbeatInterval after it they start
// fencing. The migration is additive (nullable columns, a new table, two
// row triggers), idempotent, sets lock_timeout on every statement that locks
// river_job and builds no index on river_job, so it can run on a large, live
// table; it is River migration line "fencing" and can also be applied with
// weir's migrations package. Jobs that were running before the migration
// have no lease, and jobs fetched by clients still on plain riverpgxv5 (an
// old fleet during a rolling deploy, the river CLI) get a token but no lease
// expiry: the reaper never touches either, and River's own rescue rules
// apply (F5).
//
// In such a mixed fleet no plain process can take a job from a fenced
// attempt whose lease is alive: the lease trigger leaves the row unchanged,
// with no error, when River's own statements would move it out of running
// without touching the lease columns (River gets the row back still
// running). A plain worker's river.JobCompleteTx then returns the job still
// running, with no error (CompleteTx[*riverpgxv5.Driver] refuses it and
// aborts). A statement that sets lease_expires_at itself (an operator's) is
// not refused. docs/upgrading-from-river.md tells more.
//
// # Limits
//
//   - Fencing covers writes to Postgres through River and the code that uses
//     the token. A stale attempt's effects elsewhere (HTTP calls, other
//     databases) are not fenced; its context is cancelled when it learns it
//     lost the lease, which is all a worker can be told.
//   - Tokens are fences, not secrets: code holding a token can write as that
//     attempt.
//   - The plugin stops renewing a lease once the attempt passes its River
//     deadline (Worker.Timeout or the client's JobTimeout, plus
//     JobStuckThreshold), so a stuck attempt is recovered. The plugin learns a
//     worker's own Timeout when the attempt calls LeaseFromContext, Heartbeat
//     or CompleteTx with its work context; until then it assumes the client's
//     JobTimeout. A worker with Timeout -1 that runs longer than the client's
//     JobTimeout must call one of them early in Work. A worker that knows its
//     attempt's own limits (a timeout, a heartbeat timeout) tells them with
//     LimitAttempt: the job of an attempt that passes one while its code
//     still runs is then recovered within AttemptLimitGrace plus
//     ReaperInterval of it, not after the River deadline plus
//     JobStuckThreshold plus a LeaseTTL. weir's activity worker does.
//   - River exposes the seams used here (the Pilot, the driver plugin, the
//     client's configuration) as internal APIs; weir pins River at v0.51.2 and
//     a conformance test fails if River stops routing work through the Pilot.
//     The Pilot cannot be combined with River Pro's.
//   - River's completer keys attempts by job ID, so a process that runs two
//     attempts of one job at once (only possible after a rescue) can mix up
//     an attempt that failed before the plugin ran with the newer one.
//   - Client.JobUpdate outside any attempt is an operator's write and is not
//     fenced.
//   - Completing a job twice in one transaction (river.JobCompleteTx, then
//     again or CompleteTx) is a repeat like any other: the second call
//     returns an *AlreadyCompletedError and aborts the transaction, where
//     River returns the completed job.
//   - Fencing costs throughput on trivial jobs: each fetch and completion
//     batch is one statement, as in River, but with tokens, an attempt log
//     (of the attempts that leave their jobs unfinished) and a backstop
//     trigger. `make bench` measures it against plain River
//     (see bench/README.md).
//   - The lease reaper serves the schemas River has used through its client
//     (the client's own, fetches, inserts).
//   - Postgres 14 or later (CREATE OR REPLACE TRIGGER).
package fencing
