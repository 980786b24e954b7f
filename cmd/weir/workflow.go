package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/server"
)

const (
	addressDefault   = "http://127.0.0.1:8844"
	namespaceDefault = "default"
	tokenEnvDefault  = "WEIR_TOKEN"
)

// apiOpts are the flags of every command that talks to a server.
type apiOpts struct {
	address   string
	json      bool
	namespace string
	tokenEnv  string
}

func addAPIFlags(cmd *cobra.Command, g *globals, opts *apiOpts) {
	flags := cmd.PersistentFlags()
	flags.StringVar(&opts.address, "address", g.env("WEIR_ADDRESS", addressDefault), "the weir server's URL (env WEIR_ADDRESS)")
	flags.BoolVar(&opts.json, "json", false, "print the server's JSON instead of a table (for an error, its body)")
	flags.StringVarP(&opts.namespace, "namespace", "n", g.env("WEIR_NAMESPACE", namespaceDefault), "namespace (env WEIR_NAMESPACE)")
	flags.StringVar(&opts.tokenEnv, "token-env", tokenEnvDefault, "environment variable holding the bearer token")
}

func (o *apiOpts) client(g *globals) *apiClient {
	address := o.address
	if !strings.Contains(address, "://") {
		address = "http://" + address // "127.0.0.1:8844" means the obvious
	}
	c := &apiClient{address: address, http: &http.Client{}, namespace: o.namespace, token: g.getenv(o.tokenEnv)}
	if o.json {
		c.jsonOut = g.stdout
	}
	return c
}

func newWorkflowCommand(g *globals) *cobra.Command {
	opts := &apiOpts{}
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Start, signal, cancel, terminate and inspect workflow runs through a weir server",
		Long: `Start, signal, cancel, terminate and inspect workflow runs through a weir server
(weir server or weir dev) at --address, with the bearer token in $WEIR_TOKEN
(or the variable --token-env names).

` + exitCodesHelp,
	}
	addAPIFlags(cmd, g, opts)
	cmd.AddCommand(
		newWorkflowStartCommand(g, opts),
		newWorkflowSignalCommand(g, opts),
		newWorkflowReasonCommand(g, opts, "cancel", "Ask a running run to cancel; workflow code may clean up"),
		newWorkflowReasonCommand(g, opts, "terminate", "End a run at once, running no more of its code"),
		newWorkflowDescribeCommand(g, opts),
		newWorkflowListCommand(g, opts),
		newWorkflowHistoryCommand(g, opts),
		newWorkflowResultCommand(g, opts),
		newWorkflowQueryCommand(g, opts),
		newWorkflowUpdateCommand(g, opts),
		newWorkflowReplayCommand(g, opts),
	)
	return cmd
}

// argsOpts read JSON args from --args or --args-file.
type argsOpts struct {
	args     string
	argsFile string
}

func addArgsFlags(cmd *cobra.Command, opts *argsOpts) {
	cmd.Flags().StringVar(&opts.args, "args", "", "args as JSON")
	cmd.Flags().StringVar(&opts.argsFile, "args-file", "", "file of args as JSON (- for stdin)")
	cmd.MarkFlagsMutuallyExclusive("args", "args-file")
}

func (o *argsOpts) read(cmd *cobra.Command) (json.RawMessage, error) {
	data := []byte(o.args)
	var err error
	switch o.argsFile {
	case "":
	case "-":
		if data, err = io.ReadAll(cmd.InOrStdin()); err != nil {
			return nil, fmt.Errorf("reading args from stdin: %w", err)
		}
	default:
		if data, err = os.ReadFile(o.argsFile); err != nil {
			return nil, usageError(fmt.Errorf("reading --args-file: %w", err))
		}
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, nil
	}
	if !json.Valid(data) {
		return nil, usageError(errors.New("args are not valid JSON"))
	}
	return data, nil
}

