// Command river-upgrade takes an existing River application (plain
// river.Worker[T] jobs) through weir's two upgrade steps:
//
//  1. Switch its River client to the fencing driver: the same workers and
//     jobs, now with lease tokens, so a stale attempt can never complete a
//     job (a two-line diff in newRiverClient, one type parameter in
//     jobs.go, and the "fencing" migration line).
//
//  2. Orchestrate those same workers from a workflow: a weir worker runs
//     them (worker.AddRiverWorker), workflows call them with
//     workflow.ExecuteActivity, and jobs inserted directly keep working.
//
//     DATABASE_URL=postgres://… go run ./examples/river-upgrade
//
// docs/upgrading-from-river.md walks through the same steps.
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
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// newRiverClient is the application's River client. Step 1 changed two
// lines, marked. queues nil makes an insert-only client.
func newRiverClient(pool *pgxpool.Pool, schema string, queues map[string]river.QueueConfig, workers *river.Workers) (*river.Client[pgx.Tx], error) {
	driver, err := fencing.NewDriver(pool, nil) // was: driver := riverpgxv5.New(pool)
	if err != nil {
		return nil, err
	}
	return river.NewClient(driver, &river.Config{
		Plugins: []rivertype.Plugin{driver.Plugin()}, // added, first in the list
		Queues:  queues,
		Schema:  schema,
		Workers: workers,
	})
}

// migrateFencing applies River's main line (the application had it already)
// and the fencing line. Step 1 added the second migrator, and the lock
// (migrations.Lock) that makes it safe to run from many processes at once.
func migrateFencing(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	driver, err := fencing.NewDriver(pool, nil)
	if err != nil {
		return err
	}
	return migrations.Lock(ctx, pool, schema, func(ctx context.Context) error {
		for _, line := range []string{"main", fencing.MigrationLine} {
			migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Line: line, Schema: schema})
			if err != nil {
				return err
			}
			if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
				return fmt.Errorf("migrating line %s: %w", line, err)
			}
		}
		return nil
	})
}

// BillingArgs start the workflow of step 2.
type BillingArgs struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Cents    int64  `json:"cents"`
}

func (BillingArgs) Kind() string { return "billing" }

// BillingWorkflow runs the application's two River jobs in order, as
// activities: the email is sent only once the invoice is written, and each
// is retried on its own.
type BillingWorkflow struct {
	workflow.Defaults[BillingArgs, string]
}

func (w *BillingWorkflow) Run(ctx workflow.Context, args BillingArgs) (string, error) {
	// A plain River worker returns no result: its activity's result is null.
	if _, err := workflow.ExecuteActivity[struct{}](ctx, GenerateInvoiceArgs{OrderID: args.OrderID, Cents: args.Cents}, nil).Get(ctx); err != nil {
		return "", fmt.Errorf("invoicing: %w", err)
	}
	subject := "Your invoice for order " + args.OrderID
	if _, err := workflow.ExecuteActivity[struct{}](ctx, SendEmailArgs{To: args.Customer, Subject: subject}, nil).Get(ctx); err != nil {
		return "", fmt.Errorf("emailing: %w", err)
	}
	return "invoiced and emailed", nil
}

// printMailer prints each email and passes its subject on sent (buffered;
// run reads one per email it waits for).
type printMailer struct {
	out  *lockedWriter
	sent chan string
}

func (m *printMailer) Send(ctx context.Context, to, subject string) error {
	m.out.printf("  email to %s: %q\n", to, subject)
	m.sent <- subject
	return nil
}

// waitSent waits for the next email this process sends.
func (m *printMailer) waitSent(ctx context.Context) error {
	select {
	case <-m.sent:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for an email: %w", ctx.Err())
	}
}

// lockedWriter serializes writes from the workers' goroutines and run's.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, args...)
}

// newOrderID is an order ID no earlier run of the example has used, so each
// run places an order of its own (the same ID again returns the run it
// started before).
func newOrderID() string { return "o-" + uuid.NewString()[:8] }

