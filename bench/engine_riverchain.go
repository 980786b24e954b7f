package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/weirhq/weir/migrations"
)

// chainStepArgs is step Step of the River chain's workflow WF: it computes
// Value+1 and inserts step Step+1 with it, or records it as the output of
// step 3.
type chainStepArgs struct {
	WF    int `json:"wf"`
	Step  int `json:"step"`
	Value int `json:"value"`
}

// Kind is the River job kind of every step.
func (chainStepArgs) Kind() string { return "chain_step" }

// chainStepWorker works the steps of the River chain.
type chainStepWorker struct {
	river.WorkerDefaults[chainStepArgs]
	pool *pgxpool.Pool
}

// Work inserts the next step (InsertTx) and completes this one
// (JobCompleteTx) in one transaction.
func (w *chainStepWorker) Work(ctx context.Context, job *river.Job[chainStepArgs]) error {
	client := river.ClientFromContext[pgx.Tx](ctx)
	next := job.Args.Value + 1
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if job.Args.Step < 3 {
			if _, err := client.InsertTx(ctx, tx, chainStepArgs{WF: job.Args.WF, Step: job.Args.Step + 1, Value: next}, nil); err != nil {
				return err
			}
		} else if err := river.RecordOutput(ctx, next); err != nil {
			return err
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}

// riverChainEngine is the baseline of a workflow on plain River: each step
// a job whose worker enqueues the next, with perf-anchors' tuned knobs.
type riverChainEngine struct {
	client *river.Client[pgx.Tx]
	pool   *pgxpool.Pool
}

func newRiverChainEngine(ctx context.Context, db *benchDB) (*riverChainEngine, error) {
	migrator, err := migrations.New(db.pool, &migrations.Config{})
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineMain}); err != nil {
		return nil, fmt.Errorf("migrating River: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &chainStepWorker{pool: db.pool})
	client, err := river.NewClient(riverpgxv5.New(db.pool), &river.Config{
		FetchCooldown:     TunedFetchCooldown,
		FetchPollInterval: TunedFetchPollInterval,
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: TunedMaxWorkers}},
		Workers:           workers,
	})
	if err != nil {
		return nil, err
	}
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return &riverChainEngine{client: client, pool: db.pool}, nil
}

func (*riverChainEngine) config() string { return tunedConfig }

func (e *riverChainEngine) start(ctx context.Context, i int) error {
	_, err := e.client.Insert(ctx, chainStepArgs{WF: i, Step: 1, Value: i}, nil)
	return err
}

// result reads the output step 3 recorded.
func (e *riverChainEngine) result(ctx context.Context, i int) (int, error) {
	var out *int
	err := e.pool.QueryRow(ctx, `SELECT (metadata->'output')::int FROM river_job
		WHERE kind = 'chain_step' AND (args->>'wf')::int = $1 AND (args->>'step')::int = 3 AND state = 'completed'`, i).Scan(&out)
	if err != nil {
		return 0, err
	}
	if out == nil {
		return 0, errors.New("step 3 recorded no output")
	}
	return *out, nil
}

func (*riverChainEngine) completedSQL() string {
	return `SELECT (args->>'wf')::int, finalized_at FROM river_job
		WHERE kind = 'chain_step' AND (args->>'step')::int = 3 AND state = 'completed'`
}

func (e *riverChainEngine) stop(ctx context.Context) error { return e.client.Stop(ctx) }
