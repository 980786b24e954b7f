package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

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

// Execute returns the value plus one.
func (*weirStep) Execute(_ context.Context, args weirStepArgs) (int, error) {
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

// weirEngine is weir with its defaults, its starts eager: one worker and one
// client sharing the pool of PoolMaxConns connections.
type weirEngine struct {
	client *client.Client
	worker *worker.Worker

	mu   sync.Mutex
	runs map[int]*client.Run
}

func newWeirEngine(ctx context.Context, db *benchDB) (*weirEngine, error) {
	migrator, err := migrations.New(db.pool, &migrations.Config{})
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		return nil, fmt.Errorf("migrating: %w", err)
	}
	w, err := worker.New(db.pool, &worker.Config{})
	if err != nil {
		return nil, err
	}
	worker.AddWorkflow(w, &weirThreeSteps{})
	worker.AddActivity(w, &weirStep{})
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	c, err := client.New(db.pool, &client.Config{EagerStarter: w})
	if err != nil {
		return nil, errors.Join(err, w.Stop(ctx))
	}
	return &weirEngine{client: c, worker: w, runs: map[int]*client.Run{}}, nil
}

func (*weirEngine) config() string {
	return "weir defaults (worker.Config{}), StartOpts.EagerStart, pool 20"
}

func (e *weirEngine) start(ctx context.Context, i int) error {
	// The client is linked to the worker: the first task runs in
	// the start (eager workflow start).
	run, err := e.client.Start(ctx, weirThreeStepsArgs{Input: i}, &client.StartOpts{EagerStart: true, WorkflowID: workflowID(i)})
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
	return errors.Join(e.client.Close(), e.worker.Stop(ctx))
}
