// Package worker runs workflows and activities.
//
//	w, err := worker.New(pool, &worker.Config{Schema: "weir"})
//	...
//	worker.AddWorkflow(w, &OrderWorkflow{})               // types inferred from Run
//	worker.AddActivity(w, &ChargeActivity{Bank: bank})    // types inferred from Execute
//	worker.AddRiverWorker(w, &EmailWorker{})              // a plain river.Worker[T], usable as an activity
//	err = w.Start(ctx)
//	defer w.Stop(ctx)
//
// A Worker is a River client on the fencing driver. Workflow tasks are River
// jobs of kind "weir.workflow:<namespace>/<kind>" (so a worker fetches only
// the tasks of workflows it registered); activities are River jobs of their
// args' kind. Every attempt holds a lease: an attempt that was recovered
// elsewhere can't commit anything.
//
// A workflow task runs in one transaction: it locks the run, moves the inbox
// into history, replays the workflow (or continues its cached run:
// Config.MaxCachedRuns), appends the new events with a compare-and-swap on
// the run's append point, inserts the jobs they ask for and completes its own
// job, fenced. Activities this worker serves run claimed, without a fetch
// (Config.MaxEagerActivities), and their outcomes continue the run in the
// transaction that completes their job. A failing workflow task (a bug, a
// panic, non-determinism) is retried with a capped backoff and stays visible
// in River; it never fails the workflow. docs/ARCHITECTURE.md has the rest.
package worker
