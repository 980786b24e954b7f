package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirhq/weir/internal/cputime"
)

// Engine roles: in one process (the workflows workloads), or split into
// worker processes that only work and a starter process that only starts
// (the scale workloads).
const (
	roleBoth    = "both"
	roleWorker  = "worker"
	roleStarter = "starter"
)

// errNotStarter is returned by start in an engine that only works.
var errNotStarter = errors.New("this engine only works: its role starts no workflow")

// executions counts the executions of the contenders' steps by step, in a
// process that counts them (a process of the scale workloads); nil
// elsewhere, so that the workflows workloads pay nothing for it.
var executions *executionCounter

// executionCounter counts executions by step ("wf-<i>#<step>").
type executionCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *executionCounter) record(step string) {
	c.mu.Lock()
	c.counts[step]++
	c.mu.Unlock()
}

func (c *executionCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// procRequest is what the harness asks of a contender's process, one JSON
// line on its stdin.
type procRequest struct {
	// Op is "start" (start workflows From..To-1 at once, each in a
	// goroutine; reply with their start times), "check" (check their
	// results), "stats", "window" (open the measurement window: a CPU
	// profile), "window-end" (close it: reply with its samples),
	// "executions" or "profile" (start profiling, within the window, into
	// files named Path + a suffix, or stop without a Path).
	Op   string `json:"op"`
	From int    `json:"from,omitempty"`
	To   int    `json:"to,omitempty"`
	Path string `json:"path,omitempty"`
}

// procReply answers a procRequest, one JSON line on the reply pipe.
type procReply struct {
	Error string `json:"error,omitempty"`

	// Starts are the start times (Unix nanoseconds) of workflows From..To-1.
	Starts []int64 `json:"starts,omitempty"`

	// Stats is the process's CPU time so far.
	Stats *procStats `json:"stats,omitempty"`

	// Window is the closed measurement window's CPU samples.
	Window *windowSamples `json:"window,omitempty"`

	// Executions are the step executions so far, by step.
	Executions map[string]int `json:"executions,omitempty"`

	// PeakGoroutines is the most goroutines counted while profiling.
	PeakGoroutines int `json:"peak_goroutines,omitempty"`
}

// procStats is a process's CPU time so far (from /proc), and the bytes it
// allocated on the heap and the GC cycles it completed (runtime/metrics).
type procStats struct {
	CPUNs      int64  `json:"cpu_ns"`
	AllocBytes uint64 `json:"alloc_bytes"`
	GCCycles   uint64 `json:"gc_cycles"`
}

// readProcStats reads this process's procStats.
func readProcStats() *procStats {
	samples := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(samples)
	count := func(s metrics.Sample) uint64 {
		if s.Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s.Value.Uint64()
	}
	return &procStats{CPUNs: int64(cputime.Process()), AllocBytes: count(samples[0]), GCCycles: count(samples[1])}
}

// procFlags configure a contender's process.
type procFlags struct {
	contender, role, url string
	pool                 int
}

// newProcCmd is the hidden command the harness runs its contenders'
// processes with (the scale workloads): it starts the engine in its role,
// answers procRequests from stdin on file descriptor 3, and stops the
// engine and exits when stdin closes.
func newProcCmd() *cobra.Command {
	f := &procFlags{}
	cmd := &cobra.Command{
		Use:    "proc",
		Short:  "Run one process of a contender (the harness runs it for the scale workloads)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			replies := os.NewFile(3, "replies")
			if replies == nil {
				return errors.New("proc: no reply pipe on file descriptor 3")
			}
			defer replies.Close()
			return runProc(cmd.Context(), f, os.Stdin, replies)
		},
	}
	cmd.Flags().StringVar(&f.contender, "contender", "", "weir or dbos")
	cmd.Flags().StringVar(&f.role, "role", roleBoth, "both, worker or starter")
	cmd.Flags().StringVar(&f.url, "url", "", "the database's URL")
	cmd.Flags().IntVar(&f.pool, "pool", PoolMaxConns, "connections of the engine's pool")
	return cmd
}

// runProc runs one contender's process (newProcCmd): a first reply says it
// is ready (or why it is not).
func runProc(ctx context.Context, f *procFlags, requests io.Reader, replies io.Writer) (err error) {
	enc := json.NewEncoder(replies)
	if f.role != roleStarter {
		executions = &executionCounter{counts: map[string]int{}}
	}
	engine, err := newProcEngine(ctx, f)
	if err != nil {
		return errors.Join(err, enc.Encode(procReply{Error: err.Error()}))
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		err = errors.Join(err, engine.stop(stopCtx))
	}()
	if err := enc.Encode(procReply{}); err != nil {
		return err
	}
	scanner := bufio.NewScanner(requests)
	for scanner.Scan() {
		var req procRequest
		if err := json.Unmarshal(scanner.Bytes(), &req); err != nil {
			return fmt.Errorf("proc: bad request %q: %w", scanner.Text(), err)
		}
		if err := enc.Encode(serveProcRequest(ctx, engine, req)); err != nil {
			return err
		}
	}
	return scanner.Err()
}

