package worker_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type GreetArgs struct {
	Name string `json:"name"`
}

func (GreetArgs) Kind() string { return "greet" }

type GreetActivity struct {
	activity.Defaults[GreetArgs, string]
}

func (a *GreetActivity) Execute(ctx context.Context, args GreetArgs) (string, error) {
	return "Hello, " + args.Name + "!", nil
}

type WelcomeArgs struct {
	Names []string `json:"names"`
}

func (WelcomeArgs) Kind() string { return "welcome" }

type WelcomeWorkflow struct {
	workflow.Defaults[WelcomeArgs, []string]
}

func (w *WelcomeWorkflow) Run(ctx workflow.Context, args WelcomeArgs) ([]string, error) {
	var greetings []string
	for _, name := range args.Names {
		greeting, err := workflow.ExecuteActivity[string](ctx, GreetArgs{Name: name}, nil).Get(ctx)
		if err != nil {
			return nil, err
		}
		greetings = append(greetings, greeting)
	}
	return greetings, nil
}

// Run a workflow of two activities end to end.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	const schema = "weir_example_worker"
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		log.Fatal(err)
	}

	w, err := worker.New(pool, &worker.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	worker.AddWorkflow(w, &WelcomeWorkflow{})
	worker.AddActivity(w, &GreetActivity{})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(ctx)

	c, err := client.New(pool, &client.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	run, err := c.Start(ctx, WelcomeArgs{Names: []string{"Ada", "Grace"}}, &client.StartOpts{WorkflowID: "welcome-1"})
	if err != nil {
		log.Fatal(err)
	}
	getCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	greetings, err := client.GetResult[[]string](getCtx, run)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(run.WorkflowID, "generation", run.Generation)
	for _, g := range greetings {
		fmt.Println(g)
	}

	// Output:
	// welcome-1 generation 1
	// Hello, Ada!
	// Hello, Grace!
}

// Start a run eagerly: the worker that the client is linked to
// (client.Config.EagerStarter) runs its first workflow task inside Start's
// own transaction, so the run's first
// activity is already scheduled (and claimed by that worker) when Start
// returns, with no workflow-task job.
func Example_eagerStart() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	const schema = "weir_example_eager"
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		log.Fatal(err)
	}

	w, err := worker.New(pool, &worker.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	worker.AddWorkflow(w, &WelcomeWorkflow{})
	worker.AddActivity(w, &GreetActivity{})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(ctx)

	// The client is linked to the worker: its eager starts hand their
	// first tasks to it.
	c, err := client.New(pool, &client.Config{Schema: schema, EagerStarter: w})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	run, err := c.Start(ctx, WelcomeArgs{Names: []string{"Ada"}}, &client.StartOpts{EagerStart: true, WorkflowID: "welcome-eager"})
	if err != nil {
		log.Fatal(err)
	}
	page, err := c.History(ctx, run.WorkflowID, run.RunID, &client.HistoryOpts{Limit: 3})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range page.Events {
		fmt.Println(e.ID, e.Type)
	}
	getCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	greetings, err := client.GetResult[[]string](getCtx, run)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(greetings[0])

	// Output:
	// 1 WorkflowStarted
	// 2 WorkflowTaskStarted
	// 3 ActivityScheduled
	// Hello, Ada!
}
