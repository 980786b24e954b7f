package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes of [Replayer.Main].
const (
	// ReplayExitOK: every history replayed.
	ReplayExitOK = 0
	// ReplayExitDiverged: a history did not replay (non-determinism, a
	// panic or deadlock of the workflow code).
	ReplayExitDiverged = 1
	// ReplayExitBadInput: a history could not be read or is not valid, or
	// no workflow of its kind is registered.
	ReplayExitBadInput = 2
)

// Main is the main function of a replayer program: a binary of your own that
// registers your workflows on r, for `weir workflow replay --replayer`, or
// for CI. (The weir binary cannot replay your histories itself: it does not
// contain your workflow code.) It replays each history file named in the
// program's arguments, or the history on stdin when none is named, prints
// one line per history and exits with [ReplayExitOK], [ReplayExitDiverged]
// (printing the first divergent event) or [ReplayExitBadInput].
//
//	func main() {
//		r, err := worker.NewReplayer(nil)
//		if err != nil {
//			log.Fatal(err)
//		}
//		worker.AddReplayerWorkflow(r, &OrderWorkflow{})
//		r.Main()
//	}
func (r *Replayer) Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := r.RunMain(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// RunMain is what [Replayer.Main] does, with its arguments, input and
// outputs given; it returns the exit code.
func (r *Replayer) RunMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	type source struct {
		name string
		open func() (io.ReadCloser, error)
	}
	var sources []source
	for _, path := range args {
		sources = append(sources, source{name: path, open: func() (io.ReadCloser, error) { return os.Open(path) }})
	}
	if len(sources) == 0 {
		sources = append(sources, source{name: "stdin", open: func() (io.ReadCloser, error) { return io.NopCloser(stdin), nil }})
	}
	code := ReplayExitOK
	for _, src := range sources {
		rd, err := src.open()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", src.name, err)
			code = max(code, ReplayExitBadInput)
			continue
		}
		result, err := r.ReplayHistory(ctx, rd)
		_ = rd.Close()
		switch {
		case err == nil:
			state := "open"
			if result.Closed {
				state = "closed"
			}
			fmt.Fprintf(stdout, "%s: ok: workflow %s run %s (%s), %d events, %s\n",
				src.name, result.WorkflowID, result.RunID, result.Kind, result.Events, state)
		case errors.Is(err, ErrReplayInvalidHistory), errors.Is(err, ErrReplayUnknownWorkflow):
			fmt.Fprintf(stderr, "%s: %v\n", src.name, err)
			code = max(code, ReplayExitBadInput)
		default:
			fmt.Fprintf(stderr, "%s: does not replay: %v\n", src.name, err)
			if code == ReplayExitOK {
				code = ReplayExitDiverged
			}
		}
	}
	return code
}
