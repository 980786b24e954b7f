// Command hello is the smallest weir program: one workflow that calls one
// activity.
//
//	weir dev                                  # prints the DATABASE_URL of its Postgres
//	DATABASE_URL=postgres://… go run ./examples/hello -name Ada
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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// GreetArgs are the activity's arguments; Kind names the activity (and the
// River job kind that runs it).
type GreetArgs struct {
	Name string `json:"name"`
}

func (GreetArgs) Kind() string { return "hello.greet" }

// GreetActivity talks to the outside world. Here it only formats a string;
// in real code it would call a service, and weir would retry it on failure.
type GreetActivity struct {
	activity.Defaults[GreetArgs, string]
}

func (a *GreetActivity) Execute(ctx context.Context, args GreetArgs) (string, error) {
	if args.Name == "" {
		// A non-retryable error fails the activity at once.
		return "", &workflow.ApplicationError{Message: "name is required", Type: "InvalidName", NonRetryable: true}
	}
	return "Hello, " + args.Name + "!", nil
}

// HelloArgs are the workflow's arguments; Kind names the workflow type.
type HelloArgs struct {
	Name string `json:"name"`
}

func (HelloArgs) Kind() string { return "hello" }

// HelloWorkflow runs the activity and returns its result. Its code is
// replayed from history, so it only orchestrates: the work is in activities.
type HelloWorkflow struct {
	workflow.Defaults[HelloArgs, string]
}

func (w *HelloWorkflow) Run(ctx workflow.Context, args HelloArgs) (string, error) {
	greeting, err := workflow.ExecuteActivity[string](ctx, GreetArgs(args), &workflow.ActivityOpts{
		StartToCloseTimeout: 10 * time.Second,
	}).Get(ctx)
	if err != nil {
		return "", fmt.Errorf("greeting: %w", err)
	}
	return greeting, nil
}

func main() {
	name := flag.String("name", "World", "who to greet")
	schema := flag.String("schema", os.Getenv("WEIR_SCHEMA"), "Postgres schema of weir's tables (default: the search_path's first)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := connectAndRun(ctx, *schema, *name); err != nil {
		log.Fatal(err)
	}
}

func connectAndRun(ctx context.Context, schema, name string) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is not set (start `weir dev` and use the URL it prints)")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	return run(ctx, pool, schema, os.Stdout, name)
}

// run migrates schema, runs a worker, starts one workflow and prints its
// result to out.
func run(ctx context.Context, pool *pgxpool.Pool, schema string, out io.Writer, name string) (err error) {
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := migrator.Up(ctx, nil); err != nil { // idempotent, safe to run concurrently
		return fmt.Errorf("migrating: %w", err)
	}

	w, err := worker.New(pool, &worker.Config{Schema: schema})
	if err != nil {
		return err
	}
	worker.AddWorkflow(w, &HelloWorkflow{})
	worker.AddActivity(w, &GreetActivity{})
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		// Let running tasks finish (up to 10s), even if ctx was cancelled.
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err = errors.Join(err, w.Stop(stopCtx))
	}()

	c, err := client.New(pool, &client.Config{Schema: schema})
	if err != nil {
		return err
	}
	defer c.Close()

	run, err := c.Start(ctx, HelloArgs{Name: name}, &client.StartOpts{
		WorkflowID: "hello-" + name,
		// Always start a new run of this workflow ID once the last one closed.
		IDReusePolicy: client.IDReuseAllowDuplicate,
	})
	if err != nil {
		return fmt.Errorf("starting: %w", err)
	}
	fmt.Fprintf(out, "started workflow %s (generation %d)\n", run.WorkflowID, run.Generation)

	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	greeting, err := client.GetResult[string](waitCtx, run)
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", run.WorkflowID, err)
	}
	fmt.Fprintln(out, greeting)
	return nil
}
