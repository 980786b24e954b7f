// Package weirtest tests workflow code: an in-memory environment with a
// simulated clock that runs workflows on the engine workers use, and a
// replayer that checks new workflow code against recorded histories.
//
// # The test environment
//
// An [Env] runs one workflow without Postgres or River. Every workflow task
// replays the whole history first, exactly as a worker does, so code that
// isn't deterministic fails the test with a *workflow.NonDeterminismError.
//
//	env := weirtest.NewEnv(t, nil)
//	weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "ch_1"}, nil)
//	weirtest.RegisterActivity(env, &ShipActivity{}) // or run the real one
//	receipt, err := weirtest.ExecuteWorkflow(env, &OrderWorkflow{}, OrderArgs{ID: "o-1"})
//	require.NoError(t, err)
//	env.AssertExpectations()
//
// Activities are answered per kind by typed mocks ([OnActivity], with
// Return, ReturnFunc, Times and After) or by real activities registered with
// [RegisterActivity]; every attempt is recorded ([Env.ActivityCalls],
// [ActivityCallsOf]). A failed attempt is retried under the activity's
// retry policy (its backoff, maximum attempts, non-retryable types and
// schedule-to-close timeout), on the simulated clock.
//
// The clock never waits: whenever the workflow is blocked, it jumps to the
// next timer, retry, delayed activity outcome or delayed callback, so a
// workflow that sleeps for a month finishes in microseconds and
// [Env.Elapsed] shows the month. Signals, updates, cancellation and
// queries are delivered at simulated times from callbacks:
//
//	env.RegisterDelayedCallback(func() {
//		state, err := weirtest.QueryWorkflow[string](env, StateQuery{})
//		...
//		env.SignalWorkflow(Approve{By: "ann"})
//	}, 3*time.Hour)
//
// [UpdateWorkflow] sends an update; its [UpdateCallbacks] hear whether it was
// accepted or rejected (by its validator, for want of a handler, or because
// the run closed first) and its handler's result, as client.Update reports
// them.
//
// # Replaying histories
//
// [ReplayHistory] and [ReplayHistoryFile] replay a history exported with
// client.WriteHistoryJSON (or written by [Env.WriteHistoryJSON]) against
// today's code of one workflow, and return an error wrapping a
// *workflow.NonDeterminismError naming the first divergent event when the
// code no longer makes the recorded decisions. Commit histories of runs
// that matter to testdata and replay them in CI: a change that would break
// runs in flight then fails the build, and workflow.GetVersion shows how to
// make it safely. worker.NewReplayer does the same for several workflow
// types, and loads histories from Postgres by workflow ID and run ID.
package weirtest
