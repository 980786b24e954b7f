// Package otel traces and measures weir with OpenTelemetry, through the
// extension points the core defines (client.Interceptor, worker.Interceptor,
// fencing.Observer); core packages do not import OpenTelemetry. Import it
// under another name (weirotel, say) next to go.opentelemetry.io/otel.
//
// # Installing
//
// One call per component, each taking a TracerProvider and a MeterProvider
// (nil means no-op):
//
//	weirotel.InstallClient(clientConfig, tp, mp) // before client.New
//	weirotel.InstallWorker(workerConfig, tp, mp) // before worker.New: interceptor and fencing observer
//
// NewClientInterceptor, NewWorkerInterceptor (and its FencingObserver) and
// NewFencingObserver build the parts for configs assembled by hand. Give the
// SDK's TracerProvider sdktrace.WithIDGenerator(weirotel.NewIDGenerator()) so
// that retries link to the attempt before them across processes (see
// IDGenerator). For the server's /metrics, RegisterPrometheus returns a
// MeterProvider collected by a prometheus.Registerer; give it
// sdkmetric.WithReader to feed another reader from the same provider, or
// put PrometheusReader in a MeterProvider of your own. Install each
// component once, with the one provider.
//
// # Trace shape
//
// One trace per run. The span of Start, StartTx or SignalWithStart
// (StartWorkflow:<kind>, a producer span) is its root: its context (W3C
// traceparent, tracestate and baggage) is stored with the run, in
// weir_run.trace_context, and copied into each activity's job when it is
// scheduled. Every workflow task (WorkflowTask:<kind>) and every activity
// attempt (Activity:<kind>) is a consumer span whose parent is the start span:
//
//	StartWorkflow:order
//	├── WorkflowTask:order         attempt 1
//	├── Activity:charge            attempt 1  error, weir.outcome=retry
//	├── Activity:charge            attempt 2  link → attempt 1
//	├── WorkflowTask:order         attempt 1
//	├── Activity:ship              attempt 1  weir.outcome=fenced, event weir.stale_write_rejected
//	├── Activity:ship              attempt 2  link → attempt 1, event weir.lease_expired
//	└── WorkflowTask:order         attempt 1
//
// A workflow task replays history in memory, so it is one span however much
// past work it replays: replay emits no spans of its own. A task that is
// retried, and an attempt that is retried or recovered after its lease was
// lost, is a new span with the same river.job_id, a higher weir.attempt and
// a link (weir.link=previous_attempt) to the span of the attempt before it:
// derived from the IDs when IDGenerator is installed, else remembered if that
// attempt ran in the same process. A run continued as new keeps the trace of
// the run it continues. A run started without the client interceptor has no
// start span; with IDGenerator its spans still share one trace, whose ID is
// derived from the run ID.
//
// Attributes: weir.workflow_id, weir.run_id, weir.attempt, river.job_id,
// river.queue, weir.workflow.kind or weir.activity.kind, weir.namespace,
// weir.outcome and weir.generation; activities also weir.scheduled_event_id;
// the workflow task that closes its run also weir.state (completed, failed,
// cancelled, continued_as_new). Span events: weir.lease_lost, weir.lease_expired,
// weir.stale_write_rejected (from the fencing observer, on the attempt's
// span, or on a short Fencing:<event> child span when the attempt had
// already ended) and weir.nondeterminism (a workflow task whose replay did
// not match history).
//
// A plain River worker registered as an activity (worker.AddRiverWorker) is
// not wrapped by worker interceptors, so its attempts have no weir span; use
// otelriver for those.
//
// A child workflow continues its parent's trace: the child's run stores the
// parent's trace context, so its tasks and attempts are children of the
// parent's start span (with the child's own weir.run_id). A signal is a span
// of the sender's trace (SignalWorkflow:<kind>, with weir.signal.kind and
// weir.request_id); its context travels with the signal, and the workflow
// task that delivers it links to it (weir.link=signal).
//
// # Metrics
//
// Counters: weir.workflow.started (client), weir.workflow_task.attempts and
// weir.activity.attempts by weir.outcome, weir.lease.renewals,
// weir.lease.lost, weir.lease.expired, weir.lease.stale_writes_rejected.
// Histograms (seconds): weir.workflow_task.duration (replay and commit),
// weir.workflow_task.replay.duration (replay and workflow code alone),
// weir.workflow_task.schedule_to_start.duration,
// weir.activity.schedule_to_start.duration, weir.activity.execution.duration,
// weir.activity.schedule_to_close.duration (scheduling to final outcome,
// across attempts). Runs closed by their workflow code: the counter
// weir.workflow.closed and the histogram weir.workflow.duration (start to
// close, end to end), by weir.state (completed, failed, cancelled,
// continued_as_new), counted by the worker whose task closed the run. Runs
// closed from outside (terminated, timed out) and the runs of every state
// now: the gauge weir.workflow.runs (by namespace, kind and state), read
// from the database by ObserveRuns. No workflow cache exists, so there are
// no cache metrics.
//
// # rivercontrib/otelriver
//
// otelriver is River middleware: a river.work/<kind> span for each job a River
// client works, and river.insert_many for inserts, with River-level metrics
// (river.work_count, …). It works alongside this package, with no duplicate
// or broken spans: weir's spans are about workflows (runs, tasks, attempts,
// fencing) and live in the run's trace, whatever trace is current when River
// calls the worker. Where a River middleware's span is current when an
// attempt begins, the attempt's span links to it (weir.link=caller) rather
// than becoming its child, so both traces stay whole. weir's worker does not
// install River middleware itself; use otelriver on your own River clients
// (jobs you insert and work outside workflows) for River-level telemetry.
package otel
