package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/fencing"
)

// Configuration is validated when the driver is made.
func ExampleNewDriver() {
	_, err := fencing.NewDriver(nil, &fencing.Config{HeartbeatInterval: 5 * time.Second, LeaseTTL: 10 * time.Second})
	fmt.Println(err)

	driver, err := fencing.NewDriver(nil, nil) // defaults
	fmt.Println(err, driver.Plugin() != nil, driver.GetMigrationLines())
	// Output:
	// fencing config: HeartbeatInterval (5s) must be under half of LeaseTTL (10s)
	// <nil> true [main fencing]
}

// Outside a job run by a fenced client there is no lease.
func ExampleLeaseFromContext() {
	_, ok := fencing.LeaseFromContext(context.Background())
	fmt.Println(ok)
	err := fencing.Heartbeat(context.Background(), nil)
	fmt.Println(errors.Is(err, fencing.ErrNoLease))
	// Output:
	// false
	// true
}

// Outside an attempt's own context, WithAttemptDeadline is
// context.WithDeadline: the derived context ends at the deadline with
// DeadlineExceeded. In a fenced worker's Work, given the context River
// passed in, it bounds the attempt itself without a second context.
func ExampleWithAttemptDeadline() {
	ctx, cancel := fencing.WithAttemptDeadline(context.Background(), time.Now().Add(time.Millisecond))
	defer cancel()
	<-ctx.Done()
	fmt.Println(ctx.Err())
	// Output:
	// context deadline exceeded
}

// A rejected write matches ErrLeaseLost and carries the job and attempt.
func ExampleLeaseLostError() {
	var err error = &fencing.LeaseLostError{Attempt: 1, JobID: 42, Op: "complete"}
	var lost *fencing.LeaseLostError
	fmt.Println(errors.Is(err, fencing.ErrLeaseLost), errors.As(err, &lost) && lost.JobID == 42)
	fmt.Println(err)
	// Output:
	// true true
	// fencing: complete of job 42 attempt 1 rejected: the attempt no longer holds the job (lease lost)
}

// A completion repeated by the attempt that completed the job (a retry after
// an ambiguous COMMIT) is told apart from a lost lease: the job is done.
func ExampleAlreadyCompletedError() {
	var err error = &fencing.AlreadyCompletedError{Attempt: 1, JobID: 42, Op: "complete"}
	fmt.Println(errors.Is(err, fencing.ErrAlreadyCompleted), errors.Is(err, fencing.ErrLeaseLost))
	fmt.Println(err)
	// Output:
	// true false
	// fencing: complete of job 42 attempt 1 refused: this attempt already completed the job; the transaction is aborted so that its writes do not commit twice
}

// Another outcome asked for a job the attempt completed is a conflict, and
// the job stays completed.
func ExampleOutcomeConflictError() {
	var err error = &fencing.OutcomeConflictError{Attempt: 1, JobID: 42, Op: "set_state_retryable", Requested: "retryable"}
	fmt.Println(errors.Is(err, fencing.ErrOutcomeConflict), errors.Is(err, fencing.ErrAlreadyCompleted), errors.Is(err, fencing.ErrLeaseLost))
	// Output:
	// true true false
}

// A state write made outside any fenced attempt (rivertest.WorkContext) on a
// job a fenced attempt leases says so, instead of blaming another attempt.
func ExampleNoLeaseError() {
	var err error = &fencing.NoLeaseError{JobID: 42, Op: "set_state_completed"}
	fmt.Println(errors.Is(err, fencing.ErrNoLease), errors.Is(err, fencing.ErrLeaseLost))
	// Output:
	// true false
}

type chargeArgs struct {
	OrderID int64 `json:"order_id"`
}

func (chargeArgs) Kind() string { return "charge" }

type chargeWorker struct {
	river.WorkerDefaults[chargeArgs]
	pool *pgxpool.Pool
}

// Work records the charge and completes the job in one transaction; if a
// newer attempt took the job over, CompleteTx fails and the charge row rolls
// back with it.
func (w *chargeWorker) Work(ctx context.Context, job *river.Job[chargeArgs]) error {
	lease, _ := fencing.LeaseFromContext(ctx)
	if err := fencing.Heartbeat(ctx, map[string]string{"phase": "charging"}); err != nil {
		return err // ErrLeaseLost: stop, another attempt owns the job
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "INSERT INTO charge (order_id, lease_token) VALUES ($1, $2)", job.Args.OrderID, lease.Token); err != nil {
		return err
	}
	if _, err := fencing.CompleteTx[*fencing.Driver](ctx, tx, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// The whole upgrade of a River user: the driver, one plugin line, and the
// fencing migration line.
func Example_upgrade() {
	ctx := context.Background()
	dbPool, err := pgxpool.New(ctx, "postgres:///app")
	if err != nil {
		panic(err)
	}
	driver, err := fencing.NewDriver(dbPool, nil) // was riverpgxv5.New(dbPool)
	if err != nil {
		panic(err)
	}

	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Line: fencing.MigrationLine})
	if err != nil {
		panic(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		panic(err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, &chargeWorker{pool: dbPool})
	client, err := river.NewClient(driver, &river.Config{
		Plugins: []rivertype.Plugin{driver.Plugin()}, // first in the list
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
		Workers: workers,
	})
	if err != nil {
		panic(err)
	}
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
}