func newWorkflowStartCommand(g *globals, api *apiOpts) *cobra.Command {
	var (
		args   argsOpts
		req    server.StartRequest
		result resultOpts
		wait   bool
	)
	cmd := &cobra.Command{
		Use:   "start KIND",
		Short: "Start a workflow run",
		Long: `Start a workflow run of KIND with --args as JSON. A repeated start with the same
--request-id and args returns the run the first one created.`,
		Example: `  weir workflow start order --workflow-id order-42 --request-id req-42 --args '{"id":42}'`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, positional []string) error {
			var err error
			req.Kind = positional[0]
			if req.Args, err = args.read(cmd); err != nil {
				return err
			}
			return startRun(cmd, g, api, api.client(g).workflowsPath(), &req, wait, &result, func(run *server.RunResponse) [][2]string {
				return [][2]string{
					{"Workflow ID", run.WorkflowID}, {"Run ID", run.RunID.String()}, {"Namespace", run.Namespace},
					{"Generation", strconv.FormatInt(run.Generation, 10)}, {"Created", strconv.FormatBool(run.Created)},
				}
			})
		},
	}
	addArgsFlags(cmd, &args)
	flags := cmd.Flags()
	flags.StringVar(&req.WorkflowID, "workflow-id", "", "the run's workflow ID (default: a random UUID)")
	flags.StringVar(&req.RequestID, "request-id", "", "makes the start idempotent")
	flags.StringVar(&req.Queue, "queue", "", "River queue of the run's tasks (default: "+client.QueueDefault+")")
	flags.StringVar(&req.IDReusePolicy, "id-reuse-policy", "", "allow_duplicate, allow_duplicate_failed_only or reject_duplicate")
	flags.StringVar(&req.RunTimeout, "run-timeout", "", "time limit of this run, e.g. 10m")
	flags.StringVar(&req.ExecutionTimeout, "execution-timeout", "", "time limit across the workflow's runs, e.g. 24h")
	flags.BoolVar(&wait, "wait", false, "wait for the run's result and print it (exit codes as for result)")
	flags.DurationVar(&result.wait, "wait-timeout", 0, "with --wait: give up after this long (default: wait until the run closes)")
	_ = cmd.RegisterFlagCompletionFunc("id-reuse-policy", fixedCompletion("allow_duplicate", "allow_duplicate_failed_only", "reject_duplicate"))
	return cmd
}

// startRun POSTs body to path, which starts a run, and prints the run's
// fields; with wait it awaits the run's result instead, as workflow result
// does.
func startRun(cmd *cobra.Command, g *globals, api *apiOpts, path string, body any, wait bool, result *resultOpts,
	fields func(*server.RunResponse) [][2]string,
) error {
	c := api.client(g)
	var run server.RunResponse
	if !wait {
		if printed, err := c.call(cmd.Context(), http.MethodPost, path, nil, body, &run); printed || err != nil {
			return err
		}
		return printFields(g, fields(&run))
	}
	if _, err := c.do(cmd.Context(), http.MethodPost, path, nil, body, &run); err != nil {
		return err
	}
	result.runID = run.RunID.String()
	return awaitAndPrint(cmd.Context(), g, api, run.WorkflowID, result)
}

// runCommand completes cmd, a command on WORKFLOW_ID's run (--run-id, by
// default the latest), to POST body to the run's /<name>. With kind, it
// takes KIND too, into *kind, and --args or --args-file into *args. done
// prints the response unless --json did.
func runCommand(g *globals, api *apiOpts, cmd *cobra.Command, body any, kind *string, args *json.RawMessage,
	done func(raw []byte, workflowID string) error,
) *cobra.Command {
	var (
		argsFlags argsOpts
		runID     string
	)
	cmd.Args = exactArgs(1)
	if kind != nil {
		cmd.Args = exactArgs(2)
		addArgsFlags(cmd, &argsFlags)
	}
	cmd.RunE = func(cmd *cobra.Command, positional []string) error {
		if kind != nil {
			var err error
			*kind = positional[1]
			if *args, err = argsFlags.read(cmd); err != nil {
				return err
			}
		}
		c := api.client(g)
		path := c.workflowPath(positional[0], "/"+cmd.Name())
		raw, err := c.do(cmd.Context(), http.MethodPost, path, runQuery(runID), body, nil)
		if err != nil {
			return err
		}
		if api.json {
			return printJSON(g.stdout, raw)
		}
		return done(raw, positional[0])
	}
	addRunIDFlag(cmd, &runID)
	return cmd
}

func addRunIDFlag(cmd *cobra.Command, runID *string) {
	cmd.Flags().StringVar(runID, "run-id", "", "the run (default: the workflow's latest)")
}

func newWorkflowSignalCommand(g *globals, api *apiOpts) *cobra.Command {
	var req server.SignalRequest
	cmd := runCommand(g, api, &cobra.Command{
		Use:     "signal WORKFLOW_ID KIND",
		Short:   "Send a signal of KIND to a running run",
		Example: `  weir workflow signal order-42 approve --args '{"by":"ada"}' --request-id approve-42`,
	}, &req, &req.Kind, &req.Args, func(_ []byte, workflowID string) error {
		fmt.Fprintf(g.stdout, "signal %s sent to %s\n", req.Kind, workflowID)
		return nil
	})
	cmd.Flags().StringVar(&req.RequestID, "request-id", "", "makes the signal idempotent")
	return cmd
}

