// Package cputime reads the CPU time processes have used from /proc, for
// benchmarks that report CPU per unit of work beside throughput (steadier
// than throughput on a machine whose speed drifts between runs).
package cputime

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Process returns the CPU time this process has used so far, read from
// /proc (Linux); 0 where /proc cannot tell.
func Process() time.Duration {
	return ticks(procTicks("/proc/self/stat", false))
}

// Postgres returns the CPU time every postgres process on this machine
// has used so far, with the children they reaped (so that backends which
// exited still count), read from /proc (Linux); 0 where /proc cannot tell.
// It measures a server only when that server runs on this machine.
func Postgres() time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var n int64
	for _, stat := range stats {
		n += procTicks(stat, true)
	}
	return ticks(n)
}

// ticks converts clock ticks to a duration: the kernel counts in USER_HZ,
// 100 on every Linux architecture Go runs on.
func ticks(n int64) time.Duration { return time.Duration(n) * (time.Second / 100) }

// procTicks reads a /proc/PID/stat: its utime and stime (and cutime and
// cstime with children), or 0 for a process that is gone or, with postgres
// set, is not a postgres process.
func procTicks(path string, postgres bool) int64 {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	stat := string(raw)
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return 0
	}
	if postgres && !strings.HasPrefix(stat[open+1:end], "postgres") {
		return 0
	}
	// After the command come fields 3 (state) onwards, field N at N-3:
	// utime and stime are fields 14 and 15, cutime and cstime 16 and 17.
	fields := strings.Fields(stat[end+1:])
	n := 2
	if postgres {
		n = 4
	}
	if len(fields) < 11+n {
		return 0
	}
	var total int64
	for _, field := range fields[11 : 11+n] {
		t, _ := strconv.ParseInt(field, 10, 64)
		total += t
	}
	return total
}
