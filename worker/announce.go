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
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/store"
)

// announcer keeps the worker's rows in weir_worker: one per namespace it
// serves, saying what it serves, upserted every Config.AnnounceInterval and
// live until AnnounceExpiry intervals after the last upsert. Readers (describe,
// the CLI, the UI) count the live rows that serve a run's queue and kind.
//
// It also tells the step groups' limiter (limit.Limiter.Share) and the
// sweeper how many workers share the database: at each announcement, and
// whenever a worker starts or stops, which each announces on WorkerChannel.
// Its listener for that channel also wakes the query responder.
type announcer struct {
	background
	w        *Worker
	id       uuid.UUID
	channels struct{ worker, query string }
	recounts chan struct{} // a worker started or stopped

	activityKinds []string
	queues        []string
	workflowKinds []string
}

// announceForgetAfter is how long after it expired a dead worker's row is
// deleted (by any worker's announcer).
const announceForgetAfter = time.Hour

func newAnnouncer(w *Worker) *announcer {
	a := &announcer{
		w:             w,
		id:            uuid.New(),
		recounts:      make(chan struct{}, 1),
		activityKinds: append([]string{}, slices.Sorted(maps.Keys(w.activities))...), // never NULL
		queues:        append([]string{}, slices.Sorted(maps.Keys(w.config.Queues))...),
		workflowKinds: append([]string{}, slices.Sorted(maps.Keys(w.workflows))...),
	}
	a.channels.worker = dbschema.Channel(w.names.Schema, dbschema.WorkerChannel)
	a.channels.query = dbschema.Channel(w.names.Schema, dbschema.QueryChannel)
	return a
}

// start announces the worker once, tells the other workers, then keeps
// announcing it until stop.
func (a *announcer) start(ctx context.Context) {
	a.announce(ctx)
	a.w.notifier.Notify(a.channels.worker, a.id.String())
	a.run(a.loop)
}

func (a *announcer) loop(ctx context.Context) {
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		a.listen(ctx)
	}()
	defer func() { <-listening }()
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
		case <-a.recounts:
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.w.config.AnnounceInterval)
			a.recount(ctx)
			cancel()
		}
	}
}

// listen follows the workers that start or stop, and the queries asked.
func (a *announcer) listen(ctx context.Context) {
	channels := []string{a.channels.worker}
	if a.w.queries != nil {
		channels = append(channels, a.channels.query)
	}
	a.w.listen(ctx, "listener of workers and queries lost its connection; queries are polled meanwhile",
		func(context.Context, *pgx.Conn) ([]string, error) { return channels, nil },
		func(n *pgconn.Notification) {
			if (n == nil || n.Channel == a.channels.query) && a.w.queries != nil {
				a.w.queries.wake()
			}
			if n == nil || (n.Channel == a.channels.worker && n.Payload != a.id.String()) {
				select {
				case a.recounts <- struct{}{}:
				default:
				}
			}
		})
}

// announce upserts the worker's rows and deletes long-dead workers' rows.
func (a *announcer) announce(ctx context.Context) {
	interval := a.w.config.AnnounceInterval
	live, err := a.w.store.Announce(ctx, a.w.pool, store.AnnounceParams{
		ID: a.id, Namespaces: a.w.config.Namespaces, Identity: a.w.config.Identity, Queues: a.queues,
		WorkflowKinds: a.workflowKinds, ActivityKinds: a.activityKinds,
		Interval: interval, Expiry: AnnounceExpiry * interval, ForgetAfter: announceForgetAfter,
	})
	if err != nil {
		a.w.config.Logger.WarnContext(ctx, "weir: announcing the worker failed; it retries at the next interval", slog.String("error", err.Error()))
		return
	}
	a.share(live)
}

// recount tells the limiter and the sweeper how many workers are live now.
func (a *announcer) recount(ctx context.Context) {
	live, err := a.w.store.LiveWorkers(ctx, a.w.pool)
	if err != nil {
		a.w.config.Logger.WarnContext(ctx, "weir: counting the live workers failed; the next announcement counts them", slog.String("error", err.Error()))
		return
	}
	a.share(live)
}

// share records live, the number of live workers in the schema, for the
// step groups' limiter and the sweeper.
func (a *announcer) share(live int) {
	a.w.stepGroups.Share(live)
	a.w.liveWorkers.Store(int64(live))
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
		return
	}
	a.w.notifier.Notify(a.channels.worker, a.id.String())
}

// defaultIdentity names this process for people: "pid@host".
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%d@%s", os.Getpid(), host)
}
