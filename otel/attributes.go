package otel

import "go.opentelemetry.io/otel/attribute"

// Attribute keys on weir's spans and metrics. Spans carry all that apply;
// metrics carry only the low-cardinality ones (namespace, kinds, queue,
// outcome, op).
const (
	// AttrActivityKind is an activity's kind.
	AttrActivityKind = attribute.Key("weir.activity.kind")

	// AttrSignalKind is a signal's kind.
	AttrSignalKind = attribute.Key("weir.signal.kind")

	// AttrAttempt is River's attempt number of a workflow task or an activity
	// (1 is the first).
	AttrAttempt = attribute.Key("weir.attempt")

	// AttrCreated says whether a start created its run (false: an earlier
	// start with the same request ID did).
	AttrCreated = attribute.Key("weir.created")

	// AttrFencingOp is the write a fencing event is about (see
	// fencing.LeaseLostError.Op).
	AttrFencingOp = attribute.Key("weir.fencing.op")

	// AttrGeneration is the run's generation within its workflow ID.
	AttrGeneration = attribute.Key("weir.generation")

	// AttrJobID is the River job of a workflow task or an activity.
	AttrJobID = attribute.Key("river.job_id")

	// AttrLink says what a span link points at: LinkPreviousAttempt, or
	// LinkCaller for a span that was current when the attempt began (a River
	// middleware's, such as rivercontrib/otelriver's).
	AttrLink = attribute.Key("weir.link")

	// AttrNamespace is the run's namespace.
	AttrNamespace = attribute.Key("weir.namespace")

	// AttrOutcome is how a workflow task or an activity attempt ended: one of
	// the Outcome constants.
	AttrOutcome = attribute.Key("weir.outcome")

	// AttrQueue is the River queue of a start, a workflow task or an activity.
	AttrQueue = attribute.Key("river.queue")

	// AttrRequestID is a start's request ID.
	AttrRequestID = attribute.Key("weir.request_id")

	// AttrRunID is the run's ID.
	AttrRunID = attribute.Key("weir.run_id")

	// AttrScheduledEventID is the history event that scheduled an activity.
	AttrScheduledEventID = attribute.Key("weir.scheduled_event_id")

	// AttrState is a run's state (running, completed, failed, …).
	AttrState = attribute.Key("weir.state")

	// AttrWorkflowID is the run's workflow ID.
	AttrWorkflowID = attribute.Key("weir.workflow_id")

	// AttrWorkflowKind is the workflow's kind.
	AttrWorkflowKind = attribute.Key("weir.workflow.kind")
)

// Values of AttrLink.
const (
	// LinkCaller marks a link to the span current in the context River gave
	// the attempt (a River middleware's span).
	LinkCaller = "caller"

	// LinkPreviousAttempt marks a link from an attempt to the attempt of the
	// same job before it (a retry, or a recovery after a lost lease).
	LinkPreviousAttempt = "previous_attempt"

	// LinkSignal marks a link from the workflow task that delivered a
	// signal to the span of its sender (SignalWorkflow:<kind>).
	LinkSignal = "signal"
)

// Values of AttrOutcome.
const (
	// OutcomeCompleted: the task committed, or the activity's result was
	// recorded.
	OutcomeCompleted = "completed"

	// OutcomeError: the workflow task failed and River will retry it.
	OutcomeError = "error"

	// OutcomeFailed: the activity failed for good (last attempt, or not
	// retryable); the workflow sees the failure.
	OutcomeFailed = "failed"

	// OutcomeFenced: the attempt had lost its lease; its writes were rejected.
	OutcomeFenced = "fenced"

	// OutcomeNonDeterminism: the workflow task failed because replayed
	// workflow code did not match history; River will retry it.
	OutcomeNonDeterminism = "nondeterminism"

	// OutcomeRetry: the activity attempt failed and River will retry it.
	OutcomeRetry = "retry"
)

// Names of span events.
const (
	// EventLeaseExpired: the attempt's lease expired without renewal and the
	// job was recovered for a new attempt. On the stale attempt's span when
	// this process runs it, and on the recovering attempt's span.
	EventLeaseExpired = "weir.lease_expired"

	// EventLeaseLost: a renewal found that a newer attempt holds the job; the
	// attempt's context was cancelled.
	EventLeaseLost = "weir.lease_lost"

	// EventNonDeterminism: replayed workflow code did not match history.
	EventNonDeterminism = "weir.nondeterminism"

	// EventStaleWriteRejected: a write by the attempt was rejected because it
	// no longer held the job.
	EventStaleWriteRejected = "weir.stale_write_rejected"
)
