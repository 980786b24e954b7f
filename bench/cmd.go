package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Workload sizes and defaults.
const (
	JobsNDefault      = 100_000
	BurstNDefault     = 1000
	RateNDefault      = 100
	RateDefault       = 20.0
	CostsWorkflowsN   = 200
	CostsJobsN        = 20_000
	RunsDefault       = 3
	CostRunsDefault   = 1
	contenderFlagHelp = "comma-separated contenders"
)

// options are the flags shared by the measuring commands.
type options struct {
	contenders []string
	n          int
	out        string
	runs       int
	rtDetail   bool

	// maxConnections is the private server's max_connections (0: stock).
	maxConnections int
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark weir against River, go-workflows and DBOS on one Postgres",
		Long: `bench measures jobs (raw River vs River through weir's fencing driver),
workflows (weir, a River chain, go-workflows, DBOS) and their costs per unit.
Each result is one JSON line on stdout; progress goes to stderr.

With DATABASE_URL (a postgres:// URL of a role allowed to create databases)
it measures on that server; otherwise it starts a private durable Postgres in
a temporary directory and stops it at the end.`,
		SilenceUsage: true,
	}
	var cpuProfile, memProfile, traceFile string
	var stops []func()
	root.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process (contenders included) to this file")
	root.PersistentFlags().StringVar(&memProfile, "memprofile", "", "write the bench process's allocation profile (go tool pprof -sample_index=alloc_space) to this file when the command ends")
	root.PersistentFlags().StringVar(&traceFile, "trace", "", "write a Go execution trace of the bench process to this file (go tool trace; -pprof=sched shows the waits to be scheduled)")
	// record starts writing to path (when set) with start, and has stop
	// finish it once the command ran.
	record := func(path string, start, stop func(io.Writer) error) error {
		if path == "" {
			return nil
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := start(f); err != nil {
			return errors.Join(err, f.Close())
		}
		stops = append(stops, func() {
			if err := errors.Join(stop(f), f.Close()); err != nil {
				fmt.Fprintf(os.Stderr, "bench: writing %s: %v\n", path, err)
			}
		})
		return nil
	}
	nothing := func(io.Writer) error { return nil }
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if err := errors.Join(
			record(cpuProfile, pprof.StartCPUProfile, func(io.Writer) error { pprof.StopCPUProfile(); return nil }),
			record(traceFile, trace.Start, func(io.Writer) error { trace.Stop(); return nil }),
			record(memProfile, nothing, func(w io.Writer) error { return pprof.Lookup("allocs").WriteTo(w, 0) }),
		); err != nil {
			for _, stop := range stops { // the command will not run, nor PersistentPostRun
				stop()
			}
			return err
		}
		return nil
	}
	root.PersistentPostRun = func(*cobra.Command, []string) {
		for _, stop := range stops {
			stop()
		}
	}
	root.AddCommand(newJobsCmd(), newWorkflowsCmd(), newCostsCmd(), newSplitCmd(), newAllCmd(), newScaleCmd(), newProcCmd(), newSummarizeCmd())
	return root
}

func addMeasureFlags(cmd *cobra.Command, o *options, contenders []string) {
	cmd.Flags().StringSliceVar(&o.contenders, "contender", contenders, contenderFlagHelp+" (of "+strings.Join(contenders, ", ")+")")
	cmd.Flags().IntVar(&o.runs, "runs", RunsDefault, "repetitions (contenders interleaved)")
	cmd.Flags().StringVar(&o.out, "out", "", "directory to write results.jsonl and summary.md to (besides stdout)")
}

func newJobsCmd() *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Burn down N no-op jobs: raw River vs River through fencing.NewDriver",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withHarness(cmd.Context(), o, func(ctx context.Context, h *harness) error {
				return h.jobsRounds(ctx, o.contenders, o.n, o.runs)
			})
		},
	}
	addMeasureFlags(cmd, o, JobsContenders)
	cmd.Flags().IntVar(&o.n, "n", JobsNDefault, "jobs per run")
	return cmd
}

