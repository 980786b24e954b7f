package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/server"
)

// exitReplayDiverged: the history does not replay against the replayer's
// code (worker.ReplayExitDiverged).
const exitReplayDiverged = 9

func newWorkflowReplayCommand(g *globals, api *apiOpts) *cobra.Command {
	var file, replayer, runID string
	cmd := &cobra.Command{
		Use:   "replay [WORKFLOW_ID]",
		Short: "Check that today's workflow code still replays a run's history",
		Long: `Replay a run's history (fetched from the server, or read from --file as written by
weir workflow history --json or client.WriteHistoryJSON) against your workflow
code, to catch a non-deterministic change before it is deployed.

The weir binary does not contain your workflow code, so the replay runs in a
replayer program of your own: a main that registers your workflows on a
worker.Replayer and calls its Main method. Pass it as --replayer (or set
$WEIR_REPLAYER); the history goes to its stdin.

Exit codes: 0 the history replays; 9 it does not (the first divergent event is
printed); 2 usage, or the replayer cannot read the history or has no workflow
of its kind; 1 and 3–5 as for the other workflow commands.`,
		Args: func(cmd *cobra.Command, positional []string) error {
			switch {
			case file == "" && len(positional) != 1:
				return usageError(errors.New("give a WORKFLOW_ID, or --file"))
			case file != "" && len(positional) != 0:
				return usageError(errors.New("give a WORKFLOW_ID or --file, not both"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, positional []string) error {
			if replayer == "" {
				replayer = g.getenv("WEIR_REPLAYER")
			}
			if replayer == "" {
				return usageError(errors.New("--replayer is required: a program of yours that registers your workflows on a worker.Replayer and calls its Main (weir cannot replay your code itself)"))
			}
			var history []byte
			if file != "" {
				data, err := os.ReadFile(file)
				if err != nil {
					return usageError(fmt.Errorf("reading --file: %w", err))
				}
				history = data
			} else {
				events, err := fetchHistory(cmd, api.client(g), positional[0], runID)
				if err != nil {
					return err
				}
				if history, err = json.Marshal(events); err != nil {
					return err
				}
			}
			run := exec.CommandContext(cmd.Context(), replayer)
			run.Stdin = bytes.NewReader(history)
			run.Stdout, run.Stderr = g.stdout, g.stderr
			err := run.Run()
			var exitErr *exec.ExitError
			switch {
			case err == nil:
				return nil
			case errors.As(err, &exitErr) && exitErr.ExitCode() == 1: // worker.ReplayExitDiverged
				return &exitError{code: exitReplayDiverged, err: errors.New("the history does not replay against the replayer's code")}
			case errors.As(err, &exitErr) && exitErr.ExitCode() == 2: // worker.ReplayExitBadInput
				return usageError(errors.New("the replayer could not replay the history (see its message above)"))
			default:
				return fmt.Errorf("running replayer %s: %w", replayer, err)
			}
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "replay this history file instead of fetching one")
	cmd.Flags().StringVar(&replayer, "replayer", "", "your replayer program (default $WEIR_REPLAYER)")
	cmd.Flags().StringVar(&runID, "run-id", "", "the run (default: the workflow's latest)")
	return cmd
}

// fetchHistory reads a run's whole history from the server, page by page.
func fetchHistory(cmd *cobra.Command, c *apiClient, workflowID, runID string) (*server.HistoryResponse, error) {
	merged := &server.HistoryResponse{Events: []*client.Event{}}
	q := runQuery(runID)
	for {
		var page server.HistoryResponse
		if _, err := c.do(cmd.Context(), http.MethodGet, c.workflowPath(workflowID, "/history"), q, nil, &page); err != nil {
			return nil, err
		}
		merged.Events = append(merged.Events, page.Events...)
		if page.NextAfterEventID == 0 {
			return merged, nil
		}
		q.Set("after_event_id", strconv.FormatInt(page.NextAfterEventID, 10))
	}
}
