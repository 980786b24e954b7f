package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// weirStepArgs is the weir contender's activity: it returns Value+1.
type weirStepArgs struct {
	Value int `json:"value"`
}

// Kind names the activity.
func (weirStepArgs) Kind() string { return "bench.step" }

// weirStep runs weirStepArgs.
type weirStep struct {
	activity.Defaults[weirStepArgs, int]
}

// Execute returns the value plus one, noting its execution when the
// process counts them (the scale workloads).
func (*weirStep) Execute(ctx context.Context, args weirStepArgs) (int, error) {
	if executions != nil {
		info, _ := activity.GetInfo(ctx)
		executions.record(info.WorkflowID + "#" + strconv.FormatInt(info.ScheduledEventID, 10))
	}
	return args.Value + 1, nil
}

// weirThreeStepsArgs is the weir contender's workflow: three weirSteps in
// sequence.
type weirThreeStepsArgs struct {
	Input int `json:"input"`
}

// Kind names the workflow.
func (weirThreeStepsArgs) Kind() string { return "bench.three_steps" }

// weirThreeSteps runs weirThreeStepsArgs.
type weirThreeSteps struct {
	workflow.Defaults[weirThreeStepsArgs, int]
}

// Run runs the three steps in sequence, each on the previous result.
func (*weirThreeSteps) Run(ctx workflow.Context, args weirThreeStepsArgs) (int, error) {
	v := args.Input
	for range 3 {
		var err error
		if v, err = workflow.ExecuteActivity[int](ctx, weirStepArgs{Value: v}, nil).Get(ctx); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// weirEngine is weir with its defaults. In its role roleBoth (the workflows
// workloads) one worker and one client share the pool and the starts are
// eager; roleWorker only works, and roleStarter only starts, the normal way
// (client.Start without EagerStart): the client of another process.
type weirEngine struct {
	role   string
	pool   int
	client *client.Client // nil for roleWorker
	worker *worker.Worker // nil for roleStarter

	mu   sync.Mutex
	runs map[int]*client.Run
}

// newWeirEngine migrates the database (unless role is roleStarter) and
// starts weir in role on pool, a pool of poolSize connections.
func newWeirEngine(ctx context.Context, pool *pgxpool.Pool, poolSize int, role string) (*weirEngine, error) {
	e := &weirEngine{role: role, pool: poolSize, runs: map[int]*client.Run{}}
	if role != roleStarter {
		migrator, err := migrations.New(pool, &migrations.Config{})
		if err != nil {
			return nil, err
		}
		if _, err := migrator.Up(ctx, nil); err != nil {
			return nil, fmt.Errorf("migrating: %w", err)
		}
		if e.worker, err = worker.New(pool, &worker.Config{}); err != nil {
			return nil, err
		}
		worker.AddWorkflow(e.worker, &weirThreeSteps{})
		worker.AddActivity(e.worker, &weirStep{})
		if err := e.worker.Start(ctx); err != nil {
			return nil, err
		}
	}
	if role != roleWorker {
		var err error
		config := &client.Config{}
		if e.worker != nil {
			config.EagerStarter = e.worker // the first task runs in the start
		}
		if e.client, err = client.New(pool, config); err != nil {
			return nil, errors.Join(err, e.stop(ctx))
		}
	}
	return e, nil
}

func (e *weirEngine) config() string {
	switch e.role {
	case roleWorker:
		return fmt.Sprintf("weir defaults (worker.Config{}), worker only, pool %d", e.pool)
	case roleStarter:
		return fmt.Sprintf("weir client.Start (normal start), client only, pool %d", e.pool)
	}
	return fmt.Sprintf("weir defaults (worker.Config{}), StartOpts.EagerStart, pool %d", e.pool)
}

func (e *weirEngine) start(ctx context.Context, i int) error {
	if e.client == nil {
		return errNotStarter
	}
	// With roleBoth the worker shares the process and the pool: the first
	// task runs in the start (eager workflow start).
	opts := &client.StartOpts{EagerStart: e.role == roleBoth, WorkflowID: workflowID(i)}
	run, err := e.client.Start(ctx, weirThreeStepsArgs{Input: i}, opts)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.runs[i] = run
	e.mu.Unlock()
	return nil
}

func (e *weirEngine) result(ctx context.Context, i int) (int, error) {
	e.mu.Lock()
	run := e.runs[i]
	e.mu.Unlock()
	if run == nil {
		return 0, fmt.Errorf("workflow %d was not started", i)
	}
	return client.GetResult[int](ctx, run)
}

func (*weirEngine) completedSQL() string {
	return "SELECT substr(workflow_id, 4)::int, closed_at FROM weir_run WHERE state = 'completed'"
}

func (e *weirEngine) stop(ctx context.Context) error {
	var err error
	if e.client != nil {
		err = e.client.Close()
	}
	if e.worker != nil {
		err = errors.Join(err, e.worker.Stop(ctx))
	}
	return err
}
