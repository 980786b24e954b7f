package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// postmasterOf finds the postmaster of the server admin is connected to,
// when that server runs on this machine: the parent of admin's backend,
// if /proc shows both as postgres processes. It returns 0 otherwise.
func postmasterOf(ctx context.Context, admin *pgxpool.Pool) int {
	var backend int
	if err := admin.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0
	}
	comm, fields, ok := procStat(strconv.Itoa(backend))
	if !ok || !strings.HasPrefix(comm, "postgres") {
		return 0
	}
	postmaster, err := strconv.Atoi(fields[1]) // field 4, the parent
	if err != nil {
		return 0
	}
	if comm, _, ok := procStat(fields[1]); !ok || !strings.HasPrefix(comm, "postgres") {
		return 0
	}
	return postmaster
}

// serverCPU is the CPU time the server of postmaster has used so far: the
// postmaster's with the children it reaped (backends that exited), and
// its living children's (backends, background workers). Unlike
// cputime.Postgres it leaves out every other server on the machine.
//
// A backend reaped while the children are read would count in neither
// sum, so the reading is repeated until the postmaster's own figure is the
// same before and after it.
func serverCPU(postmaster int) time.Duration {
	parent := strconv.Itoa(postmaster)
	var total int64
	for range 10 {
		before, ok := reapedTicks(parent)
		if !ok {
			return 0
		}
		children := childTicks(parent)
		after, ok := reapedTicks(parent)
		if !ok {
			return 0
		}
		total = after + children
		if after == before {
			break
		}
	}
	// The kernel counts in USER_HZ, 100 on every Linux architecture Go
	// runs on.
	return time.Duration(total) * (time.Second / 100)
}

// reapedTicks is the CPU time of pid with its reaped children's.
func reapedTicks(pid string) (int64, bool) {
	_, fields, ok := procStat(pid)
	if !ok {
		return 0, false
	}
	return statTicks(fields), true
}

// childTicks sums the CPU time of the living (or not yet reaped) children
// of parent.
func childTicks(parent string) int64 {
	var total int64
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, stat := range stats {
		pid := filepath.Base(filepath.Dir(stat))
		if _, fields, ok := procStat(pid); ok && fields[1] == parent {
			total += statTicks(fields)
		}
	}
	return total
}

// procStat reads /proc/<pid>/stat: the command, and the fields after it
// (field N of proc(5) at index N-3).
func procStat(pid string) (comm string, fields []string, ok bool) {
	raw, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "", nil, false
	}
	stat := string(raw)
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", nil, false
	}
	fields = strings.Fields(stat[end+1:])
	if len(fields) < 15 {
		return "", nil, false
	}
	return stat[open+1 : end], fields, true
}

// statTicks sums utime, stime, cutime and cstime (fields 14 to 17): the
// process's CPU time and its reaped children's.
func statTicks(fields []string) int64 {
	var total int64
	for _, f := range fields[11:15] {
		t, _ := strconv.ParseInt(f, 10, 64)
		total += t
	}
	return total
}

// cpuModel is the model name of this machine's first CPU as /proc/cpuinfo
// gives it, "" where it gives none. Results measured on two machines are
// not comparable; the model tells two virtual machines apart where the
// count of CPUs does not.
func cpuModel() string {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	return cpuModelOf(string(info))
}

// cpuModelOf reads the first "model name" of a /proc/cpuinfo text.
func cpuModelOf(info string) string {
	for line := range strings.Lines(info) {
		key, value, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(key) == "model name" {
			return strings.Join(strings.Fields(value), " ")
		}
	}
	return ""
}
