package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/inbox"
	"github.com/weirhq/weir/internal/store"
)

// sweepBatch bounds the rows one sweep handles per kind of repair.
const sweepBatch = 500

// sweeper repairs what no writer could: runs whose inbox has rows but no task
// is queued (the task job was deleted or cancelled by hand), and activities
// whose job ended without writing an outcome (a plain River worker, a discard
// by a rescuer or reaper, a job deleted by hand). Every repair takes the run
// row's lock, like any inbox writer, so it cannot race a task.
//
// Any worker's sweep repairs every run of the schema, so the workers share
// the sweeping: each sweeps at start, then waits sweepDelay between sweeps,
// and the fleet sweeps about once per Config.SweepInterval.
type sweeper struct {
	background
	w *Worker

	// swept receives the number of repairs after every sweep, when set.
	swept chan int
}

func newSweeper(w *Worker) *sweeper { return &sweeper{w: w} }

func (s *sweeper) loop(ctx context.Context) {
	for {
		n, err := s.sweep(ctx)
		if err != nil && ctx.Err() == nil {
			s.w.config.Logger.WarnContext(ctx, "weir: sweep failed", slog.String("error", err.Error()))
		}
		if s.swept != nil {
			select {
			case s.swept <- n:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.wait()):
		}
	}
}

// wait is how long the sweeper waits before its next sweep: sweepDelay of
// Config.SweepInterval and the live workers as last announced.
func (s *sweeper) wait() time.Duration {
	return sweepDelay(s.w.config.SweepInterval, s.w.liveWorkers.Load(), rand.Int64N)
}

// sweepDelay is one worker's wait between sweeps when live workers (at least
// 1, whatever live says) share the sweeping: interval × live (at most
// sweepDelayLongest) times a jitter in [0.75, 1.25), so that workers started
// together do not sweep together. random returns a number in [0, n), like
// rand.Int64N; the jitter is uniform if it is.
func sweepDelay(interval time.Duration, live int64, random func(n int64) int64) time.Duration {
	share := time.Duration(sweepDelayLongest)
	if live = max(live, 1); interval < share/time.Duration(live) {
		share = interval * time.Duration(live)
	}
	return share - share/4 + time.Duration(random(max(int64(share/2), 1)))
}

// sweepDelayLongest bounds the share sweepDelay jitters, so that its result
// cannot overflow.
const sweepDelayLongest = math.MaxInt64 / 2

// sweep runs one pass and returns how many repairs it made.
func (s *sweeper) sweep(ctx context.Context) (int, error) {
	repaired := 0
	for _, repair := range []func(context.Context) (int, error){
		s.resolveEndedActivities, s.timeOutActivities, s.requeueStrandedRuns, s.deleteExpired,
	} {
		n, err := repair(ctx)
		if repaired += n; err != nil {
			return repaired, err
		}
	}
	return repaired, nil
}

// deleteExpired deletes closed runs past their namespace's retention, with
// their history and every other row of theirs, a batch at a time in a
// transaction (SKIP LOCKED lets every worker's sweeper share the work), and
// queries whose asker gave up and did not delete them. They are not
// repairs: it returns 0.
func (s *sweeper) deleteExpired(ctx context.Context) (int, error) {
	if s.w.config.Retention >= 0 {
		err := pgx.BeginFunc(ctx, s.w.pool, func(tx pgx.Tx) error {
			_, err := s.w.store.ExpireRuns(ctx, tx, s.w.config.Retention, sweepBatch)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("deleting runs past retention: %w", err)
		}
	}
	if err := s.w.store.DeleteExpiredQueries(ctx, s.w.pool); err != nil {
		return 0, fmt.Errorf("deleting expired queries: %w", err)
	}
	return 0, nil
}

// timeOutActivities ends activities past their schedule-to-close deadline:
// the workflow gets ActivityTimedOut and the job is cancelled (a running
// attempt sees its context cancelled; whatever it reports later is dropped).
func (s *sweeper) timeOutActivities(ctx context.Context) (int, error) {
	due, err := s.w.store.TimedOutActivities(ctx, s.w.pool, sweepBatch)
	if err != nil {
		return 0, fmt.Errorf("finding timed-out activities: %w", err)
	}
	what := func(a store.TimedOutActivity) string {
		return fmt.Sprintf("timing out activity %d of run %s", a.ScheduledEventID, a.RunID)
	}
	return eachInTx(ctx, s, due, what, func(ctx context.Context, tx pgx.Tx, a store.TimedOutActivity) (bool, error) {
		attrs, err := json.Marshal(&history.ActivityTimedOutAttributes{
			Attempt: a.Attempt, ScheduledEventID: a.ScheduledEventID, TimeoutType: history.TimeoutScheduleToClose,
		})
		if err != nil {
			return false, err
		}
		added, err := inbox.Deliver(ctx, tx, s.w.store, s.w.riverClient, a.RunID, &inbox.Item{
			Attributes: attrs, DedupKey: inbox.ActivityKey(a.ScheduledEventID), Type: string(history.EventActivityTimedOut),
		})
		if !added || err != nil {
			return false, ignoreClosed(err)
		}
		if _, err := s.w.riverClient.JobCancelTx(ctx, tx, a.JobID); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
			return false, fmt.Errorf("cancelling job %d: %w", a.JobID, err)
		}
		return true, nil
	})
}

