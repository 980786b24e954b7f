package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
)

// readResults reads JSON result lines, skipping blank lines and lines that
// are not JSON objects (so a log with other output can be summarized).
func readResults(r io.Reader) ([]*Result, error) {
	var out []*Result
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for line := 1; scanner.Scan(); line++ {
		text := strings.TrimSpace(scanner.Text())
		if !strings.HasPrefix(text, "{") {
			continue
		}
		var res Result
		if err := json.Unmarshal([]byte(text), &res); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if res.Workload == "" {
			continue
		}
		out = append(out, &res)
	}
	return out, scanner.Err()
}

// group is the results of one workload, contender, config, N and (scale
// workloads) pool, worker processes and proxy delay.
type group struct {
	workload, contender, config string
	n                           int
	ok                          []*Result
	failed                      int
	all                         []*Result // ok and failed
}

// summarize turns results into one markdown table per workload, a row per
// contender configuration, with medians and [min–max] over the successful
// runs.
func summarize(results []*Result) string {
	var groups []*group
	index := map[string]*group{}
	for _, r := range results {
		key := fmt.Sprintf("%s\x00%s\x00%s\x00%d\x00%d\x00%d\x00%g", r.Workload, r.Contender, r.Config, r.N, r.Pool, r.Workers, r.ProxyDelayMs)
		g := index[key]
		if g == nil {
			g = &group{workload: r.Workload, contender: r.Contender, config: r.Config, n: r.N}
			index[key] = g
			groups = append(groups, g)
		}
		g.all = append(g.all, r)
		if r.Error != "" {
			g.failed++
		} else {
			g.ok = append(g.ok, r)
		}
	}

	var b strings.Builder
	for _, w := range []struct {
		workload, title string
		columns         []string
		row             func(g *group) []string
	}{
		{
			WorkloadJobs, "Jobs: burn-down of N no-op jobs (inserted before start)",
			[]string{"jobs/s", "fenced/raw", "CPU µs/job (bench + PG)", "WAL B/job"},
			func(g *group) []string {
				return []string{
					stat(g.ok, func(r *Result) float64 { return r.PerSec }, 0),
					stat(g.ok, func(r *Result) float64 { return r.RatioToRaw }, 3),
					cpuPerUnit(g.ok),
					median(g.ok, func(r *Result) float64 { return r.WALBytesPerUnit }, 0),
				}
			},
		},
		{
			WorkloadWorkflowsBurst, "Workflows, burst: N × 3-step workflows started at once",
			[]string{"wf/s", "p50 ms", "p99 ms", "CPU µs/wf (bench + PG)", "WAL B/wf"},
			func(g *group) []string {
				return []string{
					stat(g.ok, func(r *Result) float64 { return r.PerSec }, 1),
					stat(g.ok, func(r *Result) float64 { return r.P50Ms }, 1),
					stat(g.ok, func(r *Result) float64 { return r.P99Ms }, 1),
					cpuPerUnit(g.ok),
					median(g.ok, func(r *Result) float64 { return r.WALBytesPerUnit }, 0),
				}
			},
		},
		{
			WorkloadWorkflowsRate, "Workflows, open loop: N × 3-step workflows started at a fixed rate",
			[]string{"p50 ms", "p50 ÷ dbos-direct's", "p99 ms"},
			func(g *group) []string {
				p50 := func(r *Result) float64 { return r.P50Ms }
				ratio := "–"
				if base := peerGroup(groups, g, ContenderDBOSDirect); base != nil {
					ratio = pairedRatio(g, base, p50)
				}
				return []string{
					stat(g.ok, p50, 1),
					ratio,
					stat(g.ok, func(r *Result) float64 { return r.P99Ms }, 1),
				}
			},
		},
		{
			WorkloadCosts, "Costs per unit (counting proxy; workflows in a burst)",
			[]string{"round trips", "statements", "transactions", "WAL B", "new connections"},
			func(g *group) []string {
				return []string{
					median(g.ok, func(r *Result) float64 { return r.RoundTripsPerUnit }, 3),
					median(g.ok, func(r *Result) float64 { return r.StatementsPerUnit }, 3),
					median(g.ok, func(r *Result) float64 { return r.TxPerUnit }, 3),
					median(g.ok, func(r *Result) float64 { return r.WALBytesPerUnit }, 0),
					// Zero is a figure here: after the warm-up a contender
					// may open no connection in the window.
					medianWithZeros(g.ok, func(r *Result) float64 { return float64(r.Connections) }, 0),
				}
			},
		},
		{
			WorkloadLatencySplit, "Where the open-loop latency goes (through the counting proxy: medians over the workflows of a run)",
			[]string{"p50 ms", "in Postgres ms", "elsewhere ms", "Postgres spans", "path ms: before Postgres, [span], after it, …"},
			func(g *group) []string {
				return []string{
					median(g.ok, func(r *Result) float64 { return r.P50Ms }, 2),
					median(g.ok, func(r *Result) float64 { return r.InPostgresMs }, 2),
					median(g.ok, func(r *Result) float64 { return r.ElsewhereMs }, 2),
					median(g.ok, func(r *Result) float64 { return r.PostgresSpans }, 1),
					pathCell(g.ok),
				}
			},
		},
		{
			WorkloadScaleBurst, "Scale, burst: N × 3-step workflows started at once, each contender in processes of its own",
			scaleColumns("÷ dbos-direct"), scaleRow(func(g *group) *group { return peerGroup(groups, g, ContenderDBOSDirect) }),
		},
		{
			WorkloadScaleWorkers, "Scale, worker processes: the normal start with K worker processes on one database",
			append(scaleColumns("÷ 1 worker"), "busiest worker's steps ÷ mean"),
			workersRow(scaleRow(func(g *group) *group { return oneWorkerGroup(groups, g) })),
		},
		{
			WorkloadScaleHop, "Scale, Postgres a network hop away: contenders behind a proxy delaying each direction",
			scaleColumns("÷ dbos-direct"), scaleRow(func(g *group) *group { return peerGroup(groups, g, ContenderDBOSDirect) }),
		},
	} {
		var rows []*group
		for _, g := range groups {
			if g.workload == w.workload {
				rows = append(rows, g)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(&b, "### %s\n\n", w.title)
		header := slices.Concat([]string{"contender", "config", "N", "runs"}, w.columns)
		fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
		for _, g := range rows {
			runs := fmt.Sprint(len(g.ok))
			if g.failed > 0 {
				runs += fmt.Sprintf(" (+%d failed)", g.failed)
			}
			cells := slices.Concat([]string{g.contender, g.config, fmt.Sprint(g.n), runs}, w.row(g))
			fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
		}
		b.WriteString("\n")
	}
	if env := firstEnv(results); env != nil {
		connections := ""
		switch {
		case env.TLS == nil:
		case *env.TLS:
			connections = "; connections encrypted (TLS)"
		default:
			connections = "; connections unencrypted"
		}
		roundTrip := ""
		if rt := env.RoundTrip; rt != nil {
			roundTrip = fmt.Sprintf("; one round trip %.2f ms back to back, %.2f ms after %.0f ms idle", rt.BackToBackMs, rt.AfterIdleMs, rt.IdleMs)
		}
		cpus := fmt.Sprintf("%d CPUs", env.CPUs)
		if env.CPUModel != "" {
			cpus += " (" + env.CPUModel + ")"
		}
		fmt.Fprintf(&b, "Environment: %s; %s, %s; settings: %s%s%s; weir %s.\n",
			env.PG["version"], cpus, env.GoVersion, settingsLine(env.PG), connections, roundTrip, env.WeirCommit)
	}
	return b.String()
}

// stat formats the median and, with more than one value, [min–max] of f
// over rs, with prec decimals; "–" when no result has a value.
func stat(rs []*Result, f func(*Result) float64, prec int) string {
	values := nonZero(rs, f)
	if len(values) == 0 {
		return "–"
	}
	s := formatNumber(medianOf(values), prec)
	if len(values) > 1 {
		s = fmt.Sprintf("**%s** [%s–%s]", s, formatNumber(slices.Min(values), prec), formatNumber(slices.Max(values), prec))
	}
	return s
}

// median formats the median of f over rs, with prec decimals.
func median(rs []*Result, f func(*Result) float64, prec int) string {
	values := nonZero(rs, f)
	if len(values) == 0 {
		return "–"
	}
	return formatNumber(medianOf(values), prec)
}

// medianWithZeros is median counting zeros as values; "–" with no result.
func medianWithZeros(rs []*Result, f func(*Result) float64, prec int) string {
	if len(rs) == 0 {
		return "–"
	}
	values := make([]float64, len(rs))
	for i, r := range rs {
		values[i] = f(r)
	}
	return formatNumber(medianOf(values), prec)
}

// pathCell is the entry-by-entry median of rs's PathMs (medianPath), the
// spans in brackets ("–" with none): "0.32 [1.47] 0.20 [1.07] …".
func pathCell(rs []*Result) string {
	rows := make([][]float64, len(rs))
	for i, r := range rs {
		rows[i] = r.PathMs
	}
	var cells []string
	for k, v := range medianPath(rows, pathEntriesMax) {
		cell := formatNumber(v, 2)
		if k%2 == 1 {
			cell = "[" + cell + "]"
		}
		cells = append(cells, cell)
	}
	if len(cells) == 0 {
		return "–"
	}
	return strings.Join(cells, " ")
}

func nonZero(rs []*Result, f func(*Result) float64) []float64 {
	var values []float64
	for _, r := range rs {
		if v := f(r); v != 0 && !math.IsNaN(v) {
			values = append(values, v)
		}
	}
	return values
}

// medianOf returns the median of values (the mean of the middle two for an
// even count); values must not be empty.
func medianOf(values []float64) float64 {
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	mid := len(sorted) / 2
	if len(sorted)%2 == 0 {
		return (sorted[mid-1] + sorted[mid]) / 2
	}
	return sorted[mid]
}

// formatNumber formats f with prec decimals and thousands separators.
func formatNumber(f float64, prec int) string {
	s := fmt.Sprintf("%.*f", prec, f)
	intPart, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(intPart, "-")
	intPart = strings.TrimPrefix(intPart, "-")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := b.String()
	if neg {
		out = "-" + out
	}
	if frac != "" {
		out += "." + frac
	}
	return out
}

func firstEnv(results []*Result) *Env {
	for _, r := range results {
		if r.Env != nil {
			return r.Env
		}
	}
	return nil
}

// settingsLine lists the recorded server settings, sorted by name.
func settingsLine(pg map[string]string) string {
	var parts []string
	for _, name := range pgSettings {
		if v, ok := pg[name]; ok {
			parts = append(parts, name+"="+v)
		}
	}
	return strings.Join(parts, ", ")
}

// cpuPerUnit is the median CPU time per unit, bench process and Postgres
// together, with the two parts: "1,234 (456 + 778)"; "–" where no run
// measured it.
func cpuPerUnit(rs []*Result) string {
	bench := median(rs, func(r *Result) float64 { return r.BenchCPUUsPerUnit }, 0)
	postgres := median(rs, func(r *Result) float64 { return r.PostgresCPUUsPerUnit }, 0)
	if bench == "–" || postgres == "–" {
		return "–"
	}
	return fmt.Sprintf("%s (%s + %s)", median(rs, func(r *Result) float64 { return r.BenchCPUUsPerUnit + r.PostgresCPUUsPerUnit }, 0), bench, postgres)
}

// scaleColumns are the columns of the scale tables, ratio naming the
// throughput ratio column.
func scaleColumns(ratio string) []string {
	return []string{"wf/s", ratio, "p50 ms", "p99 ms", "busy backends", "CPU µs/wf (procs + PG)", "harness CPU µs/wf", "GC % of procs' CPU", "alloc KB/wf (GC cycles)", "duplicate executions"}
}

// scaleRow formats a scale table's row; base finds the group whose
// throughput the ratio column divides by (nil: none).
func scaleRow(base func(*group) *group) func(*group) []string {
	return func(g *group) []string {
		ratio := "–"
		if b := base(g); b != nil {
			ratio = pairedRatio(g, b, func(r *Result) float64 { return r.PerSec })
		}
		return []string{
			stat(g.ok, func(r *Result) float64 { return r.PerSec }, 1),
			ratio,
			stat(g.ok, func(r *Result) float64 { return r.P50Ms }, 1),
			stat(g.ok, func(r *Result) float64 { return r.P99Ms }, 1),
			busyBackends(g.ok),
			cpuPerUnit(g.ok),
			median(g.ok, func(r *Result) float64 { return r.HarnessCPUUsPerUnit }, 0),
			gcPercent(g.ok),
			allocPerUnit(g.ok),
			duplicates(g.all),
		}
	}
}

// workersRow is row followed by the median share of the busiest worker
// process ("–" with one).
func workersRow(row func(*group) []string) func(*group) []string {
	return func(g *group) []string {
		return append(row(g), median(g.ok, func(r *Result) float64 { return r.BusiestWorkerShare }, 2))
	}
}

// allocPerUnit formats the median heap allocation per unit in KB, with the
// median GC cycles of the window: "71.2 (23)"; "–" without either.
func allocPerUnit(rs []*Result) string {
	kb := median(rs, func(r *Result) float64 { return r.AllocBytesPerUnit / 1000 }, 1)
	if kb == "–" {
		return kb
	}
	return fmt.Sprintf("%s (%s)", kb, median(rs, func(r *Result) float64 { return float64(r.GCCycles) }, 0))
}

// pairedRatio formats the ratio of g's figure f to base's, run by run:
// each of g's runs divided by base's run of the same number (the two
// measured one after the other, on the machine as it was then), as the
// median and, over several runs, [min–max] of those ratios. Pairing keeps
// a drift of the machine's speed between runs, which moves both alike, out
// of the ratio. "–" when no run has both.
func pairedRatio(g, base *group, f func(*Result) float64) string {
	var ratios []float64
	for _, r := range g.ok {
		for _, b := range base.ok {
			if b.Run == r.Run && f(r) > 0 && f(b) > 0 {
				ratios = append(ratios, f(r)/f(b))
				break
			}
		}
	}
	if len(ratios) == 0 {
		return "–"
	}
	s := formatNumber(medianOf(ratios), 2)
	if len(ratios) > 1 {
		s = fmt.Sprintf("%s [%s–%s]", s, formatNumber(slices.Min(ratios), 2), formatNumber(slices.Max(ratios), 2))
	}
	return s
}

// peerGroup finds the group of contender measured like g: same workload,
// N, pool and proxy delay.
func peerGroup(groups []*group, g *group, contender string) *group {
	if len(g.all) == 0 {
		return nil
	}
	for _, o := range groups {
		if o.workload == g.workload && o.contender == contender && o.n == g.n && len(o.all) > 0 &&
			o.all[0].Pool == g.all[0].Pool && o.all[0].ProxyDelayMs == g.all[0].ProxyDelayMs {
			return o
		}
	}
	return nil
}

// oneWorkerGroup finds the group of g's contender with one worker process,
// otherwise measured like g.
func oneWorkerGroup(groups []*group, g *group) *group {
	if len(g.all) == 0 {
		return nil
	}
	for _, o := range groups {
		if o.workload == g.workload && o.contender == g.contender && o.n == g.n && len(o.all) > 0 &&
			o.all[0].Pool == g.all[0].Pool && o.all[0].Workers == 1 {
			return o
		}
	}
	return nil
}

// busyBackends is the median average of busy backends, split by process
// (application_name) when there are several: "3.1 (weir-starter 0.4,
// weir-worker-1 2.7)".
func busyBackends(rs []*Result) string {
	return byProcess(rs, func(r *Result) float64 { return r.BusyBackends },
		func(r *Result) map[string]float64 { return r.BusyBackendsBy }, 1)
}

// gcPercent is the median GC share in percent, split by process when there
// are several: "18.5 (weir-starter 24.0, weir-worker-1 17.1)".
func gcPercent(rs []*Result) string {
	return byProcess(rs, func(r *Result) float64 { return r.GCShare * 100 },
		func(r *Result) map[string]float64 { return r.GCShareBy }, 100)
}

// byProcess formats the median of total over rs, followed by the median of
// each process's figure in by (scaled by scale) when there are several.
func byProcess(rs []*Result, total func(*Result) float64, by func(*Result) map[string]float64, scale float64) string {
	all := median(rs, total, 1)
	names := map[string]bool{}
	for _, r := range rs {
		for name := range by(r) {
			names[name] = true
		}
	}
	if all == "–" || len(names) < 2 {
		return all
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(names)) {
		parts = append(parts, name+" "+median(rs, func(r *Result) float64 { return by(r)[name] * scale }, 1))
	}
	return all + " (" + strings.Join(parts, ", ") + ")"
}

// duplicates sums the duplicate executions over rs, loudly when there are
// any; "–" where none was counted.
func duplicates(rs []*Result) string {
	counted, sum := false, 0
	for _, r := range rs {
		if r.DuplicateExecutions != nil {
			counted = true
			sum += *r.DuplicateExecutions
		}
	}
	switch {
	case !counted:
		return "–"
	case sum > 0:
		return fmt.Sprintf("**%d: FAILED**", sum)
	}
	return "0"
}
