// Package chaos holds the workflow, the activities and the tables shared by
// the fault-injection tests (package integration) and the worker program
// they run as separate processes (integration/cmd/chaosworker).
//
// A chaos workflow runs Steps activities one after another, with a durable
// timer half-way. Odd steps are effect activities: they write a row to
// chaos_effect and commit it with their outcome through activity.CompleteTx,
// so the row must exist exactly once per step (F2). Even steps are plain
// activities: they record every execution in chaos_exec, outside any
// transaction with the outcome (at-least-once). The workflow's result is a
// function of its steps alone, so a checker knows it in advance (W7).
package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/workflow"
)

// Tables are the chaos tables of a schema, sanitized and qualified.
type Tables struct {
	// Effect has one row per committed effect activity attempt: exactly one
	// per (workflow_id, step) if fencing holds.
	Effect string
	// Exec has one row per plain activity execution (at least one per step).
	Exec string
	// Stats has each worker process's fencing counters, written as they change.
	Stats string
	// Refused has one row per effect attempt whose CompleteTx was refused
	// (a stale attempt, fenced off) or whose COMMIT failed.
	Refused string
}

// NewTables names the chaos tables in schema.
func NewTables(schema string) Tables {
	return Tables{
		Effect:  dbschema.Qualify(schema, "chaos_effect"),
		Exec:    dbschema.Qualify(schema, "chaos_exec"),
		Stats:   dbschema.Qualify(schema, "chaos_stats"),
		Refused: dbschema.Qualify(schema, "chaos_refused"),
	}
}

// CreateSQL creates the chaos tables. They have no unique constraints on
// purpose: a duplicate must be recorded so that the checker can see it.
func (t Tables) CreateSQL() string {
	return "DROP TABLE IF EXISTS " + t.Effect + ", " + t.Exec + ", " + t.Stats + ", " + t.Refused + ";" +
		"CREATE TABLE " + t.Refused + " (id bigserial PRIMARY KEY, workflow_id text NOT NULL, step int NOT NULL, job_id bigint NOT NULL," +
		" attempt int NOT NULL, worker text NOT NULL, what text NOT NULL, error text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());" +
		"CREATE TABLE " + t.Effect + " (id bigserial PRIMARY KEY, workflow_id text NOT NULL, run_id uuid NOT NULL," +
		" step int NOT NULL, scheduled_event_id bigint NOT NULL, job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());" +
		"CREATE TABLE " + t.Exec + " (id bigserial PRIMARY KEY, workflow_id text NOT NULL, run_id uuid NOT NULL," +
		" step int NOT NULL, scheduled_event_id bigint NOT NULL, job_id bigint NOT NULL, attempt int NOT NULL, worker text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());" +
		"CREATE TABLE " + t.Stats + " (worker text PRIMARY KEY, renewed bigint NOT NULL, lost bigint NOT NULL," +
		" expired bigint NOT NULL, rejected bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())"
}

// WorkflowArgs are a chaos workflow's arguments.
type WorkflowArgs struct {
	ID    string `json:"id"`
	Steps int    `json:"steps"`
	// MaxSleepMillis bounds each activity's random duration, so faults land
	// mid-activity.
	MaxSleepMillis int `json:"max_sleep_millis"`
	// Signals is how many Bonus signals the workflow waits for after its
	// steps; each adds its N to the result.
	Signals int `json:"signals,omitempty"`
}

// Bonus is the chaos workflow's signal. The n-th signal sent to a workflow
// (from 1) carries N = n, so a lost or doubled signal changes the result.
type Bonus struct {
	N int `json:"n"`
}

func (Bonus) Kind() string { return "chaos_bonus" }

// SignalSum is what signals Bonus signals (1, 2, …) add to the result.
func SignalSum(signals int) int { return signals * (signals + 1) / 2 }

func (WorkflowArgs) Kind() string { return "chaos_workflow" }

// IsEffect reports whether step is an effect (CompleteTx) step.
func IsEffect(step int) bool { return step%2 == 1 }

// StepValue is what step contributes to the result.
func StepValue(step int) int {
	if IsEffect(step) {
		return 10 * step
	}
	return step
}

// Expected is the result of a chaos workflow of steps steps.
func Expected(steps int) int {
	sum := 0
	for step := 1; step <= steps; step++ {
		sum += StepValue(step)
	}
	return sum
}

// Workflow is the chaos workflow.
type Workflow struct {
	workflow.Defaults[WorkflowArgs, int]
}

// Run runs the steps in order, sleeping on a durable timer half-way, then
// waits for its signals.
func (w *Workflow) Run(ctx workflow.Context, args WorkflowArgs) (int, error) {
	opts := &workflow.ActivityOpts{
		RetryPolicy: &workflow.RetryPolicy{InitialInterval: 50 * time.Millisecond, MaximumInterval: time.Second},
	}
	sum := 0
	for step := 1; step <= args.Steps; step++ {
		if step == args.Steps/2+1 {
			if err := workflow.Sleep(ctx, 10*time.Millisecond); err != nil {
				return 0, err
			}
		}
		stepArgs := StepArgs{WorkflowID: args.ID, Step: step, MaxSleepMillis: args.MaxSleepMillis}
		var n int
		var err error
		if IsEffect(step) {
			n, err = workflow.ExecuteActivity[int](ctx, EffectArgs(stepArgs), opts).Get(ctx)
		} else {
			n, err = workflow.ExecuteActivity[int](ctx, stepArgs, opts).Get(ctx)
		}
		if err != nil {
			return 0, err
		}
		sum += n
	}
	bonus := workflow.GetSignalChannel[Bonus](ctx)
	for range args.Signals {
		b, err := bonus.Receive(ctx)
		if err != nil {
			return 0, err
		}
		sum += b.N
	}
	return sum, nil
}

