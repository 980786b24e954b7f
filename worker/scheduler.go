package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/schedule"
)

// schedulerMaxSleep bounds the scheduler's sleep, so schedules created or
// resumed elsewhere are noticed soon.
const schedulerMaxSleep = time.Second

// scheduler starts the runs of due schedules. Every worker runs one: a due
// schedule's row is locked (SKIP LOCKED) by the worker that starts it, and
// the start's request ID comes from the due time, so a due time starts at
// most one run however many workers compete.
type scheduler struct {
	w *Worker

	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	clients map[string]*client.Client // by namespace
}

func newScheduler(w *Worker) *scheduler {
	return &scheduler{clients: map[string]*client.Client{}, w: w}
}

func (s *scheduler) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			sleep, err := s.tick(ctx)
			if err != nil && ctx.Err() == nil {
				s.w.config.Logger.WarnContext(ctx, "weir: starting scheduled runs failed", slog.String("error", err.Error()))
				sleep = schedulerMaxSleep
			}
			timer := time.NewTimer(max(min(sleep, schedulerMaxSleep), time.Millisecond))
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
			timer.Stop()
		}
	}()
}

func (s *scheduler) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.clients {
		_ = c.Close()
	}
}

func (s *scheduler) client(namespace string) (*client.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[namespace]; ok {
		return c, nil
	}
	c, err := client.New(s.w.pool, &client.Config{
		Codec: s.w.config.Codec, Logger: s.w.config.Logger, Namespace: namespace, Schema: s.w.config.Schema,
	})
	if err != nil {
		return nil, err
	}
	s.clients[namespace] = c
	return c, nil
}

type dueSchedule struct {
	namespace, id string
}

// tick starts what is due and returns how long to sleep.
func (s *scheduler) tick(ctx context.Context) (time.Duration, error) {
	names := s.w.names
	rows, err := s.w.pool.Query(ctx, "SELECT namespace, schedule_id FROM "+names.Schedule+
		" WHERE NOT paused AND (next_run_at <= now() OR buffered_due_at IS NOT NULL) ORDER BY next_run_at LIMIT 100")
	if err != nil {
		return 0, fmt.Errorf("finding due schedules: %w", err)
	}
	due, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (dueSchedule, error) {
		var d dueSchedule
		err := row.Scan(&d.namespace, &d.id)
		return d, err
	})
	if err != nil {
		return 0, fmt.Errorf("finding due schedules: %w", err)
	}
	for _, d := range due {
		if err := s.fire(ctx, d); err != nil {
			return 0, fmt.Errorf("schedule %s: %w", d.id, err)
		}
	}
	var next *time.Time
	var now time.Time
	if err := s.w.pool.QueryRow(ctx, "SELECT min(next_run_at), now() FROM "+names.Schedule+" WHERE NOT paused").Scan(&next, &now); err != nil {
		return 0, fmt.Errorf("finding the next due schedule: %w", err)
	}
	if next == nil {
		return schedulerMaxSleep, nil
	}
	return next.Sub(now), nil
}

// fire handles one schedule under its row lock: a due start (subject to the
// overlap policy and jitter), or a start buffered until the last run closed.
func (s *scheduler) fire(ctx context.Context, d dueSchedule) error {
	names := s.w.names
	return pgx.BeginFunc(ctx, s.w.pool, func(tx pgx.Tx) error {
		var (
			cron, kind, queue, policy, timeZone string
			every, jitter                       int64
			anchor, now                         time.Time
			nextRunAt, bufferedDueAt            *time.Time
			args                                json.RawMessage
			lastRunID                           *uuid.UUID
			paused                              bool
		)
		err := tx.QueryRow(ctx, "SELECT coalesce(cron, ''), coalesce(extract(epoch FROM every) * 1000000, 0)::bigint,"+
			" (extract(epoch FROM jitter) * 1000000)::bigint, time_zone, anchor, workflow_kind, workflow_args, queue, overlap_policy,"+
			" paused, next_run_at, buffered_due_at, last_run_id, now() FROM "+names.Schedule+
			" WHERE namespace = $1 AND schedule_id = $2 FOR UPDATE SKIP LOCKED", d.namespace, d.id).Scan(
			&cron, &every, &jitter, &timeZone, &anchor, &kind, &args, &queue, &policy, &paused, &nextRunAt, &bufferedDueAt, &lastRunID, &now)
		if errors.Is(err, pgx.ErrNoRows) || paused {
			return nil // another worker has it, or it was deleted or paused
		}
		if err != nil {
			return err
		}
		spec := &schedule.Spec{Cron: cron, Every: time.Duration(every) * time.Microsecond, Jitter: time.Duration(jitter) * time.Microsecond, TimeZone: timeZone}

		lastRunning := false
		if lastRunID != nil {
			// Running: the last run, or a run it continued as.
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+names.Run+" WHERE namespace = $2 AND state = 'running'"+
				" AND workflow_id = (SELECT workflow_id FROM "+names.Run+" WHERE run_id = $1))",
				*lastRunID, d.namespace).Scan(&lastRunning); err != nil {
				return err
			}
		}
		c, err := s.client(d.namespace)
		if err != nil {
			return err
		}
		start := func(due time.Time) error {
			run, err := c.StartTx(ctx, tx, client.RawArgs{JSON: args, KindName: kind}, &client.StartOpts{
				Queue: queue, RequestID: client.ScheduleRequestID(d.id, due), WorkflowID: client.ScheduleWorkflowID(d.id, due),
			})
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, "UPDATE "+names.Schedule+" SET last_due_at = $3, last_run_id = $4, last_workflow_id = $5, updated_at = now()"+
				" WHERE namespace = $1 AND schedule_id = $2", d.namespace, d.id, due, run.RunID, run.WorkflowID)
			return err
		}

		// A start buffered behind a running run goes once that run closed.
		if bufferedDueAt != nil && !lastRunning {
			if err := start(*bufferedDueAt); err != nil {
				return err
			}
			lastRunning = true
			if _, err := tx.Exec(ctx, "UPDATE "+names.Schedule+" SET buffered_due_at = NULL WHERE namespace = $1 AND schedule_id = $2",
				d.namespace, d.id); err != nil {
				return err
			}
		}

		if nextRunAt == nil || nextRunAt.After(now) {
			return nil
		}
		due := *nextRunAt
		if now.Before(due.Add(spec.JitterFor(d.id, due))) {
			return nil // due, but its jitter has not passed yet
		}
		switch {
		case !lastRunning || client.OverlapPolicy(policy) == client.OverlapAllowAll:
			if err := start(due); err != nil {
				return err
			}
		case client.OverlapPolicy(policy) == client.OverlapBufferOne:
			if _, err := tx.Exec(ctx, "UPDATE "+names.Schedule+" SET buffered_due_at = coalesce(buffered_due_at, $3)"+
				" WHERE namespace = $1 AND schedule_id = $2", d.namespace, d.id, due); err != nil {
				return err
			}
		default: // skip
		}

		// The next due time after this one; due times missed while no worker
		// ran are skipped (BackfillSchedule starts them on demand).
		next, err := spec.Next(anchor, due)
		if err != nil {
			return err
		}
		if next.Before(now) {
			if next, err = spec.Next(anchor, now); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, "UPDATE "+names.Schedule+" SET next_run_at = $3, updated_at = now() WHERE namespace = $1 AND schedule_id = $2",
			d.namespace, d.id, next)
		return err
	})
}
