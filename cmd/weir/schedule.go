package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/server"
)

func newScheduleCommand(g *globals) *cobra.Command {
	opts := &apiOpts{}
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Create, change, trigger, backfill and inspect schedules through a weir server",
		Long: `Create, change, trigger, backfill and inspect schedules through a weir server
(weir server or weir dev) at --address, with the bearer token in $WEIR_TOKEN
(or the variable --token-env names). Workers start a schedule's runs when
they are due. Listing and describing need the read role, the rest admin.

` + exitCodesHelp,
	}
	addAPIFlags(cmd, g, opts)
	cmd.AddCommand(
		newScheduleCreateCommand(g, opts),
		newScheduleDescribeCommand(g, opts),
		newScheduleListCommand(g, opts),
		newScheduleUpdateCommand(g, opts),
		newSchedulePauseCommand(g, opts, "pause", "Pause a schedule: no runs start until it is resumed"),
		newSchedulePauseCommand(g, opts, "resume", "Resume a paused schedule; due times that passed meanwhile are skipped (backfill starts them)"),
		newScheduleTriggerCommand(g, opts),
		newScheduleBackfillCommand(g, opts),
		newScheduleBackfillsCommand(g, opts),
		newScheduleDeleteCommand(g, opts),
	)
	return cmd
}

func (c *apiClient) schedulesPath() string {
	return "/api/v1/namespaces/" + url.PathEscape(c.namespace) + "/schedules"
}

func (c *apiClient) schedulePath(id, suffix string) string {
	return c.schedulesPath() + "/" + url.PathEscape(id) + suffix
}

// callSchedule sends a request whose answer is a schedule and prints the
// schedule: the server's JSON with --json, else its fields.
func callSchedule(cmd *cobra.Command, g *globals, api *apiOpts, method, id string, body any) error {
	c := api.client(g)
	path := c.schedulesPath()
	if id != "" {
		path = c.schedulePath(id, "")
	}
	var s server.ScheduleJSON
	if printed, err := c.call(cmd.Context(), method, path, nil, body, &s); printed || err != nil {
		return err
	}
	lastRun := "-"
	if s.LastRunID != nil {
		lastRun = s.LastWorkflowID + " (run " + s.LastRunID.String() + ")"
	}
	jitter := s.Jitter
	if jitter == "" {
		jitter = "-"
	}
	return printFields(g, [][2]string{
		{"Schedule ID", s.ScheduleID}, {"Namespace", s.Namespace}, {"Spec", scheduleSpec(&s)}, {"Time zone", s.TimeZone},
		{"Jitter", jitter}, {"Workflow kind", s.WorkflowKind}, {"Queue", s.Queue}, {"Overlap policy", s.OverlapPolicy},
		{"Paused", strconv.FormatBool(s.Paused)}, {"Next run", formatTime(s.NextRunAt)}, {"Last due", formatTime(s.LastDueAt)},
		{"Last run", lastRun}, {"Created", formatTime(&s.CreatedAt)}, {"Note", s.Note},
	})
}

// scheduleSpec says when a schedule is due: its cron, or its interval.
func scheduleSpec(s *server.ScheduleJSON) string {
	if s.Cron != "" {
		return s.Cron
	}
	return "every " + s.Every
}

func newScheduleCreateCommand(g *globals, api *apiOpts) *cobra.Command {
	var (
		args argsOpts
		req  server.ScheduleRequest
	)
	cmd := &cobra.Command{
		Use:   "create SCHEDULE_ID KIND",
		Short: "Create a schedule starting runs of workflow KIND",
		Long: `Create a schedule starting runs of workflow KIND with --args as JSON, on a cron
expression (--cron, read in --time-zone) or at a fixed interval (--every).`,
		Example: `  weir schedule create nightly-report report --cron "0 2 * * *" --time-zone Europe/Berlin --args '{"full":true}'
  weir schedule create poll-feeds poll --every 15m --jitter 30s --overlap-policy skip`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, positional []string) error {
			var err error
			req.ScheduleID, req.Kind = positional[0], positional[1]
			if req.Args, err = args.read(cmd); err != nil {
				return err
			}
			return callSchedule(cmd, g, api, http.MethodPost, "", &req)
		},
	}
	addArgsFlags(cmd, &args)
	flags := cmd.Flags()
	flags.StringVar(&req.Cron, "cron", "", `five-field cron expression or a descriptor such as "@hourly"`)
	flags.StringVar(&req.Every, "every", "", "fixed interval from the schedule's creation, e.g. 15m")
	flags.StringVar(&req.Jitter, "jitter", "", "delay each start by up to this much, e.g. 30s")
	flags.StringVar(&req.TimeZone, "time-zone", "", "IANA time zone the cron fields are read in (default UTC)")
	flags.StringVar(&req.OverlapPolicy, "overlap-policy", "", "skip (default), buffer_one or allow_all: when a start is due while the last run still runs")
	flags.BoolVar(&req.Paused, "paused", false, "create the schedule paused")
	flags.StringVar(&req.Queue, "queue", "", "River queue of the runs' tasks (default: "+client.QueueDefault+")")
	flags.StringVar(&req.Note, "note", "", "a note for people")
	_ = cmd.RegisterFlagCompletionFunc("overlap-policy", fixedCompletion(server.OverlapPolicies...))
	return cmd
}

