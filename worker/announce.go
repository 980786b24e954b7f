package worker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/weirhq/weir/internal/store"
)

// announcer keeps the worker's rows in weir_worker: one per namespace it
// serves, saying what it serves, upserted every Config.AnnounceInterval and
// live until AnnounceExpiry intervals after the last upsert. Readers (describe,
// the CLI, the UI) count the live rows that serve a run's queue and kind.
type announcer struct {
	background
	w  *Worker
	id uuid.UUID

	activityKinds []string
	queues        []string
	workflowKinds []string
}

// announceForgetAfter is how long after it expired a dead worker's row is
// deleted (by any worker's announcer).
const announceForgetAfter = time.Hour

func newAnnouncer(w *Worker) *announcer {
	return &announcer{
		w:             w,
		id:            uuid.New(),
		activityKinds: append([]string{}, slices.Sorted(maps.Keys(w.activities))...), // never NULL
		queues:        append([]string{}, slices.Sorted(maps.Keys(w.config.Queues))...),
		workflowKinds: append([]string{}, slices.Sorted(maps.Keys(w.workflows))...),
	}
}

// start announces the worker once, then keeps announcing it until stop.
func (a *announcer) start(ctx context.Context) {
	a.announce(ctx)
	a.run(a.loop)
}

func (a *announcer) loop(ctx context.Context) {
	ticker := time.NewTicker(a.w.config.AnnounceInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.w.config.AnnounceInterval)
			a.announce(ctx)
			cancel()
		}
	}
}

// announce upserts the worker's rows and deletes long-dead workers' rows.
func (a *announcer) announce(ctx context.Context) {
	interval := a.w.config.AnnounceInterval
	err := a.w.store.Announce(ctx, a.w.pool, store.AnnounceParams{
		ID: a.id, Namespaces: a.w.config.Namespaces, Identity: a.w.config.Identity, Queues: a.queues,
		WorkflowKinds: a.workflowKinds, ActivityKinds: a.activityKinds,
		Interval: interval, Expiry: AnnounceExpiry * interval, ForgetAfter: announceForgetAfter,
	})
	if err != nil {
		a.w.config.Logger.WarnContext(ctx, "weir: announcing the worker failed; it retries at the next interval", slog.String("error", err.Error()))
	}
}

// stop ends the announcements and deletes the worker's rows: it no longer
// serves anything.
func (a *announcer) stop(ctx context.Context) {
	if a == nil {
		return
	}
	a.background.stop()
	if err := a.w.store.WithdrawWorker(ctx, a.w.pool, a.id); err != nil {
		a.w.config.Logger.WarnContext(ctx, "weir: withdrawing the worker's announcement failed; it expires on its own", slog.String("error", err.Error()))
	}
}

// defaultIdentity names this process for people: "pid@host".
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%d@%s", os.Getpid(), host)
}
