package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"sync"
	"time"
)

// A profiled process counts its goroutines every goroutineSampleInterval
// and writes a goroutine profile every goroutineProfileInterval.
const (
	goroutineSampleInterval  = 10 * time.Millisecond
	goroutineProfileInterval = time.Second
)

// procProfile profiles a contender's process over a measurement window
// (scale --proc-profile): the window's CPU profile (cpuWindow), its allocations at the window's
// start and end (pprof -base), and its goroutines: counted every
// goroutineSampleInterval, a goroutine profile written near their peak
// (within a twentieth) and one every goroutineProfileInterval.
type procProfile struct {
	prefix  string
	gc      []metrics.Sample // at the start
	stopped chan struct{}
	done    chan struct{}

	mu   sync.Mutex
	peak int
	err  error
}

// profiling is the process's profile in progress, if any.
var profiling *procProfile

// startProcProfile starts profiling into files named prefix + a suffix.
func startProcProfile(prefix string) (*procProfile, error) {
	if err := writeProfile(prefix+".allocs-base.pprof", "allocs"); err != nil {
		return nil, err
	}
	if openWindow == nil {
		return nil, errors.New("a profile needs the measurement window, whose CPU profile it writes")
	}
	openWindow.path = prefix + ".cpu.pprof"
	p := &procProfile{prefix: prefix, gc: readGCMetrics(), stopped: make(chan struct{}), done: make(chan struct{})}
	go p.countGoroutines()
	return p, nil
}

// countGoroutines samples the goroutine count until the profile stops,
// writing a goroutine profile whenever the count passes its last one's by
// a twentieth, and one every goroutineProfileInterval.
func (p *procProfile) countGoroutines() {
	defer close(p.done)
	ticker := time.NewTicker(goroutineSampleInterval)
	defer ticker.Stop()
	written, seconds := 0, 0
	start := time.Now()
	for {
		n := runtime.NumGoroutine()
		p.mu.Lock()
		p.peak = max(p.peak, n)
		p.mu.Unlock()
		if n > written+written/20 {
			written = n
			p.write(p.prefix + ".goroutine-peak.pprof")
		}
		if time.Since(start) >= time.Duration(seconds)*goroutineProfileInterval {
			p.write(fmt.Sprintf("%s.goroutine-%03ds.pprof", p.prefix, seconds))
			seconds++
		}
		select {
		case <-ticker.C:
		case <-p.stopped:
			return
		}
	}
}

// write writes a goroutine profile to path, keeping its error.
func (p *procProfile) write(path string) {
	if err := writeProfile(path, "goroutine"); err != nil {
		p.mu.Lock()
		p.err = errors.Join(p.err, err)
		p.mu.Unlock()
	}
}

// stop ends the profile and returns the peak goroutine count.
func (p *procProfile) stop() (int, error) {
	close(p.stopped)
	<-p.done
	err := errors.Join(writeProfile(p.prefix+".allocs.pprof", "allocs"), p.writeGCMetrics())
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak, errors.Join(p.err, err)
}

// gcMetrics are the runtime metrics of the window's GC that the profile
// writes down (prefix.gc.txt): counters as differences, gauges at the end.
var gcMetrics = []string{
	"/gc/cycles/total:gc-cycles",
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
	"/gc/scan/stack:bytes",
	"/gc/scan/heap:bytes",
	"/gc/scan/globals:bytes",
	"/gc/heap/live:bytes",
	"/gc/heap/goal:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/sched/goroutines:goroutines",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/gc/mark/assist:cpu-seconds",
	"/cpu/classes/gc/mark/dedicated:cpu-seconds",
	"/cpu/classes/gc/mark/idle:cpu-seconds",
	"/cpu/classes/gc/pause:cpu-seconds",
}

func readGCMetrics() []metrics.Sample {
	samples := make([]metrics.Sample, len(gcMetrics))
	for i, name := range gcMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	return samples
}

// writeGCMetrics writes the window's GC metrics to prefix.gc.txt.
func (p *procProfile) writeGCMetrics() error {
	end := readGCMetrics()
	var b strings.Builder
	for i, s := range end {
		switch s.Value.Kind() {
		case metrics.KindUint64:
			fmt.Fprintf(&b, "%s\tend %d\twindow %d\n", s.Name, s.Value.Uint64(), s.Value.Uint64()-p.gc[i].Value.Uint64())
		case metrics.KindFloat64:
			fmt.Fprintf(&b, "%s\tend %.3f\twindow %.3f\n", s.Name, s.Value.Float64(), s.Value.Float64()-p.gc[i].Value.Float64())
		}
	}
	return os.WriteFile(p.prefix+".gc.txt", []byte(b.String()), 0o644)
}

// writeProfile writes the named runtime profile to path.
func writeProfile(path, name string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(pprof.Lookup(name).WriteTo(f, 0), f.Close())
}

// serveProfileRequest starts (a path prefix) or stops (none) the
// process's profile.
func serveProfileRequest(prefix string) procReply {
	if prefix != "" {
		if profiling != nil {
			return procReply{Error: "a profile is running already"}
		}
		p, err := startProcProfile(prefix)
		if err != nil {
			return procReply{Error: err.Error()}
		}
		profiling = p
		return procReply{}
	}
	if profiling == nil {
		return procReply{Error: "no profile is running"}
	}
	peak, err := profiling.stop()
	profiling = nil
	if err != nil {
		return procReply{Error: fmt.Sprintf("profile: %v", err)}
	}
	return procReply{PeakGoroutines: peak}
}