func (s *sweeper) resolveEndedActivities(ctx context.Context) (int, error) {
	ended, err := s.w.store.EndedActivities(ctx, s.w.pool, nil, sweepBatch)
	if err != nil {
		return 0, fmt.Errorf("finding ended activities: %w", err)
	}
	what := func(a store.EndedActivity) string {
		return fmt.Sprintf("resolving activity %d of run %s", a.ScheduledEventID, a.RunID)
	}
	return eachInTx(ctx, s, ended, what, func(ctx context.Context, tx pgx.Tx, a store.EndedActivity) (bool, error) {
		// Re-check under the run lock (taken here, before the check;
		// Deliver takes it again): a task may have retired the activity
		// since the scan, and one still running holds the lock until it
		// has. Two statements: the check needs a snapshot taken after the
		// lock is granted.
		if pending, err := s.w.store.LockRunActivityPending(ctx, tx, a.ActivityRef); err != nil || !pending {
			return false, err
		}
		added, err := s.w.deliverEnded(ctx, tx, &a)
		if errors.Is(err, inbox.ErrRunClosed) {
			return false, s.w.store.DeleteActivity(ctx, tx, a.ActivityRef)
		}
		return added, err
	})
}

// eachInTx runs repair on each of items, each in a transaction of its own,
// and counts the repairs made; what names an item in an error.
func eachInTx[T any](ctx context.Context, s *sweeper, items []T, what func(T) string,
	repair func(ctx context.Context, tx pgx.Tx, item T) (bool, error),
) (int, error) {
	repaired := 0
	for _, item := range items {
		var did bool
		err := pgx.BeginFunc(ctx, s.w.pool, func(tx pgx.Tx) (err error) {
			did, err = repair(ctx, tx, item)
			return err
		})
		if err != nil {
			return repaired, fmt.Errorf("%s: %w", what(item), err)
		}
		if did {
			repaired++
		}
	}
	return repaired, nil
}

// ignoreClosed is err, unless it says that the run closed.
func ignoreClosed(err error) error {
	if errors.Is(err, inbox.ErrRunClosed) {
		return nil
	}
	return err
}

// onFinalized turns activity jobs that just ended (in tx, River's own state
// write) into their activities' outcomes. Only jobs with a pending activity
// count; an outcome already delivered (weir's own activity workers write it
// before completing) is left as it is.
func (w *Worker) onFinalized(ctx context.Context, tx pgx.Tx, schema string, jobIDs []int64) error {
	if schema != w.names.Schema {
		return nil
	}
	if len(jobIDs) == 1 && jobIDs[0] == settledJob(ctx) {
		return nil // its own worker settled it: a task, or an activity that delivered its outcome
	}
	ended, err := w.store.EndedActivities(ctx, tx, jobIDs, sweepBatch)
	if err != nil {
		return fmt.Errorf("finding activities of finalized jobs: %w", err)
	}
	for _, a := range ended {
		if _, err := w.deliverEnded(ctx, tx, &a); ignoreClosed(err) != nil {
			return err
		}
	}
	return nil
}

