// Command order-saga runs an order as a saga: reserve inventory, charge,
// ship; when a step fails, the steps done so far are compensated in reverse
// order.
//
//	DATABASE_URL=postgres://… go run ./examples/order-saga -fail ship
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
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/worker"
)

// newOrderID is an order ID no earlier run of the example has used, so each
// run places an order of its own (the same ID again returns the run it
// started before).
func newOrderID() string { return "o-" + uuid.NewString()[:8] }

func main() {
	order := flag.String("order", newOrderID(), "order ID (the workflow ID is order-<ID>; the same ID again returns the same run)")
	fail := flag.String("fail", "", `step to fail: "reserve", "charge", "ship" or "" for none`)
	schema := flag.String("schema", os.Getenv("WEIR_SCHEMA"), "Postgres schema of weir's tables (default: the search_path's first)")
	flag.Parse()
	switch *fail {
	case "", "reserve", "charge", "ship":
	default:
		log.Fatalf("-fail %q: want reserve, charge, ship or nothing", *fail)
	}

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
	err = run(ctx, pool, *schema, os.Stdout, *order, *fail)
	if errors.Is(err, client.ErrWorkflowFailed) {
		os.Exit(1) // the failure was printed
	}
	if err != nil {
		log.Fatal(err)
	}
}

// run migrates schema, runs a worker and one order workflow whose step
// failAt fails, and prints what happened to out. It returns the workflow's
// error when the order failed.
func run(ctx context.Context, pool *pgxpool.Pool, schema string, out io.Writer, orderID, failAt string) (err error) {
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}

	// Activities write to out from worker goroutines, so every write to out
	// goes through the shop's lock.
	shop := &Shop{FailAt: failAt, out: out}
	w, err := worker.New(pool, &worker.Config{Schema: schema})
	if err != nil {
		return err
	}
	worker.AddWorkflow(w, &OrderWorkflow{})
	worker.AddActivity(w, &ReserveActivity{Shop: shop})
	worker.AddActivity(w, &ReleaseActivity{Shop: shop})
	worker.AddActivity(w, &ChargeActivity{Shop: shop})
	worker.AddActivity(w, &RefundActivity{Shop: shop})
	worker.AddActivity(w, &ShipActivity{Shop: shop})
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

	args := OrderArgs{ID: orderID, SKU: "widget", Qty: 2, Cents: 4200}
	shop.logf("order %s:", orderID)
	run, err := c.Start(ctx, args, &client.StartOpts{
		WorkflowID: "order-" + orderID,
		// One order, one workflow: starting the same order again (a retried
		// HTTP request, say) returns the same run.
		RequestID: "order-" + orderID,
	})
	if err != nil {
		return fmt.Errorf("starting: %w", err)
	}

	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	receipt, err := client.GetResult[Receipt](waitCtx, run)
	var failed *client.WorkflowFailedError
	switch {
	case errors.As(err, &failed):
		shop.logf("order %s %s: %s", orderID, failed.State, failed.Failure.Error())
		return err
	case err != nil:
		return fmt.Errorf("waiting for %s: %w", run.WorkflowID, err)
	}
	shop.logf("order %s completed: reservation %s, charge %s, tracking %s", orderID, receipt.ReservationID, receipt.ChargeID, receipt.TrackingID)
	return nil
}
