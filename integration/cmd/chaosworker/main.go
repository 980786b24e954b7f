// Command chaosworker is the worker process of the fault-injection tests
// (package integration): a weir worker running the chaos workflow and its
// activities against the database in CHAOS_DATABASE_URL, schema
// CHAOS_SCHEMA, with lease TTL CHAOS_LEASE_TTL. The tests kill, pause and cut
// it off; it keeps its fencing counters in chaos_stats. SIGTERM or the end of
// stdin (the test process died) stops it gracefully.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/integration/chaos"
	"github.com/weirhq/weir/worker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		os.Exit(1)
	}
}

func run() error {
	url, schema := os.Getenv(chaos.EnvDatabaseURL), os.Getenv(chaos.EnvSchema)
	if url == "" || schema == "" {
		return fmt.Errorf("%s and %s are required", chaos.EnvDatabaseURL, chaos.EnvSchema)
	}
	leaseTTL := 2 * time.Second
	if v := os.Getenv(chaos.EnvLeaseTTL); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s: %w", chaos.EnvLeaseTTL, err)
		}
		leaseTTL = d
	}
	name := chaos.WorkerName(os.Getenv(chaos.EnvWorkerName))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { // the test process died: its pipe closes
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	config, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	config.MaxConns = 20
	config.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		return err
	}
	defer pool.Close()

	tables := chaos.NewTables(schema)
	level := slog.LevelError
	if v := os.Getenv(chaos.EnvLogLevel); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return fmt.Errorf("%s: %w", chaos.EnvLogLevel, err)
		}
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	w, err := worker.New(pool, &worker.Config{
		Fencing: &fencing.Config{
			LeaseTTL:       leaseTTL,
			ReaperInterval: leaseTTL / 5,
		},
		Logger:        logger,
		Schema:        schema,
		SweepInterval: 500 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	worker.AddWorkflow(w, &chaos.Workflow{})
	worker.AddActivity(w, &chaos.PlainActivity{Pool: pool, Tables: tables, Worker: name})
	worker.AddActivity(w, &chaos.EffectActivity{Pool: pool, Tables: tables, Worker: name})

	// Postgres may be down (a restart scenario) when the process starts.
	for {
		err = w.Start(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		fmt.Fprintln(os.Stderr, "chaosworker: start, retrying:", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Println("started", name)

	writeStats := func(ctx context.Context) error {
		s := w.FencingStats()
		return tables.WriteStats(ctx, pool, name, s.LeasesRenewed, s.LeasesLost, s.LeasesExpired, s.StaleWritesRejected)
	}
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	var last [4]int64
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-ticker.C:
			s := w.FencingStats()
			now := [4]int64{s.LeasesRenewed, s.LeasesLost, s.LeasesExpired, s.StaleWritesRejected}
			if now != last {
				writeCtx, cancel := context.WithTimeout(ctx, time.Second)
				if writeStats(writeCtx) == nil {
					last = now
				}
				cancel()
			}
		}
	}

	stopCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	stopErr := w.Stop(stopCtx)
	statsErr := writeStats(stopCtx)
	s := w.FencingStats()
	fmt.Printf("stopped %s renewed=%d lost=%d expired=%d rejected=%d\n", name, s.LeasesRenewed, s.LeasesLost, s.LeasesExpired, s.StaleWritesRejected)
	return errors.Join(stopErr, statsErr)
}
