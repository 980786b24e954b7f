package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/google/pprof/profile"
)

// gcFunctions are the Go runtime's garbage-collection entry points, the
// classes of runtime/metrics' /cpu/classes/gc: the background mark workers
// (dedicated, fractional and idle), mark assists, and the stop-the-world
// phases at a cycle's start and end. A CPU sample with one of them on its
// stack went to the GC.
var gcFunctions = map[string]bool{
	"runtime.gcBgMarkWorker":    true,
	"runtime.gcAssistAlloc":     true,
	"runtime.gcStart":           true,
	"runtime.gcMarkTermination": true,
}

// windowProfileHz is the sampling rate of a window's CPU profile: ten
// times pprof's default, so that a process using a third of a second of
// CPU in a window still gives hundreds of samples.
const windowProfileHz = 1000

// profileRateWarning starts the line the runtime prints when a CPU profile
// starts at a rate set before it (startWindow): expected, so the harness
// drops it from a process's stderr (lineFilter).
const profileRateWarning = "runtime: cannot set cpu profile rate"

// cpuWindow is a contender process's CPU profile over a measurement window
// (the scale workloads): its GC share is read from the profile's samples,
// which count the CPU the process's threads used, unlike runtime/metrics'
// estimates, which count a processor as busy while its thread waits for a
// core (on a machine the contenders share with Postgres, most of the time).
type cpuWindow struct {
	buf bytes.Buffer
	// path is where the profile is written too (--proc-profile), or "".
	path string
}

// openWindow is the process's measurement window in progress, if any.
var openWindow *cpuWindow

// windowSamples is a window's CPU time by its profile's samples, and the
// part of it that went to garbage collection (gcFunctions).
type windowSamples struct {
	CPUNs int64 `json:"cpu_ns"`
	GCNs  int64 `json:"gc_ns"`
}

// startWindow starts the process's measurement window.
func startWindow() error {
	if openWindow != nil {
		return errors.New("a window is open already")
	}
	w := &cpuWindow{}
	// pprof has no rate of its own: the runtime keeps the first one set,
	// and warns (profileRateWarning) when StartCPUProfile sets its own.
	runtime.SetCPUProfileRate(windowProfileHz)
	if err := pprof.StartCPUProfile(&w.buf); err != nil {
		runtime.SetCPUProfileRate(0)
		return err
	}
	openWindow = w
	return nil
}

// endWindow ends the process's measurement window and reads its samples.
func endWindow() (*windowSamples, error) {
	if openWindow == nil {
		return nil, errors.New("no window is open")
	}
	pprof.StopCPUProfile()
	w := openWindow
	openWindow = nil
	if w.path != "" {
		if err := os.WriteFile(w.path, w.buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}
	return gcSamplesOf(w.buf.Bytes())
}

// gcSamplesOf sums a CPU profile's samples, and those with a gcFunctions
// entry on their stack.
func gcSamplesOf(data []byte) (*windowSamples, error) {
	p, err := profile.ParseData(data)
	if err != nil {
		return nil, fmt.Errorf("reading the window's CPU profile: %w", err)
	}
	cpu := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			cpu = i
		}
	}
	if cpu < 0 {
		return nil, errors.New("the window's CPU profile has no CPU time")
	}
	var out windowSamples
	for _, s := range p.Sample {
		out.CPUNs += s.Value[cpu]
		if inGC(s) {
			out.GCNs += s.Value[cpu]
		}
	}
	return &out, nil
}

// inGC reports whether a sample's stack enters the GC.
func inGC(s *profile.Sample) bool {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function != nil && gcFunctions[line.Function.Name] {
				return true
			}
		}
	}
	return false
}

// lineFilter writes to w every line written to it but those containing
// drop.
type lineFilter struct {
	w    io.Writer
	drop []byte
	buf  []byte // a line's start, not yet ended
}

func (f *lineFilter) Write(p []byte) (int, error) {
	f.buf = append(f.buf, p...)
	for {
		i := bytes.IndexByte(f.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := f.buf[:i+1]
		f.buf = f.buf[i+1:]
		if bytes.Contains(line, f.drop) {
			continue
		}
		if _, err := f.w.Write(line); err != nil {
			return 0, err
		}
	}
}
