package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/store"
)

// WorkerInfo is a live worker as it last announced itself (weir_worker):
// what it serves in one namespace.
type WorkerInfo struct {
	// ActivityKinds are the activity kinds (and plain River job kinds) it
	// registered, sorted.
	ActivityKinds []string

	// ExpiresAt is when it counts as gone unless it announces itself again.
	ExpiresAt time.Time

	// ID identifies the worker while its process runs; a restart is a new
	// worker.
	ID uuid.UUID

	// Identity names the worker for people ("pid@host" by default).
	Identity string

	// LastSeenAt is its last announcement.
	LastSeenAt time.Time

	// Namespace is the namespace it serves (a worker serving several has a
	// WorkerInfo for each).
	Namespace string

	// Queues are the River queues it serves, sorted.
	Queues []string

	// StartedAt is when it first announced itself.
	StartedAt time.Time

	// WorkflowKinds are the workflow kinds it registered, sorted.
	WorkflowKinds []string
}

// ListWorkers returns the live workers of the client's namespace, newest
// first. Workers announce themselves every worker.Config.AnnounceInterval
// and count as live for a few intervals after their last announcement.
func (c *Client) ListWorkers(ctx context.Context) ([]*WorkerInfo, error) {
	var workers []*WorkerInfo
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		workers, err = store.ListWorkers[WorkerInfo](ctx, c.store, tx, c.config.Namespace)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("weir: listing workers: %w", err)
	}
	return workers, nil
}

// TaskWorkers says whether live workers serve a running run's workflow
// tasks: workers of the run's namespace polling its queue with its workflow
// kind registered. A run no worker serves waits, with nothing in its
// history, until one does.
type TaskWorkers struct {
	// Kind, Namespace and Queue are the run's workflow kind, namespace and
	// task queue.
	Kind      string
	Namespace string
	Queue     string

	// OnQueue counts the live workers polling the queue, whatever kinds
	// they registered.
	OnQueue int

	// Serving counts the live workers polling the queue with the kind
	// registered.
	Serving int
}

// Problem is a sentence saying why no live worker serves the run, or ""
// when one does.
func (t *TaskWorkers) Problem() string {
	switch {
	case t == nil || t.Serving > 0:
		return ""
	case t.OnQueue == 0:
		return fmt.Sprintf("No live worker serves queue %q%s: the run waits until a worker that registers workflow %s polls it.",
			t.Queue, t.inNamespace(), t.Kind)
	default:
		workers := "worker serves"
		if t.OnQueue > 1 {
			workers = "workers serve"
		}
		return fmt.Sprintf("%d live %s queue %q%s, but none registers workflow %s: the run waits until one does.",
			t.OnQueue, workers, t.Queue, t.inNamespace(), t.Kind)
	}
}

// inNamespace names the namespace in Problem's sentence, unless it is the
// default one.
func (t *TaskWorkers) inNamespace() string {
	if t.Namespace == NamespaceDefault || t.Namespace == "" {
		return ""
	}
	return fmt.Sprintf(" in namespace %s", t.Namespace)
}

// taskWorkers counts the live workers serving a run's tasks.
func (c *Client) taskWorkers(ctx context.Context, tx pgx.Tx, namespace, queue, kind string) (*TaskWorkers, error) {
	t := &TaskWorkers{Kind: kind, Namespace: namespace, Queue: queue}
	var err error
	t.OnQueue, t.Serving, err = c.store.CountTaskWorkers(ctx, tx, store.CountTaskWorkersParams{Namespace: namespace, Queue: queue, Kind: kind})
	if err != nil {
		return nil, fmt.Errorf("counting the workers of queue %s: %w", queue, err)
	}
	return t, nil
}

// TaskFailure is the last failure of a running run's workflow task, while
// the task retries: workflow code that panicked or returned a
// non-determinism error, a deadlock, a failing commit. The run's history
// does not record it (the task's retries would grow it); River keeps it with
// the task's job.
type TaskFailure struct {
	// At is when the attempt failed.
	At time.Time

	// Attempt is the task attempt that failed (1 is the first).
	Attempt int

	// JobID is the River job of the task.
	JobID int64

	// Message is the error's first line.
	Message string

	// NextAttemptAt is when the task runs again, if it is scheduled.
	NextAttemptAt *time.Time

	// Stack is the stack trace of workflow code that panicked, if it did.
	Stack string
}

// taskFailure reads the last error of a running run's task job, if the job
// has one; nil otherwise.
func (c *Client) taskFailure(ctx context.Context, tx pgx.Tx, jobID int64) (*TaskFailure, error) {
	last, err := c.store.LastJobFailure(ctx, tx, jobID)
	switch {
	case err == pgx.ErrNoRows: //nolint:errorlint // pgx returns the sentinel itself
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading the failure of task job %d: %w", jobID, err)
	}
	f := &TaskFailure{At: last.At, Attempt: last.Attempt, JobID: jobID}
	f.Message, f.Stack, _ = strings.Cut(last.Error, "\n")
	if f.Stack == "" {
		f.Stack = last.Trace
	}
	if last.State == "retryable" || last.State == "scheduled" || last.State == "available" {
		f.NextAttemptAt = &last.ScheduledAt
	}
	return f, nil
}
