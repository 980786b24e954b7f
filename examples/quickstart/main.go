package main

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

type GreetArgs struct{ Name string }

func (GreetArgs) Kind() string { return "greet" }

type GreetActivity struct {
	activity.Defaults[GreetArgs, string]
}

func (*GreetActivity) Execute(ctx context.Context, args GreetArgs) (string, error) {
	return "Hello, " + args.Name + "!", nil
}

type HelloArgs struct{ Name string }

func (HelloArgs) Kind() string { return "hello" }

type HelloWorkflow struct {
	workflow.Defaults[HelloArgs, string]
}

func (*HelloWorkflow) Run(ctx workflow.Context, args HelloArgs) (string, error) {
	return workflow.ExecuteActivity[string](ctx, GreetArgs(args), nil).Get(ctx)
}

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	migrator, err := migrations.New(pool, nil) // River's tables, then fencing's, then weir's
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	worker.AddWorkflow(w, &HelloWorkflow{})
	worker.AddActivity(w, &GreetActivity{})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(ctx)
	c, err := client.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	run, err := c.Start(ctx, HelloArgs{Name: "Ada"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	greeting, err := client.GetResult[string](ctx, run)
	if err != nil {
		log.Fatal(err)
	}
	log.Println(greeting) // Hello, Ada!
}
