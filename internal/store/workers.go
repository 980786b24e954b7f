package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/dbschema"
)

type workerSQL struct {
	list, count, announce, live, withdraw, taskFailure string
}

func newWorkerSQL(n *dbschema.Names) workerSQL {
	return workerSQL{
		list: "SELECT activity_kinds, expires_at, worker_id, identity, last_seen_at, namespace, queues, started_at, workflow_kinds FROM " +
			n.Worker + " WHERE namespace = $1 AND expires_at > now() ORDER BY started_at DESC, worker_id",
		count: "SELECT count(*), count(*) FILTER (WHERE $3 = ANY (workflow_kinds)) FROM " + n.Worker +
			" WHERE namespace = $1 AND $2 = ANY (queues) AND expires_at > now()",
		announce: "WITH gone AS (DELETE FROM " + n.Worker + " WHERE expires_at < now() - $9::bigint * interval '1 microsecond' AND worker_id <> $1)," +
			" up AS (INSERT INTO " + n.Worker + " (worker_id, namespace, identity, queues, workflow_kinds, activity_kinds, heartbeat_interval, expires_at)" +
			" SELECT $1, ns, $3, $4, $5, $6, $7::bigint * interval '1 microsecond', now() + $8::bigint * interval '1 microsecond'" +
			" FROM unnest($2::text[]) ns" +
			" ON CONFLICT (worker_id, namespace) DO UPDATE SET last_seen_at = now(), expires_at = excluded.expires_at" +
			" RETURNING 1)" +
			// The statement's snapshot has the others' rows, not its own.
			" SELECT 1 + count(DISTINCT worker_id) FROM " + n.Worker + " WHERE expires_at > now() AND worker_id <> $1",
		live:     "SELECT count(DISTINCT worker_id) FROM " + n.Worker + " WHERE expires_at > now()",
		withdraw: "DELETE FROM " + n.Worker + " WHERE worker_id = $1",
		taskFailure: "SELECT state::text, scheduled_at, (e->>'attempt')::int, (e->>'at')::timestamptz, e->>'error', coalesce(e->>'trace', '')" +
			" FROM " + n.RiverJob + ", LATERAL (SELECT errors[array_length(errors, 1)] AS e) last WHERE id = $1 AND e IS NOT NULL",
	}
}

// ListWorkers reads the live workers of a namespace, newest first, into T:
// a struct of the columns activity_kinds, expires_at, worker_id, identity,
// last_seen_at, namespace, queues, started_at, workflow_kinds in that order
// (client.WorkerInfo).
func ListWorkers[T any](ctx context.Context, s *Store, db DBTX, namespace string) ([]*T, error) {
	return collectRows(ctx, db, pgx.RowToAddrOfStructByPos[T], s.workers.list, namespace)
}

// CountTaskWorkersParams name a run's namespace, task queue and workflow
// kind.
type CountTaskWorkersParams struct {
	Namespace, Queue, Kind string
}

// CountTaskWorkers counts the live workers polling the queue, and those of
// them with the kind registered.
func (s *Store) CountTaskWorkers(ctx context.Context, db DBTX, p CountTaskWorkersParams) (onQueue, serving int, err error) {
	return onQueue, serving, db.QueryRow(ctx, s.workers.count, p.Namespace, p.Queue, p.Kind).Scan(&onQueue, &serving)
}

// AnnounceParams are what a worker announces of itself in each namespace.
type AnnounceParams struct {
	ID                                   uuid.UUID
	Namespaces                           []string
	Identity                             string
	Queues, WorkflowKinds, ActivityKinds []string
	Interval, Expiry, ForgetAfter        time.Duration
}

// Announce upserts a worker's rows, live for Expiry, deletes the rows of
// workers expired for ForgetAfter, and returns how many workers are live in
// the schema, this one included.
func (s *Store) Announce(ctx context.Context, db DBTX, p AnnounceParams) (live int, err error) {
	return live, db.QueryRow(ctx, s.workers.announce, p.ID, p.Namespaces, p.Identity, p.Queues, p.WorkflowKinds, p.ActivityKinds,
		p.Interval.Microseconds(), p.Expiry.Microseconds(), p.ForgetAfter.Microseconds()).Scan(&live)
}

// LiveWorkers counts the live workers in the schema, of every namespace.
func (s *Store) LiveWorkers(ctx context.Context, db DBTX) (live int, err error) {
	return live, db.QueryRow(ctx, s.workers.live).Scan(&live)
}

// WithdrawWorker deletes a worker's rows.
func (s *Store) WithdrawWorker(ctx context.Context, db DBTX, id uuid.UUID) error {
	return exec(ctx, db, s.workers.withdraw, id)
}

// JobFailure is the last error of a River job.
type JobFailure struct {
	State       string
	ScheduledAt time.Time
	Attempt     int
	At          time.Time
	Error       string
	Trace       string
}

// LastJobFailure reads the last error of a job; pgx.ErrNoRows when it has
// none (or does not exist).
func (s *Store) LastJobFailure(ctx context.Context, db DBTX, jobID int64) (*JobFailure, error) {
	var f JobFailure
	return &f, db.QueryRow(ctx, s.workers.taskFailure, jobID).Scan(&f.State, &f.ScheduledAt, &f.Attempt, &f.At, &f.Error, &f.Trace)
}
