package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/integration/chaos"
)

// The fault-injection suite. Each scenario runs a fleet of worker
// processes (integration/cmd/chaosworker) against a private Postgres server,
// starts chaos workflows, injects faults while they run, stops the faults,
// lets the fleet finish, and then checks the invariants of ARCHITECTURE.md
// (W1, W2, W4, W5, W7, F1, F2) in the database. Scenarios run one after
// another: each loads both cores of a CI machine.
//
// Sizes come from the environment: WEIR_CHAOS_WORKFLOWS (120 per scenario
// in CI; `make chaos` runs 5000), WEIR_CHAOS_RATE (starts per second, 15),
// WEIR_CHAOS_WORKERS (3), WEIR_CHAOS_STEPS (4), WEIR_CHAOS_SIGNALS (2);
// WEIR_CHAOS_RACE=1 builds the worker program with -race; WEIR_CHAOS_LOGS=dir
// keeps each scenario's logs (Postgres's, and every process's warnings) in
// dir/<test name>, passed or not. Bugs the suite
// found are reduced to regression tests in bugs_test.go.

type scenario struct {
	name     string
	viaProxy bool
	storm    bool
	// eager starts with StartOpts.EagerStart, with a worker in the
	// harness's own process (never killed) taking first tasks, so that
	// starts made at once go in groups.
	eager bool
	// inject injects faults until ctx ends.
	inject func(ctx context.Context, h *harness)
}

type sizes struct {
	workflows, workers, steps int
	signals                   int     // Bonus signals per workflow
	rate                      float64 // starts per second
}

func chaosSizes(t *testing.T) sizes {
	t.Helper()
	return sizes{
		workflows: envInt(t, envWorkflows, 120),
		signals:   envInt(t, envSignals, 2),
		workers:   envInt(t, envWorkers, 3),
		steps:     envInt(t, envSteps, 4),
		rate:      float64(envInt(t, envRate, 15)),
	}
}

func runScenario(t *testing.T, sc scenario) *report {
	t.Helper()
	ctx := t.Context()
	size := chaosSizes(t)
	h := newHarness(t, harnessOpts{workers: size.workers, viaProxy: sc.viaProxy, eager: sc.eager})
	began := time.Now()
	h.began, h.rate, h.signals = began, size.rate, size.signals

	faultCtx, stopFaults := context.WithCancel(ctx)
	var faults sync.WaitGroup
	if sc.inject != nil {
		faults.Go(func() { sc.inject(faultCtx, h) })
	}
	t.Cleanup(func() { // before the harness's cleanup, even if the test stops early
		stopFaults()
		faults.Wait()
	})
	args := func(i int) chaos.WorkflowArgs {
		return chaos.WorkflowArgs{ID: workflowID(i), Steps: size.steps, MaxSleepMillis: 200, Signals: size.signals}
	}
	var signals sync.WaitGroup
	var signalErr error
	signals.Go(func() { signalErr = h.signalAll(ctx, size.workflows) })
	if sc.storm {
		h.storm(ctx, size.workflows, args)
	} else {
		h.startAll(ctx, size.workflows, args)
	}
	signals.Wait()
	require.NoError(t, signalErr)
	// Faults go on while the workload runs, then the fleet must finish
	// everything on its own.
	h.pollClosed(ctx, size.workflows, time.Until(began.Add(time.Duration(float64(size.workflows)/size.rate*float64(time.Second))+3*time.Second)))
	stopFaults()
	faults.Wait()
	if !h.pollClosed(ctx, size.workflows, 90*time.Second+time.Duration(size.workflows)*20*time.Millisecond) {
		t.Errorf("not every workflow closed within the recovery deadline")
	}
	h.stopWorkers()

	r := h.check(ctx, size.workflows, size.steps)
	r.Elapsed = time.Since(began)
	r.logTable(t, sc.name)
	for _, v := range r.Violations {
		t.Errorf("invariant violated: %s", v)
	}
	if len(r.Violations) > 0 {
		h.logEvidence(ctx, size.steps)
	}
	if sc.inject != nil && r.Faults-btoi(sc.storm) == 0 {
		t.Errorf("no fault was injected while the workload ran: the scenario proved nothing")
	}
	return r
}

