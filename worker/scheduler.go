package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/schedule"
	"github.com/weirhq/weir/internal/store"
)

// schedulerMaxSleep bounds the scheduler's sleep, so schedules created or
// resumed elsewhere are noticed soon.
const schedulerMaxSleep = time.Second

// scheduler starts the runs of due schedules. Every worker runs one: a due
// schedule's row is locked (SKIP LOCKED) by the worker that starts it, and
// the start's request ID comes from the due time, so a due time starts at
// most one run however many workers compete.
type scheduler struct {
	background
	w *Worker

	mu      sync.Mutex
	clients map[string]*client.Client // by namespace
}

func newScheduler(w *Worker) *scheduler {
	return &scheduler{clients: map[string]*client.Client{}, w: w}
}

func (s *scheduler) loop(ctx context.Context) {
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
}

func (s *scheduler) stop() {
	s.background.stop()
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

// tick starts what is due and returns how long to sleep.
func (s *scheduler) tick(ctx context.Context) (time.Duration, error) {
	due, err := s.w.store.DueSchedules(ctx, s.w.pool)
	if err != nil {
		return 0, fmt.Errorf("finding due schedules: %w", err)
	}
	for _, d := range due {
		if err := s.fire(ctx, d); err != nil {
			return 0, fmt.Errorf("schedule %s: %w", d.ID, err)
		}
	}
	next, now, err := s.w.store.NextDueSchedule(ctx, s.w.pool)
	if err != nil {
		return 0, fmt.Errorf("finding the next due schedule: %w", err)
	}
	if next == nil {
		return schedulerMaxSleep, nil
	}
	return next.Sub(now), nil
}

// fire handles one schedule under its row lock: a due start (subject to the
// overlap policy and jitter), or a start buffered until the last run closed.
func (s *scheduler) fire(ctx context.Context, d store.ScheduleKey) error {
	return pgx.BeginFunc(ctx, s.w.pool, func(tx pgx.Tx) error {
		sc, err := s.w.store.GetSchedule(ctx, tx, d, store.SkipLocked)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && sc.Paused) {
			return nil // another worker has it, or it was deleted or paused
		}
		if err != nil {
			return err
		}
		if err := s.advance(ctx, tx, sc); err != nil {
			return err
		}
		return s.w.store.SaveSchedule(ctx, tx, sc)
	})
}

// advance starts what is due of sc in tx and moves sc on past it.
func (s *scheduler) advance(ctx context.Context, tx pgx.Tx, sc *store.Schedule) error {
	lastRunning := false
	if sc.LastRunID != nil {
		var err error // running: the last run, or a run it continued as
		if lastRunning, err = s.w.store.WorkflowRunning(ctx, tx, sc.Namespace, *sc.LastRunID); err != nil {
			return err
		}
	}
	c, err := s.client(sc.Namespace)
	if err != nil {
		return err
	}
	start := func(due time.Time) error {
		run, err := c.StartTx(ctx, tx, client.RawArgs{JSON: sc.WorkflowArgs, KindName: sc.WorkflowKind}, &client.StartOpts{
			Queue: sc.Queue, RequestID: client.ScheduleRequestID(sc.ID, due), WorkflowID: client.ScheduleWorkflowID(sc.ID, due),
		})
		if err == nil {
			sc.LastDueAt, sc.LastRunID, sc.LastWorkflowID = &due, &run.RunID, run.WorkflowID
		}
		return err
	}

	// A start buffered behind a running run goes once that run closed.
	if sc.BufferedDueAt != nil && !lastRunning {
		if err := start(*sc.BufferedDueAt); err != nil {
			return err
		}
		lastRunning, sc.BufferedDueAt = true, nil
	}

	now := sc.Now
	if sc.NextRunAt == nil || sc.NextRunAt.After(now) {
		return nil
	}
	due := *sc.NextRunAt
	spec := &schedule.Spec{Cron: sc.Cron, Every: sc.Every, Jitter: sc.Jitter, TimeZone: sc.TimeZone}
	if now.Before(due.Add(spec.JitterFor(sc.ID, due))) {
		return nil // due, but its jitter has not passed yet
	}
	switch policy := client.OverlapPolicy(sc.OverlapPolicy); {
	case !lastRunning || policy == client.OverlapAllowAll:
		if err := start(due); err != nil {
			return err
		}
	case policy == client.OverlapBufferOne && sc.BufferedDueAt == nil:
		sc.BufferedDueAt = &due
	default: // skip, or one start is buffered already
	}

	// The next due time after this one; due times missed while no worker
	// ran are skipped (BackfillSchedule starts them on demand).
	next, err := spec.Next(sc.Anchor, due)
	if err == nil && next.Before(now) {
		next, err = spec.Next(sc.Anchor, now)
	}
	sc.NextRunAt = &next
	return err
}
