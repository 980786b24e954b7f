package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/handoff"
	"github.com/weirhq/weir/internal/task"
)

// Eager workflow start: a client in this process that starts a run of a
// workflow this worker serves, through the same pool, hands the run's first
// task to the worker (internal/handoff). The task's job is inserted in the
// start's transaction already running, claimed by this worker under a
// fenced lease, and the worker runs the task as soon as the start commits,
// on an eager slot, like an eagerly dispatched activity. The task completes
// its claimed job in its own transaction, fenced; a failed task is written
// back to River as retryable; if the worker dies, the lease expires and
// River runs the task elsewhere.

// firstTaskTaker takes the first tasks of one workflow kind for a worker.
type firstTaskTaker struct {
	tw *taskWorker
}

// Claim implements handoff.Taker.
func (t *firstTaskTaker) Claim(batch *pgx.Batch, key handoff.Key, spec *handoff.Task) (func(committed bool), bool, error) {
	w := t.tw.w
	if !w.eager.acquire() {
		return nil, false, nil
	}
	var claim *fencing.Claim
	err := w.driver.QueueClaim(batch, &fencing.ClaimParams{
		Args: spec.Args, AttemptedBy: w.riverClient.ID(), Kind: key.Kind, MaxAttempts: spec.MaxAttempts,
		Queue: key.Queue, Schema: w.config.Schema,
	}, func(c *fencing.Claim) { claim = c })
	if err != nil {
		w.eager.release(1)
		return nil, false, err
	}
	return func(committed bool) {
		if !committed || claim == nil {
			w.eager.release(1)
			return
		}
		w.launchEager([]eagerStart{{claim: claim, run: t.tw.runClaimed}})
	}, true, nil
}

// registerTakers makes the worker take the first tasks of its workflows,
// in every namespace and queue it serves, from clients of this process
// that share its pool; the returned func stops it.
func (w *Worker) registerTakers() (unregister func()) {
	var unregisters []func()
	for kind, def := range w.workflows {
		taker := &firstTaskTaker{tw: &taskWorker{def: def, w: w}}
		for _, namespace := range w.config.Namespaces {
			for queue := range w.config.Queues {
				key := handoff.Key{Pool: w.pool, Schema: w.names.Schema, Queue: queue, Kind: task.Kind(namespace, kind)}
				unregisters = append(unregisters, handoff.Register(key, taker))
			}
		}
	}
	return func() {
		for _, unregister := range unregisters {
			unregister()
		}
	}
}

// runClaimed runs a claimed attempt of a workflow task (eager start) as
// River's executor runs a fetched one: within the task timeout, its job
// completed in the task's transaction, or written back as retryable when
// the task fails.
func (t *taskWorker) runClaimed(ctx context.Context, claim *fencing.Claim, _ *activityMeta) {
	job := &river.Job[task.Args]{JobRow: claim.Job}
	decodeErr := json.Unmarshal(claim.Job.EncodedArgs, &job.Args)
	what := fmt.Sprintf("workflow task of run %s (job %d)", job.Args.RunID, job.ID)
	t.w.workClaimed(ctx, claim, what, t.w.config.TaskTimeout, func() time.Time { return t.NextRetry(job) }, func(ctx context.Context) error {
		if decodeErr != nil {
			return fmt.Errorf("decoding args of %s: %w", what, decodeErr)
		}
		return t.work(ctx, job, t.w.claimedJob(job.ID))
	})
}
