// Package history defines the events of a workflow run's history: their
// types, their typed attributes and how those attributes are encoded.
//
// A run's history is an append-only, gap-free list of events numbered 1, 2, 3…
// It always begins with WorkflowStarted. After that it is a sequence of
// workflow tasks, each written by one commit:
//
//	inputs…  WorkflowTaskStarted  commands…
//
// Inputs are outcomes that arrived from outside (ActivityCompleted,
// ActivityFailed, ActivityTimedOut, ActivityCanceled, TimerFired,
// SignalReceived, CancelRequested). WorkflowTaskStarted is the task boundary:
// it records the time the task saw, and it marks the exact point at which the
// inputs before it were delivered to workflow code. Commands are what the
// workflow code decided in that task (ActivityScheduled,
// ActivityCancelRequested, TimerStarted, TimerCanceled, MarkerRecorded, and
// one of WorkflowCompleted, WorkflowFailed, WorkflowCanceled or
// WorkflowContinuedAsNew to end the run).
//
// Attributes are stored as JSON (jsonb in weir_event.attributes). Every
// attribute struct implements [Attributes]; use [NewEvent] to encode one and
// [Decode] or [DecodeAttributes] to read it back. Decoding never trusts its
// input: it rejects unknown event types and attributes that are missing a
// required field.
package history
