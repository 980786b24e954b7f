package main

import (
	"encoding/json"
	"io"
	"math"
	"slices"
	"sync"
	"time"
)

// Workload names, as they appear in Result.Workload.
const (
	WorkloadJobs           = "jobs"
	WorkloadWorkflowsBurst = "workflows-burst"
	WorkloadWorkflowsRate  = "workflows-rate"
	WorkloadCosts          = "costs"
	WorkloadLatencySplit   = "latency-split"
)

// Result is one measurement: one workload, one contender, one repetition.
// It is printed as one JSON line. Fields a workload does not measure are
// omitted.
type Result struct {
	// Workload is one of the Workload constants.
	Workload string `json:"workload"`

	// Contender names what ran: raw, fenced, weir, riverchain, goworkflows,
	// dbos-direct, dbos-queue.
	Contender string `json:"contender"`

	// Config describes the contender's configuration in words.
	Config string `json:"config"`

	// N is the number of units (jobs or workflows) of the measurement.
	N int `json:"n"`

	// Run is this repetition's number, from 1; Runs is how many were planned.
	Run  int `json:"run"`
	Runs int `json:"runs"`

	// Unit is what PerSec counts: "jobs/s" or "wf/s".
	Unit string `json:"unit,omitempty"`

	// PerSec is the throughput: N / (last completion - first start).
	PerSec float64 `json:"per_sec,omitempty"`

	// RatioToRaw is, for the fenced jobs contender, its PerSec divided by
	// that of the raw River run of the same repetition.
	RatioToRaw float64 `json:"ratio_to_raw,omitempty"`

	// Warmup is how many workflows completed before the measured window
	// (workflow workloads): none of them counts in any figure.
	Warmup int `json:"warmup,omitempty"`

	// P50Ms and P99Ms are start-to-completion latency percentiles in
	// milliseconds.
	P50Ms float64 `json:"p50_ms,omitempty"`
	P99Ms float64 `json:"p99_ms,omitempty"`

	// RoundTripsPerUnit, StatementsPerUnit and TxPerUnit come from the
	// counting proxy (costs workload only).
	RoundTripsPerUnit float64 `json:"round_trips_per_unit,omitempty"`
	StatementsPerUnit float64 `json:"statements_per_unit,omitempty"`
	TxPerUnit         float64 `json:"tx_per_unit,omitempty"`

	// Connections is how many connections the contender opened during the
	// measured window (costs workload only): reconnecting is a cost too.
	Connections int64 `json:"connections,omitempty"`

	// RoundTripDetail splits RoundTripsPerUnit by the statement that
	// opened each round trip (costs with --rt-detail only).
	RoundTripDetail map[string]float64 `json:"round_trip_detail,omitempty"`

	// InPostgresMs, ElsewhereMs and PostgresSpans split a workflow's
	// start-to-completion latency (latency-split workload only, medians
	// over its workflows): the time in which Postgres had a request of the
	// contender's connections to answer, the rest (in the contender's
	// process, or waiting on its timers), and in how many separate spans
	// Postgres was busy.
	InPostgresMs  float64 `json:"in_postgres_ms,omitempty"`
	ElsewhereMs   float64 `json:"elsewhere_ms,omitempty"`
	PostgresSpans float64 `json:"postgres_spans,omitempty"`

	// PathMs is the same latency in order (latency-split workload only):
	// the time before Postgres first had a request to answer, the first
	// busy span, the time to the next, and so on, each entry the median
	// over the workflows that have it (busyClock.path, medianPath).
	PathMs []float64 `json:"path_ms,omitempty"`

	// WALBytesPerUnit is the pg_current_wal_insert_lsn() delta over the
	// measured window divided by N.
	WALBytesPerUnit float64 `json:"wal_bytes_per_unit,omitempty"`

	// BenchCPUUsPerUnit and PostgresCPUUsPerUnit are the CPU time the bench
	// process (the contender runs in it) and every postgres process on this
	// machine used over the measured window, in microseconds per unit:
	// steadier than throughput on a machine whose speed drifts between runs
	// (a private or local server only; zero when /proc cannot tell).
	BenchCPUUsPerUnit    float64 `json:"bench_cpu_us_per_unit,omitempty"`
	PostgresCPUUsPerUnit float64 `json:"postgres_cpu_us_per_unit,omitempty"`

	// The scale workloads run each contender in processes of their own
	// (BenchCPUUsPerUnit is then the CPU of those processes) and add:

	// Pool is the connections of each of the contender's pools; Workers how
	// many worker processes ran the workflows (a separate starter process
	// started them); ProxyDelayMs the delay each way of the proxy between
	// the contender and Postgres.
	Pool         int     `json:"pool,omitempty"`
	Workers      int     `json:"workers,omitempty"`
	ProxyDelayMs float64 `json:"proxy_delay_ms,omitempty"`

	// HarnessCPUUsPerUnit is the CPU time of the harness's process (which
	// then runs no contender: completion polling, sampling, the proxy) per
	// unit.
	HarnessCPUUsPerUnit float64 `json:"harness_cpu_us_per_unit,omitempty"`

	// GCShare is the share of the contender's processes' CPU time over the
	// window that went to garbage collection, by each process's CPU
	// profile: the samples whose stack enters the collector's mark workers,
	// assists or stop-the-world phases (gcFunctions) over all samples.
	GCShare float64 `json:"gc_share,omitempty"`

	// GCShareBy splits GCShare by process (its connections'
	// application_name) when the contender ran several: each process's GC
	// samples over its own.
	GCShareBy map[string]float64 `json:"gc_share_by,omitempty"`

	// AllocBytesPerUnit is the bytes the contender's processes allocated on
	// the heap over the window per unit, and GCCycles the garbage
	// collections they completed in it (runtime/metrics): unlike GCShare,
	// neither depends on how busy the machine is.
	AllocBytesPerUnit float64 `json:"alloc_bytes_per_unit,omitempty"`
	GCCycles          int     `json:"gc_cycles,omitempty"`

	// BusyBackends is the average number of the contender's backends
	// running a statement (pg_stat_activity.state = 'active'), sampled
	// every 50 ms over the window; BusyBackendsBy splits it by the
	// connections' application_name (a process of the contender).
	BusyBackends   float64            `json:"busy_backends,omitempty"`
	BusyBackendsBy map[string]float64 `json:"busy_backends_by,omitempty"`

	// DuplicateExecutions is how many step executions repeated a step that
	// had already run (warm-up included), counted by the processes that
	// ran them: anything but 0 fails the measurement.
	DuplicateExecutions *int `json:"duplicate_executions,omitempty"`

	// BusiestWorkerShare is, with several worker processes, the step
	// executions of the one that ran the most over their mean (warm-up
	// included): 1 when they shared the work evenly, K when one of K ran
	// it all.
	BusiestWorkerShare float64 `json:"busiest_worker_share,omitempty"`

	// ElapsedSec is the measured window in seconds.
	ElapsedSec float64 `json:"elapsed_sec,omitempty"`

	// Error is set when the run failed; the numbers are then absent.
	Error string `json:"error,omitempty"`

	// Env describes the machine, Postgres and weir's commit.
	Env *Env `json:"env,omitempty"`

	// Time is when the result was recorded.
	Time time.Time `json:"time"`
}

