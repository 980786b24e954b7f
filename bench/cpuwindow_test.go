package main

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"
)

// cpuProfileOf encodes a CPU profile of stacks (leaf first), each with its
// CPU time in nanoseconds.
func cpuProfileOf(t *testing.T, sampleType string, stacks map[int64][]string) []byte {
	t.Helper()
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: sampleType, Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:     10_000_000,
	}
	functions := map[string]*profile.Function{}
	for ns, stack := range stacks {
		s := &profile.Sample{Value: []int64{1, ns}}
		for _, name := range stack {
			f, ok := functions[name]
			if !ok {
				f = &profile.Function{ID: uint64(len(functions) + 1), Name: name}
				functions[name] = f
				p.Function = append(p.Function, f)
			}
			loc := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: f}}}
			p.Location = append(p.Location, loc)
			s.Location = append(s.Location, loc)
		}
		p.Sample = append(p.Sample, s)
	}
	var buf bytes.Buffer
	require.NoError(t, p.Write(&buf))
	return buf.Bytes()
}

// TestGCSamplesOf: a sample is GC when its stack enters a mark worker, an
// assist (under the allocating code) or a stop-the-world phase; anything
// else, the runtime's allocator included, is not.
func TestGCSamplesOf(t *testing.T) {
	t.Parallel()

	data := cpuProfileOf(t, "cpu", map[int64][]string{
		30: {"main.work"},
		7:  {"runtime.mallocgc", "main.work"},
		10: {"runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker"},
		5:  {"runtime.scanstack", "runtime.gcAssistAlloc", "runtime.mallocgc", "main.work"},
		2:  {"runtime.stopTheWorldWithSema", "runtime.gcStart", "runtime.mallocgc", "main.work"},
		1:  {"runtime.gcMarkTermination.func1", "runtime.gcMarkTermination"},
	})
	got, err := gcSamplesOf(data)
	require.NoError(t, err)
	require.Equal(t, windowSamples{CPUNs: 55, GCNs: 18}, *got)

	_, err = gcSamplesOf(cpuProfileOf(t, "alloc_space", map[int64][]string{1: {"main.work"}}))
	require.ErrorContains(t, err, "no CPU time")
	_, err = gcSamplesOf([]byte("not a profile"))
	require.Error(t, err)
}

// TestLineFilter: the lines with the dropped text go, whatever the writes'
// boundaries; every other line passes whole.
func TestLineFilter(t *testing.T) {
	t.Parallel()

	var out bytes.Buffer
	f := &lineFilter{w: &out, drop: []byte(profileRateWarning)}
	for _, chunk := range []string{"first line\nruntime: cannot set cpu ", "profile rate until previous profile has finished.\nsec", "ond line\n", "third"} {
		n, err := f.Write([]byte(chunk))
		require.NoError(t, err)
		require.Equal(t, len(chunk), n)
	}
	require.Equal(t, "first line\nsecond line\n", out.String())
}