func newWorkflowsCmd() *cobra.Command {
	o := &options{}
	var (
		mode string
		rate float64
	)
	cmd := &cobra.Command{
		Use:   "workflows",
		Short: "N workflows of 3 sequential no-op activities, in a burst or open-loop at a rate",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if mode != ModeBurst && mode != ModeRate {
				return fmt.Errorf("--mode must be %s or %s", ModeBurst, ModeRate)
			}
			n := o.n
			if n == 0 {
				n = map[string]int{ModeBurst: BurstNDefault, ModeRate: RateNDefault}[mode]
			}
			return withHarness(cmd.Context(), o, func(ctx context.Context, h *harness) error {
				return h.workflowRounds(ctx, o.contenders, workflowsParams{mode: mode, n: n, rate: rate}, o.runs)
			})
		},
	}
	addMeasureFlags(cmd, o, WorkflowContenders)
	cmd.Flags().StringVar(&mode, "mode", ModeBurst, "burst (all started at once) or rate (open loop)")
	cmd.Flags().IntVar(&o.n, "n", 0, fmt.Sprintf("workflows per run (default %d for burst, %d for rate)", BurstNDefault, RateNDefault))
	cmd.Flags().Float64Var(&rate, "rate", RateDefault, "starts per second in rate mode")
	return cmd
}

func newCostsCmd() *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "costs",
		Short: "Round trips, statements, transactions and WAL per workflow (and per job), through a counting proxy",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withHarness(cmd.Context(), o, func(ctx context.Context, h *harness) error {
				return h.costRounds(ctx, o.contenders, o.n, o.runs)
			})
		},
	}
	addMeasureFlags(cmd, o, slices.Concat(WorkflowContenders, JobsContenders))
	cmd.Flags().BoolVar(&o.rtDetail, "rt-detail", false, "also count round trips by statement (round_trip_detail in the JSON, a top list on stderr)")
	cmd.Flags().IntVar(&o.n, "n", 0, fmt.Sprintf("units per run (default %d workflows or %d jobs)", CostsWorkflowsN, CostsJobsN))
	_ = cmd.Flags().Set("runs", fmt.Sprint(CostRunsDefault))
	cmd.Flags().Lookup("runs").DefValue = fmt.Sprint(CostRunsDefault)
	return cmd
}

func newSplitCmd() *cobra.Command {
	o := &options{}
	var rate float64
	cmd := &cobra.Command{
		Use:   "split",
		Short: "Where a workflow's latency goes at a low rate: time in Postgres (a request in flight, through the counting proxy) and the rest",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withHarness(cmd.Context(), o, func(ctx context.Context, h *harness) error {
				return h.splitRounds(ctx, o.contenders, o.n, rate, o.runs)
			})
		},
	}
	addMeasureFlags(cmd, o, WorkflowContenders)
	_ = cmd.Flags().Set("runs", fmt.Sprint(CostRunsDefault))
	cmd.Flags().Lookup("runs").DefValue = fmt.Sprint(CostRunsDefault)
	cmd.Flags().IntVar(&o.n, "n", RateNDefault, "workflows per run")
	cmd.Flags().Float64Var(&rate, "rate", RateDefault, "starts per second")
	return cmd
}

func newAllCmd() *cobra.Command {
	o := &options{}
	var costRuns int
	cmd := &cobra.Command{
		Use:   "all",
		Short: "Every workload and contender with default sizes, interleaved, then the summary table",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withHarness(cmd.Context(), o, func(ctx context.Context, h *harness) error {
				for run := 1; run <= o.runs; run++ {
					h.logf("repetition %d of %d", run, o.runs)
					if err := h.jobsRound(ctx, rotate(JobsContenders, run-1), JobsNDefault, run, o.runs); err != nil {
						return err
					}
					rotated := rotate(WorkflowContenders, run-1)
					burst := workflowsParams{mode: ModeBurst, n: BurstNDefault}
					if err := h.workflowRound(ctx, rotated, burst, run, o.runs); err != nil {
						return err
					}
					rate := workflowsParams{mode: ModeRate, n: RateNDefault, rate: RateDefault}
					if err := h.workflowRound(ctx, rotated, rate, run, o.runs); err != nil {
						return err
					}
				}
				if err := h.costRounds(ctx, slices.Concat(WorkflowContenders, JobsContenders), 0, costRuns); err != nil {
					return err
				}
				return h.splitRounds(ctx, WorkflowContenders, RateNDefault, RateDefault, costRuns)
			})
		},
	}
	cmd.Flags().IntVar(&o.runs, "runs", RunsDefault, "repetitions of jobs and workflows (contenders interleaved)")
	cmd.Flags().IntVar(&costRuns, "cost-runs", CostRunsDefault, "repetitions of costs and of the latency split")
	cmd.Flags().BoolVar(&o.rtDetail, "rt-detail", true, "in costs, also count round trips by statement")
	cmd.Flags().StringVar(&o.out, "out", "", "directory to write results.jsonl and summary.md to (besides stdout)")
	return cmd
}

func newSummarizeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "summarize [results.jsonl ...]",
		Short: "Turn JSON result lines (files, or stdin) into markdown tables",
		RunE: func(cmd *cobra.Command, args []string) error {
			var results []*Result
			readers := []io.Reader{cmd.InOrStdin()}
			if len(args) > 0 {
				readers = nil
				for _, path := range args {
					f, err := os.Open(path)
					if err != nil {
						return err
					}
					defer f.Close()
					readers = append(readers, f)
				}
			}
			for _, r := range readers {
				rs, err := readResults(r)
				if err != nil {
					return err
				}
				results = append(results, rs...)
			}
			_, err := io.WriteString(cmd.OutOrStdout(), summarize(results))
			return err
		},
	}
}

// withHarness starts the server, runs fn, stops the server, and with
// o.out writes results.jsonl and summary.md there.
func withHarness(ctx context.Context, o *options, fn func(context.Context, *harness) error) (err error) {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...) }

	srv, err := startServer(ctx, logf, cmp.Or(o.maxConnections, StockMaxConnections))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.stop()) }()
	env, err := srv.env(ctx)
	if err != nil {
		return fmt.Errorf("reading server settings: %w", err)
	}
	if *env.TLS {
		logf("connections to the server are encrypted (TLS): each round trip costs more, the more so for contenders that make more of them; add sslmode=disable to DATABASE_URL to compare on a local server")
	}
	if rt := env.RoundTrip; rt.AfterIdleMs > 4*rt.BackToBackMs {
		logf("one round trip costs %.2f ms back to back but %.2f ms after %.0f ms idle (this machine's CPUs sleep when idle): open-loop latencies at a low rate measure those wake-ups as much as the contenders; compare them within one run",
			rt.BackToBackMs, rt.AfterIdleMs, rt.IdleMs)
	}

	collected := &collector{}
	sinks := []io.Writer{os.Stdout, collected}
	var jsonl *os.File
	if o.out != "" {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
		if jsonl, err = os.Create(filepath.Join(o.out, "results.jsonl")); err != nil {
			return err
		}
		defer jsonl.Close()
		sinks = append(sinks, jsonl)
	}
	h := &harness{logf: logf, out: newResultWriter(io.MultiWriter(sinks...), env), server: srv, rtDetail: o.rtDetail}
	runErr := fn(ctx, h)

	results, err := readResults(strings.NewReader(collected.String()))
	if err != nil {
		return errors.Join(runErr, err)
	}
	summary := summarize(results)
	fmt.Fprint(os.Stderr, "\n"+summary)
	if o.out != "" {
		if err := os.WriteFile(filepath.Join(o.out, "summary.md"), []byte(summary), 0o644); err != nil {
			return errors.Join(runErr, err)
		}
		logf("wrote %s", o.out)
	}
	return runErr
}

// collector keeps what is written to it.
type collector struct{ strings.Builder }

// jobsRounds runs jobsRound runs times, rotating the contenders' order.
func (h *harness) jobsRounds(ctx context.Context, contenders []string, n, runs int) error {
	for run := 1; run <= runs; run++ {
		if err := h.jobsRound(ctx, rotate(contenders, run-1), n, run, runs); err != nil {
			return err
		}
	}
	return nil
}

// jobsRound measures each jobs contender once, in the given order, then
// records them; a fenced result gets its ratio to the raw result of the
// round.
func (h *harness) jobsRound(ctx context.Context, contenders []string, n, run, runs int) error {
	results := make([]*Result, len(contenders))
	errs := make([]error, len(contenders))
	var raw float64
	for i, contender := range contenders {
		h.logf("jobs %s n=%d run %d/%d", contender, n, run, runs)
		results[i], errs[i] = h.runJobs(ctx, contender, n, false)
		results[i].Workload, results[i].Run, results[i].Runs = WorkloadJobs, run, runs
		if contender == ContenderRaw && errs[i] == nil {
			raw = results[i].PerSec
		}
		if ctx.Err() != nil {
			break
		}
	}
	for i, res := range results {
		if res == nil {
			continue
		}
		if res.Contender == ContenderFenced && errs[i] == nil && raw > 0 {
			res.RatioToRaw = round3(res.PerSec / raw)
		}
		if err := h.record(ctx, res, errs[i]); err != nil {
			return err
		}
	}
	return nil
}