func newWorkflowReasonCommand(g *globals, api *apiOpts, verb, short string) *cobra.Command {
	var req server.ReasonRequest
	cmd := runCommand(g, api, &cobra.Command{Use: verb + " WORKFLOW_ID", Short: short}, &req, nil, nil, func(_ []byte, workflowID string) error {
		fmt.Fprintf(g.stdout, "%s requested for %s\n", verb, workflowID)
		return nil
	})
	cmd.Flags().StringVar(&req.Reason, "reason", "", "recorded with the "+verb)
	return cmd
}

func newWorkflowDescribeCommand(g *globals, api *apiOpts) *cobra.Command {
	var runID string
	cmd := &cobra.Command{
		Use:   "describe WORKFLOW_ID",
		Short: "Show a run's state, deadlines, pending activities and inbox",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, positional []string) error {
			c := api.client(g)
			var d server.DescribeResponse
			if printed, err := c.call(cmd.Context(), http.MethodGet, c.workflowPath(positional[0], ""), runQuery(runID), nil, &d); printed || err != nil {
				return err
			}
			fields := [][2]string{
				{"Workflow ID", d.WorkflowID}, {"Run ID", d.RunID.String()}, {"Namespace", d.Namespace},
				{"Kind", d.Kind}, {"Queue", d.Queue}, {"State", d.State},
				{"Generation", strconv.FormatInt(d.Generation, 10)}, {"History length", strconv.FormatInt(d.HistoryLength, 10)},
				{"Created", formatTime(&d.CreatedAt)}, {"Updated", formatTime(&d.UpdatedAt)}, {"Closed", formatTime(d.ClosedAt)},
				{"Run deadline", formatTime(d.RunDeadline)}, {"Execution deadline", formatTime(d.ExecutionDeadline)},
			}
			if p := d.Parent; p != nil {
				fields = append(fields, [2]string{"Parent", strings.TrimSpace(p.WorkflowID + " run " + p.RunID.String())})
			}
			if d.Failure != nil {
				fields = append(fields, [2]string{"Failure", d.Failure.Error()})
			}
			if problem := runProblem(&d); problem != "" {
				fields = append(fields, [2]string{"Problem", problem})
			}
			fields = append(fields, [2]string{"Input", compactJSON(d.Args)})
			if d.State == "completed" {
				fields = append(fields, [2]string{"Result", compactJSON(d.Result)})
			}
			if err := printFields(g, fields); err != nil {
				return err
			}
			if f := d.TaskFailure; f != nil && f.Stack != "" {
				fmt.Fprintf(g.stdout, "\nWorkflow task stack (attempt %d):\n%s\n", f.Attempt, strings.TrimRight(f.Stack, "\n"))
			}
			timers := [][]string{{"EVENT", "FIRES AT"}}
			for _, timer := range d.PendingTimers {
				timers = append(timers, []string{strconv.FormatInt(timer.StartedEventID, 10), formatTime(&timer.FireAt)})
			}
			activities := [][]string{{"EVENT", "KIND", "JOB", "STATE", "ATTEMPT", "LAST ERROR"}}
			for _, a := range d.PendingActivities {
				activities = append(activities, []string{
					strconv.FormatInt(a.ScheduledEventID, 10), a.Kind, strconv.FormatInt(a.JobID, 10), a.JobState,
					fmt.Sprintf("%d/%d", a.Attempt, a.MaxAttempts), a.LastError,
				})
			}
			inbox := [][]string{{"TYPE", "DEDUP KEY", "ARRIVED"}}
			for _, item := range d.PendingInbox {
				inbox = append(inbox, []string{item.Type, item.DedupKey, formatTime(&item.CreatedAt)})
			}
			for _, section := range []struct {
				title string
				rows  [][]string
			}{{"Pending timers", timers}, {"Pending activities", activities}, {"Pending inbox", inbox}} {
				if len(section.rows) > 1 {
					fmt.Fprintf(g.stdout, "\n%s:\n", section.title)
					if err := printTable(g, section.rows); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	addRunIDFlag(cmd, &runID)
	return cmd
}

func newWorkflowListCommand(g *globals, api *apiOpts) *cobra.Command {
	var (
		createdAfter, createdBefore string
		kind, prefix, state         string
		pages                       pageOpts
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List runs, newest first",
		Long: `List runs, newest first, one page (--limit) at a time: the next page's
--cursor is printed on stderr. --all follows the cursor to the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := api.client(g)
			q := url.Values{}
			for name, v := range map[string]string{
				"created_after": createdAfter, "created_before": createdBefore, "kind": kind, "state": state, "workflow_id_prefix": prefix,
			} {
				if v != "" {
					q.Set(name, v)
				}
			}
			merged := &server.ListResponse{Runs: []*server.RunSummaryJSON{}}
			var err error
			merged.NextCursor, err = listPages(cmd.Context(), c, c.workflowsPath(), q, &pages, func(page *server.ListResponse) string {
				merged.Runs = append(merged.Runs, page.Runs...)
				return page.NextCursor
			})
			if err != nil {
				return err
			}
			if api.json {
				return printValue(g, merged)
			}
			rows := [][]string{{"WORKFLOW ID", "RUN ID", "GEN", "KIND", "STATE", "CREATED", "CLOSED"}}
			for _, run := range merged.Runs {
				rows = append(rows, []string{
					run.WorkflowID, run.RunID.String(), strconv.FormatInt(run.Generation, 10), run.Kind, run.State,
					formatTime(&run.CreatedAt), formatTime(run.ClosedAt),
				})
			}
			return printPage(g, rows, merged.NextCursor)
		},
	}
	pages.addFlags(cmd)
	flags := cmd.Flags()
	flags.StringVar(&createdAfter, "created-after", "", "only runs started after this RFC 3339 time")
	flags.StringVar(&createdBefore, "created-before", "", "only runs started before this RFC 3339 time")
	flags.StringVar(&kind, "kind", "", "only runs of this workflow kind")
	flags.StringVar(&prefix, "prefix", "", "only runs whose workflow ID starts with this")
	flags.StringVar(&state, "state", "", "only runs in this state")
	_ = cmd.RegisterFlagCompletionFunc("state", fixedCompletion(server.States...))
	return cmd
}

func newWorkflowHistoryCommand(g *globals, api *apiOpts) *cobra.Command {
	var runID string
	cmd := &cobra.Command{
		Use:   "history WORKFLOW_ID",
		Short: "Print a run's whole history",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, positional []string) error {
			merged, err := fetchHistory(cmd, api.client(g), positional[0], runID)
			if err != nil {
				return err
			}
			if api.json {
				return printValue(g, merged)
			}
			rows := [][]string{{"ID", "TIME", "TYPE", "ATTRIBUTES"}}
			for _, e := range merged.Events {
				attrs := string(e.Attributes)
				if len(attrs) > 120 {
					attrs = attrs[:117] + "..."
				}
				rows = append(rows, []string{strconv.FormatInt(e.ID, 10), formatTime(&e.Time), string(e.Type), attrs})
			}
			return printTable(g, rows)
		},
	}
	addRunIDFlag(cmd, &runID)
	return cmd
}

type resultOpts struct {
	runID string
	wait  time.Duration
}

func newWorkflowResultCommand(g *globals, api *apiOpts) *cobra.Command {
	opts := &resultOpts{}
	cmd := &cobra.Command{
		Use:   "result WORKFLOW_ID",
		Short: "Wait for a run to close and print its result",
		Long: `Wait for a run to close and print its result as JSON. A run that closed
without completing prints its failure on stderr and exits 6; with --wait, a
run still running when the wait ends exits 7.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, positional []string) error {
			return awaitAndPrint(cmd.Context(), g, api, positional[0], opts)
		},
	}
	addRunIDFlag(cmd, &opts.runID)
	cmd.Flags().DurationVar(&opts.wait, "wait", 0, "give up after this long (default: wait until the run closes)")
	return cmd
}

// longPollWait is the wait of each long poll; the server may cap it lower.
const longPollWait = 60 * time.Second

func awaitAndPrint(ctx context.Context, g *globals, api *apiOpts, workflowID string, opts *resultOpts) error {
	c := api.client(g)
	var deadline time.Time
	if opts.wait > 0 {
		deadline = time.Now().Add(opts.wait)
	}
	var warned string
	for {
		warned = warnIfStuck(ctx, g, c, workflowID, opts.runID, warned)
		wait := longPollWait
		if !deadline.IsZero() {
			wait = max(0, min(wait, time.Until(deadline)))
		}
		q := runQuery(opts.runID)
		q.Set("wait", wait.Round(time.Millisecond).String())
		var res server.ResultResponse
		raw, err := c.do(ctx, http.MethodGet, c.workflowPath(workflowID, "/result"), q, nil, &res)
		if err != nil {
			return err
		}
		if !res.Closed && (deadline.IsZero() || time.Now().Before(deadline)) {
			continue
		}
		if api.json {
			if err := printJSON(g.stdout, raw); err != nil {
				return err
			}
		}
		switch {
		case !res.Closed:
			return &exitError{code: exitStillRunning, err: fmt.Errorf("workflow %s run %s still running after %s", workflowID, res.RunID, opts.wait)}
		case res.State != "completed":
			failure := ""
			if res.Failure != nil {
				failure = ": " + res.Failure.Error()
			}
			return &exitError{code: exitNotCompleted, err: fmt.Errorf("workflow %s run %s %s%s", workflowID, res.RunID, res.State, failure)}
		case api.json:
			return nil
		default:
			return printJSON(g.stdout, res.Result)
		}
	}
}

func newWorkflowQueryCommand(g *globals, api *apiOpts) *cobra.Command {
	var req server.QueryRequest
	cmd := runCommand(g, api, &cobra.Command{
		Use:     "query WORKFLOW_ID KIND",
		Short:   "Ask a run a query of KIND and print the answer (JSON)",
		Example: `  weir workflow query order-42 status`,
	}, &req, &req.Kind, &req.Args, func(raw []byte, _ string) error { return printAnswer(g, raw) })
	cmd.Flags().StringVar(&req.Timeout, "timeout", "", "how long to wait for a worker's answer (e.g. 10s)")
	return cmd
}

func newWorkflowUpdateCommand(g *globals, api *apiOpts) *cobra.Command {
	var req server.UpdateRequest
	cmd := runCommand(g, api, &cobra.Command{
		Use:     "update WORKFLOW_ID KIND",
		Short:   "Send an update of KIND to a run and print its result (JSON)",
		Example: `  weir workflow update cart-7 add_item --args '{"sku":"A-1"}' --update-id add-a1`,
	}, &req, &req.Kind, &req.Args, func(raw []byte, _ string) error { return printAnswer(g, raw) })
	cmd.Flags().StringVar(&req.UpdateID, "update-id", "", "makes the update idempotent: the same ID returns the first answer")
	return cmd
}

// printAnswer prints the result of a query's or update's answer.
func printAnswer(g *globals, raw []byte) error {
	var value server.ValueResponse
	if err := json.Unmarshal(raw, &value); err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	return printJSON(g.stdout, value.Result)
}

func runQuery(runID string) url.Values {
	q := url.Values{}
	if runID != "" {
		q.Set("run_id", runID)
	}
	return q
}

func fixedCompletion(values ...string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}

// runProblem says in a sentence why a running run does not advance: no live
// worker serves it, or its workflow task fails; "" when neither.
func runProblem(d *server.DescribeResponse) string {
	var problems []string
	if d.TaskWorkers != nil && d.TaskWorkers.Problem != "" {
		problems = append(problems, d.TaskWorkers.Problem)
	}
	if f := d.TaskFailure; f != nil {
		problems = append(problems, fmt.Sprintf("The workflow task fails (attempt %d, %s): %s", f.Attempt, formatTime(&f.At), f.Message))
	}
	return strings.Join(problems, " ")
}

// warnIfStuck tells stderr why the awaited run does not advance, unless it
// told the same before (last); it returns what it told. A failing describe
// tells nothing: the wait goes on.
func warnIfStuck(ctx context.Context, g *globals, c *apiClient, workflowID, runID, last string) string {
	var d server.DescribeResponse
	quiet := *c
	quiet.jsonOut = nil
	if _, err := quiet.do(ctx, http.MethodGet, c.workflowPath(workflowID, ""), runQuery(runID), nil, &d); err != nil {
		return last
	}
	problem := runProblem(&d)
	if problem != "" && problem != last {
		fmt.Fprintln(g.stderr, "weir: warning:", problem)
	}
	return problem
}

// compactJSON prints a JSON payload on one line; "-" when there is none.
func compactJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if len(raw) == 0 || json.Compact(&buf, raw) != nil {
		return "-"
	}
	return buf.String()
}

func formatTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func printFields(g *globals, fields [][2]string) error {
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	for _, f := range fields {
		fmt.Fprintf(tw, "%s:\t%s\n", f[0], f[1])
	}
	return tw.Flush()
}

func printTable(g *globals, rows [][]string) error {
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

// printJSON pretty-prints raw JSON to w.
func printJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		_, err := w.Write(raw)
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

func printValue(g *globals, v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