func newScheduleDescribeCommand(g *globals, api *apiOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "describe SCHEDULE_ID",
		Short: "Show a schedule: its spec, policy, next and last runs",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, positional []string) error {
			return callSchedule(cmd, g, api, http.MethodGet, positional[0], nil)
		},
	}
}

func newScheduleListCommand(g *globals, api *apiOpts) *cobra.Command {
	var pages pageOpts
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List schedules by ID",
		Long: `List schedules by ID, one page (--limit) at a time: the next page's --cursor is
printed on stderr. --all follows the cursor to the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := api.client(g)
			merged := &server.ScheduleListResponse{Schedules: []*server.ScheduleJSON{}}
			var err error
			merged.NextCursor, err = listPages(cmd.Context(), c, c.schedulesPath(), url.Values{}, &pages, func(page *server.ScheduleListResponse) string {
				merged.Schedules = append(merged.Schedules, page.Schedules...)
				return page.NextCursor
			})
			if err != nil {
				return err
			}
			if api.json {
				return printValue(g, merged)
			}
			rows := [][]string{{"SCHEDULE ID", "SPEC", "KIND", "PAUSED", "NEXT RUN", "LAST RUN"}}
			for _, s := range merged.Schedules {
				last := s.LastWorkflowID
				if last == "" {
					last = "-"
				}
				rows = append(rows, []string{s.ScheduleID, scheduleSpec(s), s.WorkflowKind, strconv.FormatBool(s.Paused), formatTime(s.NextRunAt), last})
			}
			return printPage(g, rows, merged.NextCursor)
		},
	}
	pages.addFlags(cmd)
	return cmd
}

func newScheduleUpdateCommand(g *globals, api *apiOpts) *cobra.Command {
	var (
		note, policy string
		paused       bool
	)
	cmd := &cobra.Command{
		Use:   "update SCHEDULE_ID",
		Short: "Change a schedule's note, overlap policy or paused state",
		Long: `Change a schedule's note, overlap policy or paused state; what no flag names
stays as it is.`,
		Example: `  weir schedule update nightly-report --overlap-policy buffer_one --note "owned by data team"`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, positional []string) error {
			req := &server.ScheduleUpdateRequest{}
			flags := cmd.Flags()
			if flags.Changed("note") {
				req.Note = &note
			}
			if flags.Changed("overlap-policy") {
				req.OverlapPolicy = &policy
			}
			if flags.Changed("paused") {
				req.Paused = &paused
			}
			if req.Note == nil && req.OverlapPolicy == nil && req.Paused == nil {
				return usageError(errors.New("nothing to change: give --note, --overlap-policy or --paused"))
			}
			return callSchedule(cmd, g, api, http.MethodPatch, positional[0], req)
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&note, "note", "", "replace the note")
	flags.StringVar(&policy, "overlap-policy", "", "skip, buffer_one or allow_all")
	flags.BoolVar(&paused, "paused", false, "pause (--paused) or resume (--paused=false)")
	_ = cmd.RegisterFlagCompletionFunc("overlap-policy", fixedCompletion(server.OverlapPolicies...))
	return cmd
}

func newSchedulePauseCommand(g *globals, api *apiOpts, verb, short string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " SCHEDULE_ID",
		Short: short,
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, positional []string) error {
			c := api.client(g)
			var s server.ScheduleJSON
			if printed, err := c.call(cmd.Context(), http.MethodPost, c.schedulePath(positional[0], "/"+verb), nil, nil, &s); printed || err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "schedule %s %sd; next run %s\n", s.ScheduleID, verb, formatTime(s.NextRunAt))
			return nil
		},
	}
}

func newScheduleTriggerCommand(g *globals, api *apiOpts) *cobra.Command {
	var (
		result resultOpts
		wait   bool
	)
	cmd := &cobra.Command{
		Use:   "trigger SCHEDULE_ID",
		Short: "Start the schedule's workflow now, whatever its due times and overlap policy",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, positional []string) error {
			path := api.client(g).schedulePath(positional[0], "/trigger")
			return startRun(cmd, g, api, path, nil, wait, &result, func(run *server.RunResponse) [][2]string {
				return [][2]string{{"Workflow ID", run.WorkflowID}, {"Run ID", run.RunID.String()}, {"Namespace", run.Namespace}}
			})
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the run's result and print it (exit codes as for workflow result)")
	cmd.Flags().DurationVar(&result.wait, "wait-timeout", 0, "with --wait: give up after this long (default: wait until the run closes)")
	return cmd
}

func newScheduleBackfillCommand(g *globals, api *apiOpts) *cobra.Command {
	var (
		req  server.BackfillRequest
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "backfill SCHEDULE_ID --start TIME --end TIME",
		Short: "Start the runs of the schedule's due times in [--start, --end)",
		Long: `Start the runs of the schedule's due times from --start (inclusive) to --end
(exclusive), RFC 3339 times, as if the schedule had run then. Each due time
starts at most one run however often it is backfilled; runs overlap.

A range of up to 1000 due times starts in the request, and its runs are
printed. A longer range (up to 1000000 due times) becomes a durable backfill
that weir's workers run in batches: its ID and progress are printed, and
--wait follows its progress on stderr until it ends. Sending the same range
again returns the same backfill; "weir schedule backfills" lists them.`,
		Example: `  weir schedule backfill nightly-report --start 2026-11-01T00:00:00Z --end 2026-11-08T00:00:00Z
  weir schedule backfill every-minute --start 2026-01-01T00:00:00Z --end 2026-11-01T00:00:00Z --wait`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, positional []string) error {
			if req.Start == "" || req.End == "" {
				return usageError(errors.New("backfill needs --start and --end"))
			}
			c := api.client(g)
			var resp server.BackfillResponse
			if _, err := c.do(cmd.Context(), http.MethodPost, c.schedulePath(positional[0], "/backfill"), nil, &req, &resp); err != nil {
				return err
			}
			if resp.Backfill != nil && wait {
				bf, err := waitBackfill(cmd.Context(), g, c, resp.Backfill)
				if err != nil {
					return err
				}
				resp.Backfill = bf
			}
			if api.json {
				if err := printValue(g, &resp); err != nil {
					return err
				}
			} else if resp.Backfill != nil {
				if err := printBackfills(g, []*server.BackfillJSON{resp.Backfill}); err != nil {
					return err
				}
			} else {
				rows := [][]string{{"WORKFLOW ID", "RUN ID", "CREATED"}}
				for _, run := range resp.Runs {
					rows = append(rows, []string{run.WorkflowID, run.RunID.String(), strconv.FormatBool(run.Created)})
				}
				if err := printTable(g, rows); err != nil {
					return err
				}
				fmt.Fprintf(g.stderr, "%d due times\n", len(resp.Runs))
			}
			if resp.Backfill != nil && resp.Backfill.State == string(client.BackfillFailed) {
				return fmt.Errorf("backfill %s failed: %s", resp.Backfill.BackfillID, resp.Backfill.Error)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Start, "start", "", "start of the range, inclusive (RFC 3339)")
	cmd.Flags().StringVar(&req.End, "end", "", "end of the range, exclusive (RFC 3339)")
	cmd.Flags().BoolVar(&wait, "wait", false, "for a durable backfill: follow its progress until it ends")
	return cmd
}

// backfillPollInterval is how often --wait reads a durable backfill's
// progress.
const backfillPollInterval = time.Second

// waitBackfill reads a durable backfill's progress until it is no longer
// running, reporting each change on stderr.
func waitBackfill(ctx context.Context, g *globals, c *apiClient, bf *server.BackfillJSON) (*server.BackfillJSON, error) {
	path := c.schedulePath(bf.ScheduleID, "/backfills/"+bf.BackfillID.String())
	reported := int64(-1)
	for {
		if bf.Started != reported {
			fmt.Fprintf(g.stderr, "backfill %s: %d of %d due times started\n", bf.BackfillID, bf.Started, bf.Total)
			reported = bf.Started
		}
		if bf.State != string(client.BackfillRunning) {
			return bf, nil
		}
		timer := time.NewTimer(backfillPollInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
		next := new(server.BackfillJSON)
		if _, err := c.do(ctx, http.MethodGet, path, nil, nil, next); err != nil {
			return nil, err
		}
		bf = next
	}
}

func printBackfills(g *globals, list []*server.BackfillJSON) error {
	rows := [][]string{{"BACKFILL ID", "START", "END", "STATE", "STARTED", "TOTAL", "ERROR"}}
	for _, b := range list {
		rows = append(rows, []string{
			b.BackfillID.String(), b.Start.UTC().Format(time.RFC3339Nano), b.End.UTC().Format(time.RFC3339Nano), b.State,
			strconv.FormatInt(b.Started, 10), strconv.FormatInt(b.Total, 10), b.Error,
		})
	}
	return printTable(g, rows)
}

func newScheduleBackfillsCommand(g *globals, api *apiOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "backfills SCHEDULE_ID",
		Short: "List the schedule's durable backfills and their progress, newest first",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, positional []string) error {
			c := api.client(g)
			var resp server.BackfillListResponse
			if printed, err := c.call(cmd.Context(), http.MethodGet, c.schedulePath(positional[0], "/backfills"), nil, nil, &resp); printed || err != nil {
				return err
			}
			return printBackfills(g, resp.Backfills)
		},
	}
}

func newScheduleDeleteCommand(g *globals, api *apiOpts) *cobra.Command {
	return &cobra.Command{
		Use:   "delete SCHEDULE_ID",
		Short: "Delete a schedule; the runs it started go on",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, positional []string) error {
			c := api.client(g)
			if printed, err := c.call(cmd.Context(), http.MethodDelete, c.schedulePath(positional[0], ""), nil, nil, nil); printed || err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "schedule %s deleted\n", positional[0])
			return nil
		},
	}
}