// workflowRounds runs workflowRound runs times, rotating the contenders'
// order each time.
func (h *harness) workflowRounds(ctx context.Context, contenders []string, p workflowsParams, runs int) error {
	for run := 1; run <= runs; run++ {
		if err := h.workflowRound(ctx, rotate(contenders, run-1), p, run, runs); err != nil {
			return err
		}
	}
	return nil
}

// workflowRound measures each workflow contender once in p's mode.
func (h *harness) workflowRound(ctx context.Context, contenders []string, p workflowsParams, run, runs int) error {
	for _, contender := range contenders {
		p.contender = contender
		h.logf("workflows %s %s n=%d run %d/%d", p.mode, contender, p.n, run, runs)
		res, err := h.runWorkflows(ctx, p)
		res.Workload, res.Run, res.Runs = map[string]string{ModeBurst: WorkloadWorkflowsBurst, ModeRate: WorkloadWorkflowsRate}[p.mode], run, runs
		if err := h.record(ctx, res, err); err != nil {
			return err
		}
	}
	return nil
}

// costRounds measures each contender through the counting proxy: N=200
// workflows in a burst, or 20,000 jobs, unless n is set.
func (h *harness) costRounds(ctx context.Context, contenders []string, n, runs int) error {
	for run := 1; run <= runs; run++ {
		for _, contender := range contenders {
			var (
				res *Result
				err error
			)
			if slices.Contains(JobsContenders, contender) {
				h.logf("costs %s n=%d run %d/%d", contender, cmp.Or(n, CostsJobsN), run, runs)
				res, err = h.runJobs(ctx, contender, cmp.Or(n, CostsJobsN), true)
			} else {
				h.logf("costs %s n=%d run %d/%d", contender, cmp.Or(n, CostsWorkflowsN), run, runs)
				res, err = h.runWorkflows(ctx, workflowsParams{contender: contender, mode: ModeBurst, n: cmp.Or(n, CostsWorkflowsN), countRoundTrips: true})
			}
			res.Workload, res.Run, res.Runs = WorkloadCosts, run, runs
			if err := h.record(ctx, res, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// splitRounds splits the latency of n workflows started at rate (through
// the counting proxy) for each contender, runs times.
func (h *harness) splitRounds(ctx context.Context, contenders []string, n int, rate float64, runs int) error {
	for run := 1; run <= runs; run++ {
		for _, contender := range rotate(contenders, run-1) {
			h.logf("latency split %s n=%d rate=%g run %d/%d", contender, n, rate, run, runs)
			res, err := h.runWorkflows(ctx, workflowsParams{contender: contender, mode: ModeRate, n: n, rate: rate, split: true})
			res.Workload, res.Run, res.Runs = WorkloadLatencySplit, run, runs
			if err := h.record(ctx, res, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// record prints res, with runErr as its error. It returns ctx's error once
// ctx is done, so an interrupted run stops instead of failing every
// remaining measurement.
func (h *harness) record(ctx context.Context, res *Result, runErr error) error {
	if runErr != nil {
		h.logf("%s %s failed: %v", res.Workload, res.Contender, runErr)
		*res = Result{Workload: res.Workload, Contender: res.Contender, Config: res.Config, N: res.N, Run: res.Run, Runs: res.Runs, Error: runErr.Error()}
	}
	if err := h.out.write(res); err != nil {
		return err
	}
	if len(res.RoundTripDetail) > 0 {
		h.logf("%s round trips per unit by statement:\n%s", res.Contender, detailTable(res.RoundTripDetail))
	}
	return ctx.Err()
}

// rotate returns s rotated left by k.
func rotate[T any](s []T, k int) []T {
	if len(s) == 0 {
		return nil
	}
	k %= len(s)
	return slices.Concat(s[k:], s[:k])
}

// detailTable lists round trips per unit by statement, most first.
func detailTable(detail map[string]float64) string {
	labels := slices.Collect(maps.Keys(detail))
	slices.SortFunc(labels, func(a, b string) int { return cmp.Or(cmp.Compare(detail[b], detail[a]), cmp.Compare(a, b)) })
	var b strings.Builder
	for _, label := range labels {
		fmt.Fprintf(&b, "  %8.3f  %s\n", detail[label], label)
	}
	return b.String()
}