func main() {
	order := flag.String("order", newOrderID(), "order ID to bill in step 2")
	schema := flag.String("schema", os.Getenv("WEIR_SCHEMA"), "Postgres schema of River's and weir's tables (default: the search_path's first)")
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

// run plays step 1 and step 2 in one process and prints what happened.
func run(ctx context.Context, pool *pgxpool.Pool, schema string, w io.Writer, orderID string) error {
	out := &lockedWriter{w: w}
	invoices, err := createInvoices(ctx, pool, schema)
	if err != nil {
		return err
	}
	mailer := &printMailer{out: out, sent: make(chan string, 10)}
	if err := step1(ctx, pool, schema, out, mailer); err != nil {
		return fmt.Errorf("step 1: %w", err)
	}
	if err := step2(ctx, pool, schema, out, mailer, invoices, orderID); err != nil {
		return fmt.Errorf("step 2: %w", err)
	}
	return nil
}

// step1 is the application after the first upgrade step: its own River
// client, on the fencing driver, works its own jobs.
func step1(ctx context.Context, pool *pgxpool.Pool, schema string, out *lockedWriter, mailer *printMailer) (err error) {
	if err := migrateFencing(ctx, pool, schema); err != nil {
		return err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &SendEmailWorker{Mailer: mailer})
	riverClient, err := newRiverClient(pool, schema, map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}}, workers)
	if err != nil {
		return err
	}
	completed, cancelSub := riverClient.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancelSub()
	if err := riverClient.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err = errors.Join(err, riverClient.Stop(stopCtx))
	}()

	// Before the fencing migration the driver works like riverpgxv5; after
	// it, every attempt gets a lease token. Fenced is for readiness checks.
	fenced, err := riverClient.Driver().(*fencing.Driver).Fenced(ctx, schema)
	if err != nil {
		return err
	}
	out.printf("step 1: the River client on the fencing driver (fencing active: %t)\n", fenced)
	res, err := riverClient.Insert(ctx, SendEmailArgs{To: "ann@example.com", Subject: "Welcome"}, nil)
	if err != nil {
		return err
	}
	for {
		select {
		case ev := <-completed:
			if ev.Job.ID != res.Job.ID {
				continue
			}
			if ev.Kind != river.EventKindJobCompleted {
				return fmt.Errorf("job %d ended %s", ev.Job.ID, ev.Job.State)
			}
			if err := mailer.waitSent(ctx); err != nil {
				return err
			}
			out.printf("  job %s completed (attempt %d)\n", ev.Job.Kind, ev.Job.Attempt)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// step2 is the application after the second step: a weir worker runs the
// same River workers, a workflow orchestrates them, and the application's
// River client only inserts jobs.
func step2(ctx context.Context, pool *pgxpool.Pool, schema string, out *lockedWriter, mailer *printMailer, invoices, orderID string) (err error) {
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := migrator.Up(ctx, nil); err != nil { // adds the "weir" line
		return err
	}

	// The worker serves weir's queue (workflow tasks, activities) and
	// River's default queue, where the application inserts its own jobs.
	w, err := worker.New(pool, &worker.Config{Schema: schema, Queues: map[string]river.QueueConfig{
		client.QueueDefault: {MaxWorkers: 10},
		river.QueueDefault:  {MaxWorkers: 10},
	}})
	if err != nil {
		return err
	}
	worker.AddWorkflow(w, &BillingWorkflow{})
	worker.AddRiverWorker(w, &GenerateInvoiceWorker{Pool: pool, Invoices: invoices})
	worker.AddRiverWorker(w, &SendEmailWorker{Mailer: mailer})
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

	out.printf("step 2: the same workers, orchestrated by a workflow\n")
	run, err := c.Start(ctx, BillingArgs{OrderID: orderID, Customer: "ann@example.com", Cents: 4200}, &client.StartOpts{WorkflowID: "billing-" + orderID})
	if err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	result, err := client.GetResult[string](waitCtx, run)
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", run.WorkflowID, err)
	}
	if err := mailer.waitSent(waitCtx); err != nil {
		return err
	}
	var cents int64
	if err := pool.QueryRow(ctx, "SELECT cents FROM "+invoices+" WHERE order_id = $1", orderID).Scan(&cents); err != nil {
		return err
	}
	out.printf("  workflow %s: %s (invoice row: %d cents)\n", run.WorkflowID, result, cents)

	// Code that inserts River jobs directly keeps working, on an
	// insert-only client: the weir worker runs them as before.
	inserter, err := newRiverClient(pool, schema, nil, nil)
	if err != nil {
		return err
	}
	if _, err := inserter.Insert(ctx, SendEmailArgs{To: "bob@example.com", Subject: "Password reset"}, nil); err != nil {
		return err
	}
	if err := mailer.waitSent(waitCtx); err != nil {
		return err
	}
	out.printf("  a job inserted directly still runs\n")
	return nil
}
