// Command transactional-start inserts an order row and starts the order's
// workflow in one Postgres transaction: both commit, or a rollback leaves
// neither. The workflow's activity then updates the row and records its own
// outcome in one fenced transaction (activity.CompleteTx), so the update
// happens exactly once even if the activity is retried.
//
//	DATABASE_URL=postgres://… go run ./examples/transactional-start
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// FulfillArgs start the workflow that fulfills one order.
type FulfillArgs struct {
	OrderID string `json:"order_id"`
}

func (FulfillArgs) Kind() string { return "txstart.fulfill" }

// FulfillWorkflow marks the order fulfilled. A real one would reserve,
// charge and ship first (see examples/order-saga).
type FulfillWorkflow struct {
	workflow.Defaults[FulfillArgs, string]
}

func (w *FulfillWorkflow) Run(ctx workflow.Context, args FulfillArgs) (string, error) {
	return workflow.ExecuteActivity[string](ctx, MarkFulfilledArgs(args), nil).Get(ctx)
}

// MarkFulfilledArgs are the activity's arguments.
type MarkFulfilledArgs struct {
	OrderID string `json:"order_id"`
}

func (MarkFulfilledArgs) Kind() string { return "txstart.mark_fulfilled" }

// MarkFulfilledActivity writes to the application's own table.
type MarkFulfilledActivity struct {
	activity.Defaults[MarkFulfilledArgs, string]
	Orders *Orders
}

func (a *MarkFulfilledActivity) Execute(ctx context.Context, args MarkFulfilledArgs) (string, error) {
	tx, err := a.Orders.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // a no-op after Commit
	var status string
	err = tx.QueryRow(ctx, "UPDATE "+a.Orders.table+" SET status = 'fulfilled', fulfilled_at = now() WHERE id = $1 RETURNING status", args.OrderID).Scan(&status)
	if err != nil {
		return "", fmt.Errorf("updating order %s: %w", args.OrderID, err)
	}
	// The update and the activity's outcome commit together. If this
	// attempt lost its lease (it was presumed dead and retried elsewhere),
	// CompleteTx fails and aborts tx: the stale attempt's update never
	// commits.
	if err := activity.CompleteTx(ctx, tx, status); err != nil {
		return "", err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", err
	}
	return status, nil
}

// Orders is the application's table of orders.
type Orders struct {
	pool  *pgxpool.Pool
	table string // schema-qualified, quoted
}

func newOrders(ctx context.Context, pool *pgxpool.Pool, schema string) (*Orders, error) {
	ident := pgx.Identifier{"orders"}
	if schema != "" {
		ident = pgx.Identifier{schema, "orders"}
	}
	o := &Orders{pool: pool, table: ident.Sanitize()}
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+o.table+` (
		id           text PRIMARY KEY,
		cents        bigint NOT NULL,
		status       text NOT NULL,
		fulfilled_at timestamptz
	)`)
	return o, err
}

var errPaymentDeclined = errors.New("payment declined after the order was written")

// placeOrder inserts the order and starts its workflow in one transaction.
// With failAfterStart it fails after both writes, as an application would
// after some later check, and the transaction rolls back.
func placeOrder(ctx context.Context, c *client.Client, orders *Orders, orderID string, cents int64, failAfterStart bool) (run *client.Run, err error) {
	tx, err := orders.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, tx.Rollback(context.WithoutCancel(ctx)))
		}
	}()

	if _, err := tx.Exec(ctx, "INSERT INTO "+orders.table+" (id, cents, status) VALUES ($1, $2, 'placed')", orderID, cents); err != nil {
		return nil, fmt.Errorf("inserting order %s: %w", orderID, err)
	}
	run, err = c.StartTx(ctx, tx, FulfillArgs{OrderID: orderID}, &client.StartOpts{WorkflowID: "fulfill-" + orderID})
	if err != nil {
		return nil, fmt.Errorf("starting the workflow of order %s: %w", orderID, err)
	}
	if failAfterStart {
		return nil, errPaymentDeclined
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, err
	}
	return run, nil
}

// newOrderID is an order ID no earlier run of the example has used, so each
// run places an order of its own (the same ID again returns the run it
// started before).
func newOrderID() string { return "o-" + uuid.NewString()[:8] }

func main() {
	order := flag.String("order", newOrderID(), "ID of the order to place; <ID>-rb is the one rolled back")
	schema := flag.String("schema", os.Getenv("WEIR_SCHEMA"), "Postgres schema of weir's tables and the orders table (default: the search_path's first)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		log.Fatal("DATABASE_URL is not set (start `weir dev` and use the URL it prints)")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := run(ctx, pool, *schema, os.Stdout, *order); err != nil {
		log.Fatal(err)
	}
}

// run places two orders: orderID commits, orderID+"-rb" rolls back. It
// prints what each left behind.
func run(ctx context.Context, pool *pgxpool.Pool, schema string, out io.Writer, orderID string) (err error) {
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	orders, err := newOrders(ctx, pool, schema)
	if err != nil {
		return err
	}

	w, err := worker.New(pool, &worker.Config{Schema: schema})
	if err != nil {
		return err
	}
	worker.AddWorkflow(w, &FulfillWorkflow{})
	worker.AddActivity(w, &MarkFulfilledActivity{Orders: orders})
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err = errors.Join(err, w.Stop(stopCtx))
	}()

	c, err := client.New(pool, &client.Config{Schema: schema})
	if err != nil {
		return err
	}
	defer c.Close()

	// 1. Committed: the row and the run exist together.
	committed, err := placeOrder(ctx, c, orders, orderID, 4200, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "order %s: row inserted and workflow %s started in one transaction, committed\n", orderID, committed.WorkflowID)

	// 2. Rolled back: neither the row nor the run exists.
	rolledBack := orderID + "-rb"
	if _, err := placeOrder(ctx, c, orders, rolledBack, 990, true); !errors.Is(err, errPaymentDeclined) {
		return fmt.Errorf("placing order %s: want the injected failure, got %v", rolledBack, err)
	}
	fmt.Fprintf(out, "order %s: row inserted and workflow started, then the transaction rolled back (%v)\n", rolledBack, errPaymentDeclined)

	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	status, err := client.GetResult[string](waitCtx, committed)
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", committed.WorkflowID, err)
	}
	fmt.Fprintf(out, "order %s: workflow completed, order %s\n", orderID, status)

	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+orders.table+" WHERE id = $1", rolledBack).Scan(&rows); err != nil {
		return err
	}
	_, err = c.Describe(ctx, "fulfill-"+rolledBack, uuid.Nil)
	switch {
	case errors.Is(err, client.ErrRunNotFound):
		fmt.Fprintf(out, "order %s: %d order rows, no workflow run\n", rolledBack, rows)
	case err != nil:
		return err
	default:
		return fmt.Errorf("order %s: the rolled-back transaction left a workflow run", rolledBack)
	}
	return nil
}
