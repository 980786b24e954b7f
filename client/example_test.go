package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
)

type RefundArgs struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

func (RefundArgs) Kind() string { return "refund_order" }

// Start a run idempotently, and see what a second, different start of the same
// workflow ID gets.
func Example_start() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	const schema = "weir_example_client"
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		log.Fatal(err)
	}

	c, err := client.New(pool, &client.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	opts := &client.StartOpts{WorkflowID: "refund-o-1", RequestID: "req-1"}
	run, err := c.Start(ctx, RefundArgs{OrderID: "o-1", Cents: 500}, opts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", run.Created, "generation:", run.Generation)

	// A retry of the same request returns the same run.
	again, err := c.Start(ctx, RefundArgs{OrderID: "o-1", Cents: 500}, opts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", again.Created, "same run:", again.RunID == run.RunID)

	// Another request while the run is live is refused, with the live run's identity.
	_, err = c.Start(ctx, RefundArgs{OrderID: "o-1", Cents: 500}, &client.StartOpts{WorkflowID: "refund-o-1", RequestID: "req-2"})
	var started *client.WorkflowAlreadyStartedError
	if errors.As(err, &started) {
		fmt.Println("already started:", started.WorkflowID, "generation", started.Generation, "same run:", started.RunID == run.RunID)
	}

	// Output:
	// created: true generation: 1
	// created: false same run: true
	// already started: refund-o-1 generation 1 same run: true
}

// Pause a schedule and resume it; its due times count from its anchor.
func ExampleClient_PauseSchedule() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	const schema = "weir_example_client_schedule"
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		log.Fatal(err)
	}
	c, err := client.New(pool, &client.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	s, err := c.CreateSchedule(ctx, &client.ScheduleParams{ID: "nightly-refunds", Every: 24 * time.Hour, Workflow: RefundArgs{}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first due one interval after the anchor:", s.NextRunAt.Sub(s.Anchor))

	if s, err = c.PauseSchedule(ctx, "nightly-refunds"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("paused:", s.Paused)
	if s, err = c.ResumeSchedule(ctx, "nightly-refunds"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("paused:", s.Paused)

	// Output:
	// first due one interval after the anchor: 24h0m0s
	// paused: true
	// paused: false
}

// A run that no live worker serves waits with an empty history; describe
// says why.
func Example_noWorker() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	const schema = "weir_example_client_workers"
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		log.Fatal(err)
	}

	c, err := client.New(pool, &client.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	workers, err := c.ListWorkers(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("live workers:", len(workers))

	run, err := c.Start(ctx, RefundArgs{OrderID: "o-2", Cents: 500}, &client.StartOpts{Queue: "refunds"})
	if err != nil {
		log.Fatal(err)
	}
	d, err := c.Describe(ctx, run.WorkflowID, run.RunID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(d.TaskWorkers.Problem())
	// Output:
	// live workers: 0
	// No live worker serves queue "refunds": the run waits until a worker that registers workflow refund_order polls it.
}

// Hand a long backfill to the workers, and read its progress; the same
// range again is the same backfill.
func ExampleClient_CreateBackfill() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	const schema = "weir_example_client_backfill"
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		log.Fatal(err)
	}
	c, err := client.New(pool, &client.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	s, err := c.CreateSchedule(ctx, &client.ScheduleParams{ID: "minutely-refunds", Every: time.Minute, Paused: true, Workflow: RefundArgs{}})
	if err != nil {
		log.Fatal(err)
	}
	// Thirty days of minutes: more than one request should start.
	from, to := s.Anchor, s.Anchor.Add(30*24*time.Hour+time.Second)
	bf, err := c.CreateBackfill(ctx, "minutely-refunds", from, to)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("state:", bf.State, "total:", bf.Total, "started:", bf.Started)

	again, err := c.CreateBackfill(ctx, "minutely-refunds", from, to)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same backfill:", again.ID == bf.ID)

	// Workers start the runs; DescribeBackfill follows them.
	if bf, err = c.DescribeBackfill(ctx, bf.ID); err != nil {
		log.Fatal(err)
	}
	fmt.Println("next due one minute after the anchor:", bf.NextDueAt.Sub(s.Anchor))

	_, err = c.CreateBackfill(ctx, "minutely-refunds", from, from.Add(10*365*24*time.Hour))
	fmt.Println("ten years of minutes:", errors.Is(err, client.ErrBackfillTooLarge))

	// Output:
	// state: running total: 43200 started: 0
	// same backfill: true
	// next due one minute after the anchor: 1m0s
	// ten years of minutes: true
}

// Create a schedule and start its first runs in the transaction that records
// the order they belong to: all of it commits, or none.
func ExampleClient_CreateScheduleTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	const schema = "weir_example_client_schedule_tx"
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		log.Fatal(err)
	}
	c, err := client.New(pool, &client.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The caller's own writes go in tx here too.
		if _, err := c.CreateScheduleTx(ctx, tx, &client.ScheduleParams{ID: "hourly-refunds", Cron: "@hourly", Workflow: RefundArgs{}}); err != nil {
			return err
		}
		runs, err := c.BackfillScheduleTx(ctx, tx, "hourly-refunds", from, from.Add(2*time.Hour))
		if err != nil {
			return err
		}
		for _, run := range runs {
			fmt.Println("started:", run.WorkflowID)
		}
		if _, err := c.PauseScheduleTx(ctx, tx, "hourly-refunds"); err != nil {
			return err
		}
		return c.DeleteScheduleTx(ctx, tx, "hourly-refunds")
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.DescribeSchedule(ctx, "hourly-refunds")
	fmt.Println("deleted:", errors.Is(err, client.ErrScheduleNotFound))

	// Output:
	// started: hourly-refunds/2026-01-01T00:00:00Z
	// started: hourly-refunds/2026-01-01T01:00:00Z
	// deleted: true
}
