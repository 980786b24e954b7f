// Package replay is weir's deterministic replay engine: given a run's
// history and the new inputs of a workflow task, [Execute] replays the
// workflow code from the start, checks that it makes the same decisions as
// its history records, delivers the inputs, runs the code until every
// coroutine is blocked, and returns the events the task must append. It does
// no I/O: the worker loads history and inputs, calls Execute and commits the
// outcome in one transaction.
//
// # History and tasks
//
// History is a list of workflow tasks (see package history): the inputs
// delivered to a task, its WorkflowTaskStarted boundary, and the commands the
// code produced in it. Replay delivers each task's inputs before its
// boundary, sets workflow.Now to the boundary's time, runs the coroutines
// until all block, and matches every command produced against the task's
// recorded commands, in order: event type, then activity kind or marker name.
// Args and options aren't compared (payloads may be re-encoded or
// encrypted; options may be tuned on a deployed workflow). Any difference,
// including fewer or more commands than recorded, is a
// *workflow.NonDeterminismError. Version markers (workflow.GetVersion) are
// the exception that makes code changes possible: a recorded version marker
// the code no longer asks for is skipped, and a GetVersion call with no
// recorded marker returns workflow.DefaultVersion. Because each task's inputs are delivered at
// the same boundary on every replay, code that races futures (Selector,
// Await) decides the same way every time.
//
// After the history, Execute opens the new task: it numbers the inputs
// (dropping outcomes of activities that are unknown or already resolved, so
// an activity's outcome enters history at most once), appends a
// WorkflowTaskStarted boundary and runs the code live, recording its
// commands.
//
// # Activities and timers
//
// The ID of an ActivityScheduled or TimerStarted event is the identity of the
// activity or timer: [Outcome.Activities] and [Outcome.Timers] list the new
// ones for the worker to insert River jobs for, and their outcomes
// (ActivityCompleted… with ScheduledEventID, TimerFired with StartedEventID)
// come back as inputs. An outcome for an activity or timer that already has
// one, or that doesn't exist, is dropped ([Outcome.Dropped]): each enters
// history at most once.
//
// SignalReceived inputs are queued per signal kind for
// workflow.GetSignalChannel, in input order; signals to a run that has
// returned are dropped.
//
// # Cancellation
//
// A CancelRequested input cancels the workflow's root Context. Whenever every
// coroutine is blocked, the engine looks for pending activities and timers
// whose Context is cancelled (the root one, or one from workflow.WithCancel):
// for each, in the order they were started, it records an
// ActivityCancelRequested or TimerCanceled command (listed in
// [Outcome.CanceledActivities] and [Outcome.CanceledTimers], for the worker
// to cancel the River job) and fails the future with workflow.ErrCanceled at
// once; the activity's or timer's own outcome, if it still comes, is dropped. A workflow that
// returns an error matching workflow.ErrCanceled after a CancelRequested ends
// with WorkflowCanceled ([Outcome.Canceled]) rather than WorkflowFailed.
//
// # Coroutines
//
// Workflow code runs in coroutines (the root one plus one per workflow.Go)
// under the deterministic scheduler of package coroutine: one at a time, in
// creation order. Execute always tears every coroutine down before it
// returns; it leaves no goroutine behind. Workflow code that holds on to
// control for longer than ExecuteParams.DeadlockTimeout (blocked on a real
// channel, mutex, sleep or I/O, or looping), or that still runs when Execute's
// ctx is done, fails the task with [ErrDeadlock] (or ctx's error); its
// goroutine can't be killed, but it is unwound the moment it calls into the
// workflow package again.
//
// # Queries and replay checks
//
// [Query] replays a run (open or closed) and answers a query with the
// handler registered by workflow.SetQueryHandler, recording nothing.
// [Replay] replays a history and reports only whether the code still makes
// the recorded decisions: run it in CI against captured histories before
// deploying new workflow code.
//
// # Using it from the worker
//
// The worker keeps one Definition per workflow kind, built by [Bind], which
// infers the workflow's types from its Run method:
//
//	func AddWorkflow[A workflow.Args, R any](w *Worker, wf workflow.Workflow[A, R]) {
//		def := replay.Bind(wf)
//		w.workflows[def.Kind] = def // wf.Opts() is read by Bind on every run
//	}
//
// A workflow task then loads the run's history and pending inbox rows, and in
// one transaction:
//
//	out, err := replay.Execute(ctx, def, &replay.ExecuteParams{
//		History: events,      // weir_event rows, IDs 1…n
//		Inputs:  inboxEvents, // ID 0, arrival order
//		Now:     dbNow,
//		Info:    replay.Info{WorkflowID: …, RunID: …, Generation: …, Kind: …, TaskAttempt: job.Attempt},
//		Logger:  logger,
//	})
//	// err != nil: fail the task (retried, visible); append nothing.
//	// Otherwise append out.Events (IDs n+1…, CAS on next_event_id), insert a
//	// River job per out.Activities (kind, args and options from its
//	// attributes; its event ID in the job's metadata) and per out.Timers
//	// (due at FireAt), cancel the jobs of out.CanceledActivities and
//	// out.CanceledTimers, consume every inbox row (out.Dropped included), and
//	// if out.Completed close the run with out.Result / out.Failure
//	// (out.Canceled: cancelled; out.ContinuedAsNew: start the next run).
//
// Activity outcomes become inputs with [FailureFromError] for errors.
//
// # Errors
//
// An error returned by Execute fails the workflow task, never the workflow:
// the task is retried and stays visible. It wraps a
// *workflow.NonDeterminismError, a *workflow.PanicError, [ErrDeadlock],
// [ErrInvalidHistory], [ErrPayload] or ctx's error. A workflow that returns an error completes the run as
// failed: [Outcome.Failure] and a WorkflowFailed event.
package replay