// pollClosed polls until n chaos workflows are closed (true) or timeout.
func (h *harness) pollClosed(ctx context.Context, n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		var closed int
		err := h.pool.QueryRow(ctx, "SELECT count(*) FROM "+h.names().Run+" WHERE kind = 'chaos_workflow' AND state <> 'running'").Scan(&closed)
		if err == nil && closed >= n {
			return true
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
}

// every runs fault in a loop with a random gap of up to maxGap before each,
// until ctx ends.
func every(ctx context.Context, maxGap time.Duration, fault func(context.Context) bool) {
	for sleepCtx(ctx, time.Duration(rand.Int64N(int64(maxGap)))+maxGap/4) {
		if !fault(ctx) {
			return
		}
	}
}

// TestChaosKill SIGKILLs random workers and restarts them.
func TestChaosKill(t *testing.T) {
	runScenario(t, scenario{name: "kill", inject: func(ctx context.Context, h *harness) {
		every(ctx, 1200*time.Millisecond, func(ctx context.Context) bool {
			return h.killOne(ctx, time.Duration(rand.IntN(300))*time.Millisecond)
		})
	}})
}

// TestChaosPause SIGSTOPs random workers past their lease, then SIGCONTs
// them: the woken worker still runs attempts that were given to others.
func TestChaosPause(t *testing.T) {
	r := runScenario(t, scenario{name: "pause", inject: func(ctx context.Context, h *harness) {
		every(ctx, 400*time.Millisecond, h.pauseOne)
	}})
	require.Positive(t, r.Recovered, "pauses past the lease must make the reaper recover attempts")
}

// TestChaosPostgresRestart crashes Postgres (immediate shutdown, crash
// recovery) and starts it again, repeatedly, mid-run.
func TestChaosPostgresRestart(t *testing.T) {
	runScenario(t, scenario{name: "pg-restart", inject: func(ctx context.Context, h *harness) {
		every(ctx, 3*time.Second, h.restartPostgres)
	}})
}

// TestChaosBackendCrash kills a Postgres backend (SIGKILL, as an
// out-of-memory kill) repeatedly, mid-run: every session ends and the
// server recovers in place, under the same postmaster.
func TestChaosBackendCrash(t *testing.T) {
	runScenario(t, scenario{name: "pg-backend-crash", inject: func(ctx context.Context, h *harness) {
		every(ctx, 3*time.Second, h.crashBackend)
	}})
}

// TestChaosNetwork cuts workers off from Postgres past their lease and slows
// their connections down, through a TCP proxy per worker.
func TestChaosNetwork(t *testing.T) {
	runScenario(t, scenario{name: "network", viaProxy: true, inject: func(ctx context.Context, h *harness) {
		every(ctx, 500*time.Millisecond, func(ctx context.Context) bool {
			if rand.IntN(2) == 0 {
				return h.cutOne(ctx)
			}
			return h.slowOne(ctx)
		})
	}})
}

// TestChaosStartStorm starts every workflow ID from several callers at once:
// the same request twice, another request ID, and the first request ID with
// different arguments, while workers are killed.
func TestChaosStartStorm(t *testing.T) {
	runScenario(t, scenario{name: "start-storm", storm: true, inject: func(ctx context.Context, h *harness) {
		every(ctx, 1500*time.Millisecond, func(ctx context.Context) bool { return h.killOne(ctx, 100*time.Millisecond) })
	}})
}

// TestChaosEagerStartStorm is the start storm with eager starts, which a
// worker in the starting process groups into shared transactions, while
// Postgres restarts and workers are killed.
func TestChaosEagerStartStorm(t *testing.T) {
	runScenario(t, scenario{name: "eager-start-storm", storm: true, eager: true, inject: func(ctx context.Context, h *harness) {
		var wg sync.WaitGroup
		wg.Go(func() { every(ctx, 4*time.Second, h.restartPostgres) })
		wg.Go(func() {
			every(ctx, 1500*time.Millisecond, func(ctx context.Context) bool { return h.killOne(ctx, 100*time.Millisecond) })
		})
		wg.Wait()
	}})
}

// TestChaosMixed injects every fault at random, with a start storm.
func TestChaosMixed(t *testing.T) {
	runScenario(t, scenario{name: "mixed", viaProxy: true, storm: true, inject: func(ctx context.Context, h *harness) {
		var wg sync.WaitGroup
		// Worker faults, one at a time per loop, two loops at once.
		for range 2 {
			wg.Go(func() {
				every(ctx, 500*time.Millisecond, func(ctx context.Context) bool {
					switch rand.IntN(5) {
					case 0:
						return h.killOne(ctx, 100*time.Millisecond)
					case 1:
						return h.pauseOne(ctx)
					case 2:
						return h.pauseAny(ctx)
					case 3:
						return h.cutOne(ctx)
					default:
						return h.slowOne(ctx)
					}
				})
			})
		}
		// Server faults, rarer.
		wg.Go(func() {
			every(ctx, 4*time.Second, func(ctx context.Context) bool {
				switch rand.IntN(3) {
				case 0:
					return h.restartPostgres(ctx)
				case 1:
					return h.crashBackend(ctx)
				default:
					return h.pausePostgres(ctx)
				}
			})
		})
		wg.Wait()
	}})
}

// storm starts each workflow from four callers at once (see
// TestChaosStartStorm) and checks what each was told (W1, W2): one created
// run per workflow ID, every success returns it, every refusal is typed and
// names it.
func (h *harness) storm(ctx context.Context, workflows int, args func(i int) chaos.WorkflowArgs) {
	t := h.t
	t.Helper()
	h.fault("start-storm")
	callers := []struct {
		name, request string
		sleep         int
	}{{"a1", "a", 200}, {"a2", "a", 200}, {"b", "b", 200}, {"c", "a", 201}}

	var violations atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 4 { // workflow IDs at once; each gets all callers concurrently
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= workflows {
					return
				}
				h.pace(ctx, i)
				outcomes := make([]startOutcome, len(callers))
				var inner sync.WaitGroup
				for k, caller := range callers {
					inner.Go(func() {
						a := args(i)
						a.MaxSleepMillis = caller.sleep
						o := startOutcome{caller: caller.name, request: caller.request, sleep: caller.sleep}
						deadline := time.Now().Add(time.Minute)
						for {
							o.run, o.err = h.client.Start(ctx, a, &client.StartOpts{
								EagerStart: h.eager, WorkflowID: workflowID(i), RequestID: caller.request, IDReusePolicy: client.IDReuseRejectDuplicate,
							})
							var started *client.WorkflowAlreadyStartedError
							var reuse *client.WorkflowIDReuseError
							var conflict *client.RequestConflictError
							switch {
							case errors.As(o.err, &started):
								o.refused = started.RunID
							case errors.As(o.err, &reuse):
								o.refused = reuse.RunID
							case errors.As(o.err, &conflict):
								o.refused = conflict.RunID
							case o.err != nil && time.Now().Before(deadline) && ctx.Err() == nil:
								o.retried = true
								sleepCtx(ctx, 50*time.Millisecond) // transient (a fault): retry, same request ID
								continue
							}
							break
						}
						outcomes[k] = o
					})
				}
				inner.Wait()
				if msg := judgeStorm(outcomes); msg != "" {
					violations.Add(1)
					t.Errorf("W2 start storm, workflow %s: %s", workflowID(i), msg)
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, violations.Load())
}

// startOutcome is what one caller of a start storm was told.
type startOutcome struct {
	caller, request string
	sleep           int
	run             *client.Run
	err             error
	refused         uuid.UUID // the run a typed refusal names
	retried         bool      // a transient error made it retry
}

// judgeStorm returns what is wrong with one workflow ID's storm outcomes, or "".
func judgeStorm(outcomes []startOutcome) string {
	var created []startOutcome
	for _, o := range outcomes {
		if o.err == nil && o.run.Created {
			created = append(created, o)
		}
	}
	if len(created) == 0 {
		// A start whose reply a fault lost was retried with its request ID
		// and told Created false: the run it created is the winner.
		for _, o := range outcomes {
			if o.err == nil && o.retried {
				created = append(created, o)
				break
			}
		}
	}
	if len(created) != 1 {
		return fmt.Sprintf("%d callers created a run, want 1: %s", len(created), describeOutcomes(outcomes))
	}
	winner := created[0]
	for _, o := range outcomes {
		switch {
		case o.err == nil && o.run.RunID != winner.run.RunID:
			return fmt.Sprintf("caller %s got run %s, the winner created %s: %s", o.caller, o.run.RunID, winner.run.RunID, describeOutcomes(outcomes))
		case o.err == nil && !o.run.Created && o.request != winner.request:
			return fmt.Sprintf("caller %s (request %s) got the run of request %s as a success: %s", o.caller, o.request, winner.request, describeOutcomes(outcomes))
		case o.err != nil && o.refused == uuid.Nil:
			return fmt.Sprintf("caller %s got an untyped error: %v", o.caller, o.err)
		case o.err != nil && o.refused != winner.run.RunID:
			return fmt.Sprintf("caller %s was refused naming run %s, the winner created %s: %v", o.caller, o.refused, winner.run.RunID, o.err)
		case o.err != nil && o.request == winner.request && o.sleep == winner.sleep:
			return fmt.Sprintf("caller %s repeated the winning request but was refused: %v", o.caller, o.err)
		}
	}
	return ""
}

func describeOutcomes(outcomes []startOutcome) string {
	var s string
	for _, o := range outcomes {
		if o.err != nil {
			s += fmt.Sprintf(" [%s: %v]", o.caller, o.err)
		} else {
			s += fmt.Sprintf(" [%s: run %s created=%t]", o.caller, o.run.RunID, o.run.Created)
		}
	}
	return s
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
