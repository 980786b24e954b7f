package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// Parts of the scale command.
const (
	ScalePartBurst   = "burst"
	ScalePartWorkers = "workers"
	ScalePartHop     = "hop"
)

// scaleOptions are the scale command's flags.
type scaleOptions struct {
	parts            []string
	contenders       []string
	workerContenders []string
	hopContenders    []string
	workerCounts     []int
	burstN, bigN     int
	workersN, hopN   int
	bigPool          int
	hopPools         []int
	delay            time.Duration
	procProfile      string
}

func newScaleCmd() *cobra.Command {
	o := &options{maxConnections: ScaleMaxConnections}
	s := &scaleOptions{}
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "Bursts with each contender in processes of its own: pool 20 and 64, 20,000 workflows, K worker processes, Postgres behind a delaying proxy",
		Long: `scale runs every contender in processes of its own, the harness only
measuring, and reports beside throughput and latency the busy backends, the
CPU of the contender's processes, of Postgres and of the harness, the
contender's GC share and its duplicate step executions.

  burst    each contender at pool 20 and 64 (--burst-n) and a big burst at
           pool 64 (--big-n)
  workers  the normal start with 1, 2 and 4 worker processes (--workers)
  hop      Postgres behind a proxy delaying each direction (--delay)`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := s.validate(); err != nil {
				return err
			}
			if s.procProfile != "" {
				if err := os.MkdirAll(s.procProfile, 0o755); err != nil {
					return fmt.Errorf("--proc-profile: %w", err)
				}
			}
			return withHarness(cmd.Context(), o, func(ctx context.Context, h *harness) error {
				for run := 1; run <= o.runs; run++ {
					h.logf("scale repetition %d of %d", run, o.runs)
					if err := h.scaleRound(ctx, s, run, o.runs); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringSliceVar(&s.parts, "parts", []string{ScalePartBurst, ScalePartWorkers, ScalePartHop}, "parts to run: burst, workers, hop")
	cmd.Flags().StringSliceVar(&s.contenders, "contender", ScaleContenders, contenderFlagHelp+" of the bursts (of "+strings.Join(ScaleContenders, ", ")+")")
	cmd.Flags().StringSliceVar(&s.workerContenders, "workers-contender", []string{ContenderWeirNormal}, contenderFlagHelp+" of the worker-process part (weir-normal, dbos-queue)")
	cmd.Flags().StringSliceVar(&s.hopContenders, "hop-contender", []string{ContenderWeir, ContenderWeirNormal, ContenderDBOSDirect}, contenderFlagHelp+" of the hop part")
	cmd.Flags().IntSliceVar(&s.workerCounts, "workers", ScaleWorkerCounts, "worker-process counts of the workers part")
	cmd.Flags().IntVar(&s.burstN, "burst-n", ScaleBurstN, "workflows of the bursts at pool 20 and 64 (0: none)")
	cmd.Flags().IntVar(&s.bigN, "big-n", ScaleBigN, "workflows of the big burst (0: none)")
	cmd.Flags().IntVar(&s.bigPool, "big-pool", ScalePool, "pool of the big burst")
	cmd.Flags().IntVar(&s.workersN, "workers-n", ScaleWorkersN, "workflows of the workers part")
	cmd.Flags().IntVar(&s.hopN, "hop-n", ScaleHopN, "workflows of the hop part")
	cmd.Flags().IntSliceVar(&s.hopPools, "hop-pool", []int{ScalePool}, "pools of the hop part")
	cmd.Flags().DurationVar(&s.delay, "delay", ScaleHopDelay, "the hop part's proxy delay, each direction")
	cmd.Flags().StringVar(&s.procProfile, "proc-profile", "", "directory to write each contender process's profiles of each measurement to: CPU, allocations at the window's start and end (pprof -base), goroutines at their peak")
	cmd.Flags().IntVar(&o.runs, "runs", 1, "repetitions (contenders interleaved, their order rotated)")
	cmd.Flags().StringVar(&o.out, "out", "", "directory to write results.jsonl and summary.md to (besides stdout)")
	cmd.Flags().BoolVar(&o.rtDetail, "rt-detail", false, "with a proxy (the hop part), also count round trips by statement (round_trip_detail in the JSON, a top list on stderr)")
	cmd.Flags().IntVar(&o.maxConnections, "max-connections", ScaleMaxConnections, "max_connections of the private server (with DATABASE_URL, the server's own must allow as many)")
	return cmd
}

// scaleRound runs the chosen parts of the scale command once, each
// part's contenders rotated by the repetition.
func (h *harness) scaleRound(ctx context.Context, s *scaleOptions, run, runs int) error {
	type measurement struct {
		workload string
		p        scaleParams
	}
	var plan []measurement
	for _, part := range s.parts {
		switch part {
		case ScalePartBurst:
			var sizes []scaleParams
			if s.burstN > 0 {
				sizes = append(sizes, scaleParams{pool: PoolMaxConns, n: s.burstN}, scaleParams{pool: ScalePool, n: s.burstN})
			}
			if s.bigN > 0 {
				sizes = append(sizes, scaleParams{pool: s.bigPool, n: s.bigN})
			}
			for _, size := range sizes {
				for _, contender := range rotate(s.contenders, run-1) {
					plan = append(plan, measurement{WorkloadScaleBurst, scaleParams{contender: contender, n: size.n, pool: size.pool, workers: 1}})
				}
			}
		case ScalePartWorkers:
			for _, k := range s.workerCounts {
				for _, contender := range rotate(s.workerContenders, run-1) {
					plan = append(plan, measurement{WorkloadScaleWorkers, scaleParams{contender: contender, n: s.workersN, pool: PoolMaxConns, workers: k}})
				}
			}
		case ScalePartHop:
			for _, pool := range s.hopPools {
				for _, contender := range rotate(s.hopContenders, run-1) {
					plan = append(plan, measurement{WorkloadScaleHop, scaleParams{contender: contender, n: s.hopN, pool: pool, workers: 1, delay: s.delay}})
				}
			}
		}
	}
	for _, m := range plan {
		if s.procProfile != "" {
			m.p.profile = filepath.Join(s.procProfile, fmt.Sprintf("%s-%s-n%d-pool%d-w%d-run%d", m.workload, m.p.contender, m.p.n, m.p.pool, m.p.workers, run))
		}
		h.logf("%s %s n=%d pool=%d workers=%d delay=%s run %d/%d", m.workload, m.p.contender, m.p.n, m.p.pool, m.p.workers, m.p.delay, run, runs)
		res, err := h.runScale(ctx, m.p)
		res.Workload, res.Run, res.Runs = m.workload, run, runs
		if err := h.record(ctx, res, err); err != nil {
			return err
		}
	}
	return nil
}

// validate refuses unknown parts and contenders before anything runs.
func (s *scaleOptions) validate() error {
	for _, part := range s.parts {
		if !slices.Contains([]string{ScalePartBurst, ScalePartWorkers, ScalePartHop}, part) {
			return fmt.Errorf("--parts: unknown part %q", part)
		}
	}
	for flag, list := range map[string][]string{"--contender": s.contenders, "--hop-contender": s.hopContenders} {
		for _, c := range list {
			if !slices.Contains(ScaleContenders, c) {
				return fmt.Errorf("%s: unknown contender %q (of %s)", flag, c, strings.Join(ScaleContenders, ", "))
			}
		}
	}
	for _, c := range s.workerContenders {
		if c != ContenderWeirNormal && c != ContenderDBOSQueue {
			return fmt.Errorf("--workers-contender: %q has no worker processes (weir-normal, dbos-queue)", c)
		}
	}
	for _, k := range s.workerCounts {
		if k < 1 {
			return fmt.Errorf("--workers: %d worker processes", k)
		}
	}
	return nil
}
