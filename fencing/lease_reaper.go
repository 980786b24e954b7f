package fencing

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivershared/startstop"
)

// reapBatchMax caps how many jobs one reaper statement recovers.
const reapBatchMax = 1000

// leaseReaper returns running jobs whose lease expired to available (or
// discarded past max attempts, or cancelled if a cancel was requested), at
// once and with an error entry saying so, and notifies fetchers. River runs
// it on the elected leader only, as a maintenance service.
type leaseReaper struct {
	startstop.BaseStartStop

	driver *Driver
	pilot  *Pilot
}

func newLeaseReaper(driver *Driver, pilot *Pilot) *leaseReaper {
	return &leaseReaper{driver: driver, pilot: pilot}
}

func (r *leaseReaper) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := r.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		started()
		defer stopped()
		ticker := time.NewTicker(r.driver.config.ReaperInterval)
		defer ticker.Stop()
		for {
			if _, err := r.reapAll(ctx); err != nil && ctx.Err() == nil {
				r.driver.logger().WarnContext(ctx, "fencing: reaping expired leases", slog.String("error", err.Error()))
			}
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	return nil
}

// reapAll reaps every schema River has used with this client.
func (r *leaseReaper) reapAll(ctx context.Context) (int, error) {
	total := 0
	for _, schema := range r.pilot.knownSchemas() {
		fenced, err := r.pilot.fencedPool(ctx, schema)
		if err != nil {
			return total, err
		}
		if !fenced {
			continue
		}
		for {
			n, err := r.reap(ctx, schema)
			total += n
			if err != nil {
				return total, err
			}
			if n < reapBatchMax {
				break
			}
		}
	}
	return total, nil
}

type reapedJob struct {
	Attempt int
	ID      int64
	Queue   string
	State   string
}

func (r *leaseReaper) reap(ctx context.Context, schema string) (int, error) {
	table := tableName(schema, "river_job")
	stateType := tableName(schema, "river_job_state")
	tx, err := r.driver.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("reaping expired leases in schema %q: %w", schema, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, `
WITH expired AS (
    SELECT id FROM `+table+`
    WHERE state = 'running'
        AND lease_expires_at IS NOT NULL
        AND greatest(lease_expires_at, pg_postmaster_start_time() + $1::interval) < now()
    ORDER BY id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
decided AS (
    SELECT j.id,
        CASE WHEN j.metadata ? 'cancel_attempted_at' THEN 'cancelled'
             WHEN j.attempt >= j.max_attempts THEN 'discarded'
             ELSE 'available' END AS new_state
    FROM `+table+` j JOIN expired e ON e.id = j.id
)
UPDATE `+table+` j
SET state = d.new_state::`+stateType+`,
    finalized_at = CASE WHEN d.new_state = 'available' THEN NULL ELSE now() END,
    scheduled_at = CASE WHEN d.new_state = 'available' THEN now() ELSE j.scheduled_at END,
    errors = array_append(j.errors, jsonb_build_object(
        'at', now(),
        'attempt', j.attempt,
        'error', format('fencing: lease of attempt %s expired at %s without renewal; the job was recovered', j.attempt, j.lease_expires_at),
        'trace', ''))
FROM decided d
WHERE j.id = d.id
RETURNING j.attempt, j.id, j.queue, j.state::text`, r.driver.config.LeaseTTL, reapBatchMax)
	if err != nil {
		return 0, fmt.Errorf("reaping expired leases in schema %q: %w", schema, err)
	}
	reaped, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reapedJob])
	if err != nil {
		return 0, fmt.Errorf("reaping expired leases in schema %q: %w", schema, err)
	}
	if hook := r.driver.config.OnFinalized; hook != nil {
		var finalized []int64
		for _, job := range reaped {
			if job.State != "available" {
				finalized = append(finalized, job.ID)
			}
		}
		if len(finalized) > 0 {
			if err := hook(ctx, tx, schema, finalized); err != nil {
				return 0, fmt.Errorf("fencing: OnFinalized for reaped jobs %v: %w", finalized, err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("reaping expired leases in schema %q: %w", schema, err)
	}
	var queues []string
	for _, job := range reaped {
		r.driver.counters.emit(ctx, &Event{Attempt: job.Attempt, JobID: job.ID, Kind: EventLeaseExpired})
		r.driver.logger().WarnContext(ctx, "fencing: recovered a job whose lease expired",
			slog.Int64("job_id", job.ID), slog.Int("attempt", job.Attempt), slog.String("state", job.State))
		if job.State == "available" && !slices.Contains(queues, job.Queue) {
			queues = append(queues, job.Queue)
		}
	}
	if len(queues) > 0 && r.driver.SupportsListenNotify() {
		payloads := make([]string, len(queues))
		for i, queue := range queues {
			payload, err := json.Marshal(map[string]string{"queue": queue})
			if err != nil {
				return len(reaped), err
			}
			payloads[i] = string(payload)
		}
		// River's insert topic: producers of these queues fetch at once.
		if err := r.driver.Driver.GetExecutor().NotifyMany(ctx, &riverdriver.NotifyManyParams{
			Payload: payloads, Schema: schema, Topic: "river_insert",
		}); err != nil {
			return len(reaped), fmt.Errorf("notifying fetchers: %w", err)
		}
	}
	return len(reaped), nil
}
