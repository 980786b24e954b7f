package fencing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// RecoverUnleasedOpts says which running jobs without a lease
// Driver.RecoverUnleased recovers.
type RecoverUnleasedOpts struct {
	// Schema is River's schema; "" means the search_path's first.
	Schema string

	// OlderThan is required: only jobs whose attempt started longer ago than
	// this (database time) are recovered. Make it longer than any attempt of
	// the old fleet could still run.
	OlderThan time.Duration

	// DryRun counts what would be recovered and changes nothing.
	DryRun bool
}

// RecoverUnleasedResult counts what Driver.RecoverUnleased recovered (or,
// with DryRun, would recover).
type RecoverUnleasedResult struct {
	// Available counts the jobs returned to available, to run again at once.
	Available int

	// Discarded counts the jobs discarded: they had used their last attempt.
	Discarded int

	// Cancelled counts the jobs cancelled: a cancel had been requested.
	Cancelled int

	// JobIDs are the jobs recovered, in ID order.
	JobIDs []int64

	// Younger counts the running jobs without a lease left alone because
	// their attempt started within OlderThan: they may still be running in
	// a process without fencing.
	Younger int
}

// ErrRecoverRefused is matched (errors.Is) by the error RecoverUnleased
// returns when it refuses to run; that error is a *RecoverRefusedError.
var ErrRecoverRefused = errors.New("fencing: recovering unleased jobs refused")

// RecoverRefusedError is the error RecoverUnleased returns when it refuses
// to run. It matches ErrRecoverRefused with errors.Is.
type RecoverRefusedError struct {
	// Schema is the schema asked for ("" for the search_path's first).
	Schema string

	// Reason says why.
	Reason string
}

func (e *RecoverRefusedError) Error() string {
	return fmt.Sprintf("fencing: recovering unleased jobs in schema %q refused: %s", e.Schema, e.Reason)
}

// Is reports whether target is ErrRecoverRefused.
func (e *RecoverRefusedError) Is(target error) bool { return target == ErrRecoverRefused }

// RecoverUnleased recovers running jobs that have no lease: attempts that
// processes without fencing (plain riverpgxv5 clients, before or during the
// upgrade) started and never finished, because such a process died. Nothing
// else recovers them but River's rescuer, after RescueStuckJobsAfter (1 hour
// by default): the lease reaper never touches a job without a lease, since
// its attempt may still be running in a live process that fencing cannot
// see. Run it only once every process without fencing is gone, as an
// operator's decision: it is never run automatically.
//
// Each job whose attempt started longer than opts.OlderThan ago is returned
// to available at once (discarded past its max attempts, cancelled if a
// cancel was requested), with an error entry saying so, as the lease reaper
// does, in batches of one transaction each. Config.OnFinalized is called for
// the jobs that end. A job locked by another transaction is skipped. It
// returns a *RecoverRefusedError (matching ErrRecoverRefused) for an
// OlderThan that is not positive, or a schema without the fencing
// migration.
func (d *Driver) RecoverUnleased(ctx context.Context, opts *RecoverUnleasedOpts) (*RecoverUnleasedResult, error) {
	if opts == nil {
		opts = &RecoverUnleasedOpts{}
	}
	if opts.OlderThan <= 0 {
		return nil, &RecoverRefusedError{Schema: opts.Schema, Reason: fmt.Sprintf(
			"OlderThan (%s) must be positive: longer than any attempt of the processes without fencing could still run", opts.OlderThan)}
	}
	fenced, err := d.Fenced(ctx, opts.Schema)
	if err != nil {
		return nil, err
	}
	if !fenced {
		return nil, &RecoverRefusedError{Schema: opts.Schema, Reason: "the fencing migration is not installed there: every running job is without a lease"}
	}
	res := &RecoverUnleasedResult{}
	if opts.DryRun {
		return res, d.countUnleased(ctx, opts, res)
	}
	for {
		recovered, err := d.recoverUnleasedBatch(ctx, opts)
		for _, job := range recovered {
			res.count(job)
		}
		if err != nil {
			return res, err
		}
		if len(recovered) < reapBatchMax {
			break
		}
	}
	res.Younger, err = d.countYoungerUnleased(ctx, opts)
	return res, err
}

func (r *RecoverUnleasedResult) count(job reapedJob) {
	switch job.State {
	case "available":
		r.Available++
	case "discarded":
		r.Discarded++
	case "cancelled":
		r.Cancelled++
	}
	r.JobIDs = append(r.JobIDs, job.ID)
}

// countUnleased fills res with what RecoverUnleased would do.
func (d *Driver) countUnleased(ctx context.Context, opts *RecoverUnleasedOpts, res *RecoverUnleasedResult) error {
	rows, err := d.pool.Query(ctx, `
SELECT j.attempt, j.id, j.queue, `+recoveredStateSQL+`
FROM `+tableName(opts.Schema, "river_job")+` j
WHERE `+unleasedWhereSQL+`
ORDER BY j.id`, opts.OlderThan)
	if err != nil {
		return fmt.Errorf("counting unleased jobs in schema %q: %w", opts.Schema, err)
	}
	old, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reapedJob])
	if err != nil {
		return fmt.Errorf("counting unleased jobs in schema %q: %w", opts.Schema, err)
	}
	for _, job := range old {
		res.count(job)
	}
	res.Younger, err = d.countYoungerUnleased(ctx, opts)
	return err
}

// countYoungerUnleased counts the running jobs without a lease whose
// attempt started within opts.OlderThan.
func (d *Driver) countYoungerUnleased(ctx context.Context, opts *RecoverUnleasedOpts) (int, error) {
	var n int
	err := d.pool.QueryRow(ctx, `
SELECT count(*) FROM `+tableName(opts.Schema, "river_job")+` j
WHERE j.state = 'running' AND j.lease_expires_at IS NULL
    AND NOT (coalesce(j.attempted_at, j.scheduled_at) < now() - $1::interval)`, opts.OlderThan).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting unleased jobs in schema %q: %w", opts.Schema, err)
	}
	return n, nil
}

// unleasedWhereSQL matches running jobs of river_job j without a lease
// whose attempt started longer than $1 ago.
const unleasedWhereSQL = `j.state = 'running' AND j.lease_expires_at IS NULL
    AND coalesce(j.attempted_at, j.scheduled_at) < now() - $1::interval`

// recoverUnleasedBatch recovers up to reapBatchMax jobs in one transaction.
func (d *Driver) recoverUnleasedBatch(ctx context.Context, opts *RecoverUnleasedOpts) ([]reapedJob, error) {
	recovered, err := d.recoverJobs(ctx, d.pool, opts.Schema, "recovered jobs", func(tx pgx.Tx) (pgx.Rows, error) {
		return tx.Query(ctx, recoverJobsSQL(opts.Schema, unleasedWhereSQL,
			"format('fencing: attempt %s, started at %s by a process without fencing, was recovered by an operator (RecoverUnleased)', j.attempt, j.attempted_at)"),
			opts.OlderThan, reapBatchMax)
	})
	if err != nil {
		return nil, fmt.Errorf("recovering unleased jobs in schema %q: %w", opts.Schema, err)
	}
	for _, job := range recovered {
		d.logger().WarnContext(ctx, "fencing: recovered a running job without a lease",
			slog.Int64("job_id", job.ID), slog.Int("attempt", job.Attempt), slog.String("state", job.State))
	}
	return recovered, d.notifyRecovered(ctx, opts.Schema, recovered)
}