// Env is the environment a Result was measured in.
type Env struct {
	// CPUs is runtime.NumCPU().
	CPUs int `json:"cpus"`

	// CPUModel is the CPUs' model name, "" where the system does not tell
	// it. Compare figures only between results of the same model and CPU
	// count (see docs/decisions/0057).
	CPUModel string `json:"cpu_model,omitempty"`

	// GoVersion is runtime.Version().
	GoVersion string `json:"go"`

	// PG holds version() under "version" and the server settings that
	// matter for these workloads.
	PG map[string]string `json:"pg"`

	// PrivateServer is true when the harness started its own Postgres.
	PrivateServer bool `json:"private_server"`

	// TLS is true when the contenders' connections are encrypted (the
	// server accepted sslmode's request). Encryption adds to every round
	// trip, so it weighs more on contenders that make more of them; costs
	// are counted through a plain proxy either way. Nil in results recorded
	// before the harness looked.
	TLS *bool `json:"tls,omitempty"`

	// RoundTrip is what one round trip (SELECT 1) costs on the harness's
	// connection, back to back and after the connection sat idle. Nil in
	// results recorded before the harness measured it.
	RoundTrip *RoundTrip `json:"round_trip,omitempty"`

	// WeirCommit is the git commit of the weir checkout, "-dirty" appended
	// when it has uncommitted changes.
	WeirCommit string `json:"weir_commit"`
}

// RoundTrip is the median cost of one round trip, in milliseconds. On a
// virtual machine whose CPUs sleep when idle, a round trip after a pause
// waits for the CPUs to wake, which can cost many times a busy one: an
// open-loop run at a low rate pays that on most of its round trips, a
// burst on few.
type RoundTrip struct {
	// BackToBackMs is a round trip sent as soon as the previous one
	// returned.
	BackToBackMs float64 `json:"back_to_back_ms"`

	// AfterIdleMs is a round trip sent after the connection and the
	// process sat idle for IdleMs.
	AfterIdleMs float64 `json:"after_idle_ms"`
	IdleMs      float64 `json:"idle_ms"`
}

// resultWriter prints Results as JSON lines, one at a time.
type resultWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
	env *Env
}

func newResultWriter(w io.Writer, env *Env) *resultWriter {
	return &resultWriter{enc: json.NewEncoder(w), env: env}
}

func (w *resultWriter) write(r *Result) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	r.Env = w.env
	r.Time = time.Now().UTC()
	return w.enc.Encode(r)
}

// percentile returns the p-th percentile (0 < p <= 100) of values by the
// nearest-rank method: the smallest value at least p% of values are less than
// or equal to. It returns NaN for no values. values is not modified.
func percentile(values []float64, p float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// durationsMs converts durations to float milliseconds.
func durationsMs(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}