// deliverEnded delivers the outcome of an activity whose job ended on its
// own to its run (inbox.Deliver).
func (w *Worker) deliverEnded(ctx context.Context, tx pgx.Tx, a *store.EndedActivity) (added bool, err error) {
	eventType, attrs, err := outcomeOfEndedJob(a)
	if err != nil {
		return false, err
	}
	return inbox.Deliver(ctx, tx, w.store, w.riverClient, a.RunID, &inbox.Item{
		Attributes: attrs, DedupKey: inbox.ActivityKey(a.ScheduledEventID), Type: string(eventType),
	})
}

// outcomeOfEndedJob is the outcome of an activity whose job ended on its own.
func outcomeOfEndedJob(a *store.EndedActivity) (history.EventType, []byte, error) {
	var lastErr *rivertype.AttemptError // River's record of the last attempt's error that decodes
	for i := len(a.Errors) - 1; i >= 0 && lastErr == nil; i-- {
		if err := json.Unmarshal(a.Errors[i], &lastErr); err != nil {
			lastErr = nil
		}
	}
	var (
		eventType history.EventType
		attrs     any
	)
	switch {
	case a.State == nil:
		eventType = history.EventActivityFailed
		attrs = &history.ActivityFailedAttributes{Attempt: a.Attempt, ScheduledEventID: a.ScheduledEventID,
			Failure: history.Failure{Message: fmt.Sprintf("the activity's job %d was deleted", a.JobID), NonRetryable: true, Type: "JobDeleted"}}
	case *a.State == "completed":
		// A plain River worker: it returns no result.
		eventType = history.EventActivityCompleted
		attrs = &history.ActivityCompletedAttributes{Attempt: a.Attempt, Result: []byte("null"), ScheduledEventID: a.ScheduledEventID}
	case *a.State == "cancelled" && (lastErr == nil || a.CancelRequested):
		// Cancelled on request (by the workflow, or by hand in River UI).
		eventType = history.EventActivityCanceled
		attrs = &history.ActivityCanceledAttributes{Attempt: a.Attempt, ScheduledEventID: a.ScheduledEventID}
	default: // discarded, or cancelled by the worker with an error
		eventType = history.EventActivityFailed
		failure := history.Failure{Message: fmt.Sprintf("the activity's job %d ended %s", a.JobID, *a.State), NonRetryable: true, Type: "JobFailed"}
		if lastErr != nil {
			failure.Message, failure.Stack = lastErr.Error, lastErr.Trace
		}
		attrs = &history.ActivityFailedAttributes{Attempt: a.Attempt, Failure: failure, ScheduledEventID: a.ScheduledEventID}
	}
	data, err := json.Marshal(attrs)
	return eventType, data, err
}

// requeueStrandedRuns queues a task for live runs that need one and have no
// usable task: none recorded while inbox rows wait, or the recorded job is
// gone or ended without committing. So a workflow task never ends for good:
// even one discarded after exhausting its attempts is followed by a new one.
func (s *sweeper) requeueStrandedRuns(ctx context.Context) (int, error) {
	runIDs, err := s.w.store.StrandedRuns(ctx, s.w.pool, sweepBatch)
	if err != nil {
		return 0, fmt.Errorf("finding stranded runs: %w", err)
	}
	what := func(runID uuid.UUID) string { return "queueing a task of run " + runID.String() }
	return eachInTx(ctx, s, runIDs, what, func(ctx context.Context, tx pgx.Tx, runID uuid.UUID) (bool, error) {
		// The same condition as the scan, now under the run's lock.
		run, stranded, err := s.w.store.LockStrandedRun(ctx, tx, runID)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !stranded) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		s.w.config.Logger.WarnContext(ctx, "weir: queueing a task for a run that had none", slog.String("run_id", runID.String()))
		return true, inbox.QueueTask(ctx, tx, s.w.store, s.w.riverClient, run)
	})
}

type settledKey struct{}

// withSettled marks ctx as the completion of a job whose outcome its worker
// already took care of in the same transaction (a workflow task, or an
// activity that delivered its outcome), so onFinalized need not look it up.
func withSettled(ctx context.Context, jobID int64) context.Context {
	return context.WithValue(ctx, settledKey{}, jobID)
}

func settledJob(ctx context.Context) int64 {
	id, _ := ctx.Value(settledKey{}).(int64)
	return id
}
