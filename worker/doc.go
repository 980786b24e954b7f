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
// jobs of kind "weir.workflow:<kind>" (so a worker fetches only the tasks of
// workflows it registered); activities are River jobs of their args' kind.
// Every attempt holds a lease: an attempt that was recovered elsewhere can't
// commit anything.
//
// A workflow task runs in ONE transaction: it locks the run, moves the inbox
// into history, replays the workflow from its history (or, when this worker
// ran the run's last task, continues the code that task left blocked:
// Config.MaxCachedRuns), appends the new events
// with a compare-and-swap on the run's append point, inserts the jobs the new
// events ask for, and completes its own job, fenced. Every inbox writer takes
// the same lock and queues a task unless one is queued, so no result is ever
// stranded; a sweeper repairs what only an operator could break (a task job
// deleted by hand) and turns the end of a plain River worker's job into the
// activity's outcome.
//
// The hot path needs no fetch between steps. A task that schedules an
// activity this worker serves inserts its River job already claimed by this
// worker, under a fenced lease, and runs it as soon as the task commits
// (Config.MaxEagerActivities bounds how many at once); when the activity
// ends, the transaction that completes its job also runs the run's next
// workflow task, unless a task is queued (a signal came), in which case the
// outcome waits in the inbox for it. A failed attempt goes back to River as
// retryable, and a worker that dies leaves leases that the reaper returns to
// River. A run started with client.Client.Start and StartOpts.EagerStart by
// a client linked to this worker (client.Config.EagerStarter) has its
// first task run by this worker inside the start's transaction (eager
// workflow start), so a run whose
// activities this worker serves needs no workflow-task job at all. Workers
// with Interceptors keep one River job per task and attempt.
//
// A failing workflow task (a bug, a panic, non-determinism) is retried with a
// capped backoff and stays visible in River; it never fails the workflow.
package worker
