package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/inbox"
	"github.com/weirhq/weir/internal/lazytx"
	"github.com/weirhq/weir/internal/timer"
)

// startTimer inserts the River job that fires a TimerStarted event's timer,
// due at its fire time.
func (w *Worker) startTimer(ctx context.Context, tx pgx.Tx, run *runRow, runID uuid.UUID, e history.Event) error {
	attrs, err := history.Decode[*history.TimerStartedAttributes](e)
	if err != nil {
		return err
	}
	inserted, err := w.riverClient.InsertTx(ctx, tx, timer.Args{RunID: runID, StartedEventID: e.ID}, &river.InsertOpts{
		MaxAttempts: activityMaxAttemptsUnlimited, Queue: run.Queue, ScheduledAt: attrs.FireAt,
	})
	if err != nil {
		return fmt.Errorf("inserting timer of event %d: %w", e.ID, err)
	}
	// Available at once, due later: River fetches it as soon as it is due
	// and a fetch happens, which the timer waker triggers right then, instead
	// of waiting for River's scheduler (every 5 seconds) to promote it.
	if err := w.store.MakeJobAvailable(ctx, tx, inserted.Job.ID); err != nil {
		return fmt.Errorf("making timer of event %d fetchable: %w", e.ID, err)
	}
	return nil
}

// timerWaker makes River fetch durable timers the moment they are due: it
// sleeps until the next due timer and then sends River's own insert
// notification for the timer's queue, which wakes the queue's producers.
type timerWaker struct {
	background
	w    *Worker
	kick chan struct{}
}

// timerWakerMaxSleep bounds the waker's sleep, so timers other processes
// start are noticed soon too.
const timerWakerMaxSleep = time.Second

func newTimerWaker(w *Worker) *timerWaker {
	return &timerWaker{kick: make(chan struct{}, 1), w: w}
}

// poke tells the waker a timer may have been started.
func (t *timerWaker) poke() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

func (t *timerWaker) loop(ctx context.Context) {
	lastWake := time.Now().Add(-timerWakerMaxSleep)
	for ctx.Err() == nil {
		queue, due, now, err := t.w.store.NextAvailableJob(ctx, t.w.pool, timer.Kind, lastWake)
		sleep := timerWakerMaxSleep
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			if ctx.Err() == nil {
				t.w.config.Logger.WarnContext(ctx, "weir: timer waker failed", slog.String("error", err.Error()))
			}
		case !due.After(now):
			if err := t.w.notifyQueue(ctx, queue); err != nil && ctx.Err() == nil {
				t.w.config.Logger.WarnContext(ctx, "weir: timer waker failed to notify", slog.String("error", err.Error()))
			}
			lastWake = due
			continue
		default:
			sleep = min(due.Sub(now), timerWakerMaxSleep)
		}
		timer := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
		case <-t.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// notifyQueue sends River's insert notification for queue, as River's own
// insert does: producers of the queue fetch at once.
func (w *Worker) notifyQueue(ctx context.Context, queue string) error {
	payload, err := json.Marshal(map[string]string{"queue": queue})
	if err != nil {
		return err
	}
	return w.store.NotifyQueue(ctx, w.pool, payload)
}

// cancelJobs cancels the River jobs of activities and timers a task
// cancelled. A running activity sees its context cancelled; its outcome, if
// any still comes, is dropped.
func (w *Worker) cancelJobs(ctx context.Context, tx pgx.Tx, runID uuid.UUID, activities, timers []int64) error {
	for _, scheduledEventID := range activities {
		jobID, err := w.store.ActivityJob(ctx, tx, runID, scheduledEventID)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return fmt.Errorf("finding job of activity %d: %w", scheduledEventID, err)
		}
		if _, err := w.riverClient.JobCancelTx(ctx, tx, jobID); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
			return fmt.Errorf("cancelling job %d of activity %d: %w", jobID, scheduledEventID, err)
		}
	}
	for _, startedEventID := range timers {
		match, err := json.Marshal(timer.Args{RunID: runID, StartedEventID: startedEventID})
		if err != nil {
			return err
		}
		jobIDs, err := w.store.UnfinishedJobs(ctx, tx, timer.Kind, match)
		if err != nil {
			return fmt.Errorf("finding job of timer %d: %w", startedEventID, err)
		}
		for _, jobID := range jobIDs {
			if _, err := w.riverClient.JobCancelTx(ctx, tx, jobID); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
				return fmt.Errorf("cancelling job %d of timer %d: %w", jobID, startedEventID, err)
			}
		}
	}
	return nil
}

// timerWorker fires durable timers. Every worker serves it.
type timerWorker struct {
	river.WorkerDefaults[timer.Args]

	w *Worker
}

// NextRetry retries a timer that failed to fire (its worker lost its lease,
// the database was unreachable) within task.RetryBackoffMax: every attempt
// that lost its lease counts, and River's own backoff after four of them
// would fire the timer minutes late.
func (t *timerWorker) NextRetry(job *river.Job[timer.Args]) time.Time {
	return engineRetry(job.Attempt)
}

func (t *timerWorker) Work(ctx context.Context, job *river.Job[timer.Args]) error {
	attrs, err := json.Marshal(&history.TimerFiredAttributes{StartedEventID: job.Args.StartedEventID})
	if err != nil {
		return err
	}
	return lazytx.BeginFunc(ctx, t.w.pool, func(tx pgx.Tx) error {
		_, err := inbox.Deliver(ctx, tx, t.w.store, t.w.riverClient, job.Args.RunID, &inbox.Item{
			Attributes: attrs,
			DedupKey:   fmt.Sprintf("timer:%d", job.Args.StartedEventID),
			Type:       string(history.EventTimerFired),
		})
		if err != nil && !errors.Is(err, inbox.ErrRunClosed) {
			return err
		}
		_, err = fencing.CompleteTx[*fencing.Driver](ctx, tx, job)
		return err
	})
}
