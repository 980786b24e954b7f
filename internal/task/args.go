// Package task defines the River job that carries a workflow task: one job
// kind per namespace and workflow type ("weir.workflow:<namespace>/<kind>"),
// so a worker fetches only the tasks of the workflows it registered in the
// namespaces it serves (River's FetchOnlyKnownKinds).
package task

import (
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
)

// KindPrefix starts the River job kind of every workflow task; the
// namespace, a slash and the workflow's own kind follow it.
const KindPrefix = "weir.workflow:"

// QueueDefault is weir's default River queue: of workflow tasks started
// without a queue, of activities scheduled without one and of what a worker
// serves unless configured. It is not River's "default", so that an
// application's River client serving River's default queue (without
// FetchOnlyKnownKinds) never fetches weir's jobs, and weir's workers never
// fetch the application's.
const QueueDefault = "weir"

// MaxAttempts is the River max_attempts of workflow-task jobs. A failing
// workflow task retries with a backoff capped at RetryBackoffMax, so this
// many attempts span about three weeks; should a task still be discarded
// then, the worker's sweeper queues a new one for the run, so the run is never
// abandoned.
const MaxAttempts = 32000

// RetryBackoffMax caps the backoff between attempts of a failing workflow
// task, so a task that fails for a while (a bug fixed by a deploy, a worker
// that lacks a kind) resumes soon after the cause goes away.
const RetryBackoffMax = time.Minute

// Args are the args of a workflow-task job.
type Args struct {
	// RunID is the run the task advances.
	RunID uuid.UUID `json:"run_id"`

	// WorkflowID is there for people reading River UI.
	WorkflowID string `json:"workflow_id"`

	kind string // made once: River asks for it more than once per insert
}

// NewArgs returns the args of a task of a run of workflowKind in namespace.
func NewArgs(namespace, workflowKind string, runID uuid.UUID, workflowID string) Args {
	return Args{RunID: runID, WorkflowID: workflowID, kind: Kind(namespace, workflowKind)}
}

// Kind is the job kind of the task: see Kind.
func (a Args) Kind() string { return a.kind }

// Kind returns the River job kind of tasks of workflowKind in namespace.
func Kind(namespace, workflowKind string) string { return KindPrefix + namespace + "/" + workflowKind }

// InsertOpts are the River insert options of a task on queue. Tasks are never
// unique in River's sense: weir_run.task_job_id decides whether one is needed.
func InsertOpts(queue string) *river.InsertOpts {
	return &river.InsertOpts{MaxAttempts: MaxAttempts, Queue: queue}
}