// newProcEngine starts the engine of a contender's process.
func newProcEngine(ctx context.Context, f *procFlags) (workflowEngine, error) {
	switch f.contender {
	case ContenderWeir:
		pool, err := newPool(ctx, f.url, f.pool)
		if err != nil {
			return nil, err
		}
		engine, err := newWeirEngine(ctx, pool, f.pool, f.role)
		if err != nil {
			pool.Close()
			return nil, err
		}
		return &pooledEngine{workflowEngine: engine, close: pool.Close}, nil
	case "dbos":
		return newDBOSEngine(ctx, f.url, f.pool, false, f.role)
	}
	return nil, fmt.Errorf("proc: unknown contender %q", f.contender)
}

// pooledEngine closes its pool once the engine stopped.
type pooledEngine struct {
	workflowEngine
	close func()
}

func (e *pooledEngine) stop(ctx context.Context) error {
	defer e.close()
	return e.workflowEngine.stop(ctx)
}

func serveProcRequest(ctx context.Context, engine workflowEngine, req procRequest) procReply {
	switch req.Op {
	case "start":
		starts := make([]int64, req.To-req.From)
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs error
		)
		for i := req.From; i < req.To; i++ {
			wg.Go(func() {
				starts[i-req.From] = time.Now().UnixNano()
				if err := engine.start(ctx, i); err != nil {
					mu.Lock()
					errs = errors.Join(errs, fmt.Errorf("starting workflow %d: %w", i, err))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if errs != nil {
			return procReply{Error: errs.Error()}
		}
		return procReply{Starts: starts}
	case "check":
		if err := checkRange(ctx, engine, req.From, req.To); err != nil {
			return procReply{Error: err.Error()}
		}
		return procReply{}
	case "stats":
		return procReply{Stats: readProcStats()}
	case "window":
		if err := startWindow(); err != nil {
			return procReply{Error: err.Error()}
		}
		return procReply{}
	case "window-end":
		samples, err := endWindow()
		if err != nil {
			return procReply{Error: err.Error()}
		}
		return procReply{Window: samples}
	case "executions":
		if executions == nil {
			return procReply{}
		}
		return procReply{Executions: executions.snapshot()}
	case "profile":
		return serveProfileRequest(req.Path)
	}
	return procReply{Error: fmt.Sprintf("unknown op %q", req.Op)}
}

// proc is a contender's process as the harness sees it.
type proc struct {
	name    string // its role and number, as in application_name
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies *os.File
	dec     *json.Decoder
	mu      sync.Mutex // one request at a time
}

// startProc runs this binary's proc command with f, its connections named
// name (application_name), and waits until its engine is ready.
func startProc(ctx context.Context, f procFlags, name string) (*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	u, err := withParam(f.url, "application_name", name)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "proc", "--contender", f.contender, "--role", f.role, "--url", u, "--pool", fmt.Sprint(f.pool)) //nolint:gosec // this binary
	cmd.Stderr = &lineFilter{w: os.Stderr, drop: []byte(profileRateWarning)}
	cmd.WaitDelay = 30 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	replies, replyWriter, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{replyWriter}
	if err := cmd.Start(); err != nil {
		return nil, errors.Join(err, replies.Close(), replyWriter.Close())
	}
	_ = replyWriter.Close() // the child holds it
	p := &proc{name: name, cmd: cmd, stdin: stdin, replies: replies, dec: json.NewDecoder(replies)}
	var ready procReply
	if err := p.dec.Decode(&ready); err != nil {
		return nil, errors.Join(fmt.Errorf("process %s did not start: %w", name, err), p.stop())
	}
	if ready.Error != "" {
		return nil, errors.Join(fmt.Errorf("process %s did not start: %s", name, ready.Error), p.stop())
	}
	return p, nil
}

// do sends req and waits for the answer.
func (p *proc) do(req procRequest) (procReply, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line, err := json.Marshal(req)
	if err != nil {
		return procReply{}, err
	}
	if _, err := p.stdin.Write(append(line, '\n')); err != nil {
		return procReply{}, fmt.Errorf("process %s: %w", p.name, err)
	}
	var reply procReply
	if err := p.dec.Decode(&reply); err != nil {
		return procReply{}, fmt.Errorf("process %s: reading its answer to %s: %w", p.name, req.Op, err)
	}
	if reply.Error != "" {
		return reply, fmt.Errorf("process %s: %s", p.name, reply.Error)
	}
	return reply, nil
}

// stop closes the process's stdin, which stops its engine, and waits for
// it to exit.
func (p *proc) stop() error {
	_ = p.stdin.Close()
	defer p.replies.Close()
	if err := p.cmd.Wait(); err != nil {
		return fmt.Errorf("process %s: %w", p.name, err)
	}
	return nil
}
