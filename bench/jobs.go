package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/migrations"
)

// Jobs contenders.
const (
	ContenderRaw    = "raw"
	ContenderFenced = "fenced"
)

// River knobs of the jobs workload and of the River chain: perf-anchors'
// "tuned" configuration.
const (
	TunedFetchCooldown     = 2 * time.Millisecond
	TunedFetchPollInterval = 20 * time.Millisecond
	TunedMaxWorkers        = 100
)

// JobsInsertBatch is the InsertMany batch size of the jobs workload.
const JobsInsertBatch = 5000

const tunedConfig = "tuned: FetchCooldown 2ms, FetchPollInterval 20ms, MaxWorkers 100, pool 20"

// noopArgs is the jobs workload's job: it does nothing.
type noopArgs struct{}

// Kind is the River job kind.
func (noopArgs) Kind() string { return "bench_noop" }

// noopWorker works noopArgs.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

// Work does nothing.
func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// runJobs inserts n no-op jobs with InsertMany, then starts a River client
// (raw riverpgxv5, or the fencing driver with its plugin first) and measures
// how fast it burns them down. With countRoundTrips the client's pool goes
// through a counting proxy.
func (h *harness) runJobs(ctx context.Context, contender string, n int, countRoundTrips bool) (*Result, error) {
	res := &Result{Contender: contender, Config: tunedConfig, N: n, Unit: "jobs/s"}
	db, err := h.openDatabase(ctx, contender, dbOptions{proxy: countRoundTrips})
	if err != nil {
		return res, err
	}
	defer db.close()

	migrator, err := migrations.New(db.pool, &migrations.Config{})
	if err != nil {
		return res, err
	}
	if _, err := migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineMain}); err != nil {
		return res, fmt.Errorf("migrating River: %w", err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	config := &river.Config{
		FetchCooldown:     TunedFetchCooldown,
		FetchPollInterval: TunedFetchPollInterval,
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: TunedMaxWorkers}},
		Workers:           workers,
	}
	var driver riverdriver.Driver[pgx.Tx]
	switch contender {
	case ContenderRaw:
		driver = riverpgxv5.New(db.pool)
	case ContenderFenced:
		if _, err := migrator.Up(ctx, &migrations.UpOpts{Line: migrations.LineFencing}); err != nil {
			return res, fmt.Errorf("migrating fencing: %w", err)
		}
		fencingDriver, err := fencing.NewDriver(db.pool, nil)
		if err != nil {
			return res, err
		}
		config.Plugins = []rivertype.Plugin{fencingDriver.Plugin()}
		driver = fencingDriver
	default:
		return res, fmt.Errorf("unknown jobs contender %q", contender)
	}
	client, err := river.NewClient(driver, config)
	if err != nil {
		return res, err
	}

	for inserted := 0; inserted < n; inserted += JobsInsertBatch {
		params := make([]river.InsertManyParams, min(JobsInsertBatch, n-inserted))
		for i := range params {
			params[i] = river.InsertManyParams{Args: noopArgs{}}
		}
		if _, err := client.InsertMany(ctx, params); err != nil {
			return res, fmt.Errorf("inserting jobs: %w", err)
		}
	}

	completed, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n + 100,
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
	})
	defer cancel()

	window, err := db.beginWindow(ctx)
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return res, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()
	timeout := time.After(5 * time.Minute)
	for done := 0; done < n; done++ {
		select {
		case <-completed:
		case <-timeout:
			return res, fmt.Errorf("burn-down timed out after %d of %d jobs", done, n)
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	elapsed := time.Since(start)
	if err := window.end(ctx, res, n); err != nil {
		return res, err
	}
	res.ElapsedSec = elapsed.Seconds()
	res.PerSec = float64(n) / elapsed.Seconds()
	return res, nil
}