// StepArgs are a plain step's arguments.
type StepArgs struct {
	WorkflowID     string `json:"workflow_id"`
	Step           int    `json:"step"`
	MaxSleepMillis int    `json:"max_sleep_millis"`
}

func (StepArgs) Kind() string { return "chaos_plain" }

// EffectArgs are an effect step's arguments.
type EffectArgs StepArgs

func (EffectArgs) Kind() string { return "chaos_effect" }

// PlainActivity records its execution, then works a little.
type PlainActivity struct {
	activity.Defaults[StepArgs, int]
	Pool   *pgxpool.Pool
	Tables Tables
	Worker string
}

func (a *PlainActivity) Execute(ctx context.Context, args StepArgs) (int, error) {
	info, _ := activity.GetInfo(ctx)
	if _, err := a.Pool.Exec(ctx, "INSERT INTO "+a.Tables.Exec+" (workflow_id, run_id, step, scheduled_event_id, job_id, attempt, worker) VALUES ($1, $2, $3, $4, $5, $6, $7)",
		info.WorkflowID, info.RunID, args.Step, info.ScheduledEventID, info.JobID, info.Attempt, a.Worker); err != nil {
		return 0, err
	}
	if err := work(ctx, args.MaxSleepMillis); err != nil {
		return 0, err
	}
	return StepValue(args.Step), nil
}

// EffectActivity works a little, then writes its effect and commits it with
// its outcome.
type EffectActivity struct {
	activity.Defaults[EffectArgs, int]
	Pool   *pgxpool.Pool
	Tables Tables
	Worker string
}

func (a *EffectActivity) Execute(ctx context.Context, args EffectArgs) (int, error) {
	info, _ := activity.GetInfo(ctx)
	if err := work(ctx, args.MaxSleepMillis); err != nil {
		return 0, err
	}
	tx, err := a.Pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "INSERT INTO "+a.Tables.Effect+" (workflow_id, run_id, step, scheduled_event_id, job_id, attempt, worker) VALUES ($1, $2, $3, $4, $5, $6, $7)",
		info.WorkflowID, info.RunID, args.Step, info.ScheduledEventID, info.JobID, info.Attempt, a.Worker); err != nil {
		return 0, err
	}
	// A stale attempt (paused or cut off past its lease) reaches this point
	// too: CompleteTx must refuse it and abort tx, effect included.
	if err := activity.CompleteTx(ctx, tx, StepValue(args.Step)); err != nil {
		what := "complete_tx_failed"
		if errors.Is(err, fencing.ErrLeaseLost) {
			what = "complete_tx_fenced"
		}
		a.refused(ctx, args, info, what, err)
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		a.refused(ctx, args, info, "commit_failed", err)
		return 0, err
	}
	return StepValue(args.Step), nil
}

// refused records, best effort, an attempt whose effect was refused.
func (a *EffectActivity) refused(ctx context.Context, args EffectArgs, info activity.Info, what string, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = a.Pool.Exec(ctx, "INSERT INTO "+a.Tables.Refused+" (workflow_id, step, job_id, attempt, worker, what, error) VALUES ($1, $2, $3, $4, $5, $6, $7)",
		info.WorkflowID, args.Step, info.JobID, info.Attempt, a.Worker, what, err.Error())
}

// work sleeps a random time up to maxMillis, or until ctx ends.
func work(ctx context.Context, maxMillis int) error {
	if maxMillis <= 0 {
		return nil
	}
	timer := time.NewTimer(time.Duration(rand.IntN(maxMillis)+1) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Env names the worker program's environment.
const (
	EnvDatabaseURL = "CHAOS_DATABASE_URL"
	EnvSchema      = "CHAOS_SCHEMA"
	EnvLeaseTTL    = "CHAOS_LEASE_TTL"
	EnvWorkerName  = "CHAOS_WORKER_NAME"
	// EnvLogLevel is the worker's slog level ("warn", "error" when unset).
	EnvLogLevel = "CHAOS_LOG_LEVEL"
)

// WorkerName is a process's name in chaos tables: its slot and its pid, so a
// restarted slot is a new worker.
func WorkerName(slot string) string { return fmt.Sprintf("%s/%d", slot, os.Getpid()) }

// WriteStats upserts a worker's counters.
func (t Tables) WriteStats(ctx context.Context, db *pgxpool.Pool, worker string, renewed, lost, expired, rejected int64) error {
	_, err := db.Exec(ctx, "INSERT INTO "+t.Stats+" (worker, renewed, lost, expired, rejected) VALUES ($1, $2, $3, $4, $5)"+
		" ON CONFLICT (worker) DO UPDATE SET renewed = $2, lost = $3, expired = $4, rejected = $5, updated_at = now()",
		worker, renewed, lost, expired, rejected)
	return err
}
