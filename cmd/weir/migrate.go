package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/weirhq/weir/migrations"
)

func newMigrateCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Migrate the database: River's main line, then fencing, then weir",
		Long: `Migrate the database. Lines: ` + strings.Join(migrations.Lines(), ", ") + `.

Up and down hold an advisory lock per schema, so several processes may run
'weir migrate up' at once: one applies the versions, the others find nothing
left to do. Migrate, then deploy new code: every migration is additive, old
code keeps working, and new workers refuse a schema that is behind them.`,
	}
	cmd.AddCommand(newMigrateUpCommand(g), newMigrateDownCommand(g), newMigrateStatusCommand(g))
	return cmd
}

func newMigrateUpCommand(g *globals) *cobra.Command {
	opts := &migrations.UpOpts{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Apply pending versions (every line to its latest by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			migrator, closePool, err := g.migrator(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			res, err := migrator.Up(cmd.Context(), opts)
			if err != nil {
				return err
			}
			printResult(g, res)
			return nil
		},
	}
	cmd.Flags().StringVar(&opts.Line, "line", "", "only this line (default: every line)")
	cmd.Flags().IntVar(&opts.TargetVersion, "target-version", 0, "apply up to and including this version (needs --line)")
	cmd.Flags().IntVar(&opts.MaxSteps, "max-steps", 0, "apply at most this many versions (needs --line)")
	return cmd
}

func newMigrateDownCommand(g *globals) *cobra.Command {
	var (
		all  bool
		opts = &migrations.DownOpts{}
	)
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Remove versions of one line (one step by default), a whole line, or every line",
		Long: `Remove versions of one line (one step by default), a whole line (--line L --all,
or --target-version 0), or every line (--all: weir, fencing, then River's main).

Remove weir's line before fencing, and fencing only once no fenced process
runs: without --force, down refuses to remove fencing versions while the weir
line is installed or while jobs hold live fencing leases. Full removal of
weir's lines, keeping River's:

  weir migrate down --line weir --all
  weir migrate down --line fencing --all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			targetSet := cmd.Flags().Changed("target-version")
			switch {
			case all && (targetSet || opts.MaxSteps != 0):
				return errors.New("--all removes a whole line (with --line) or every line; it takes no --target-version or --max-steps")
			case all:
				opts.TargetVersion = -1
			case opts.Line == "":
				return errors.New("say which line to migrate down with --line (" + strings.Join(migrations.Lines(), ", ") + "), or remove everything with --all")
			case targetSet && opts.TargetVersion == 0:
				opts.TargetVersion = -1 // leave the line at version 0: remove it
			}
			migrator, closePool, err := g.migrator(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			res, err := migrator.Down(cmd.Context(), opts)
			if err != nil {
				return err
			}
			printResult(g, res)
			return nil
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "remove the whole --line, or every line (weir, fencing, then River's main) without --line")
	cmd.Flags().BoolVar(&opts.Force, "force", false, "remove fencing versions even while the weir line is installed or jobs hold live leases")
	cmd.Flags().StringVar(&opts.Line, "line", "", "the line to migrate down")
	cmd.Flags().IntVar(&opts.TargetVersion, "target-version", 0, "leave the line at this version (0 or -1 removes it entirely)")
	cmd.Flags().IntVar(&opts.MaxSteps, "max-steps", 0, "remove at most this many versions (default 1)")
	return cmd
}

func newMigrateStatusCommand(g *globals) *cobra.Command {
	var check bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show each line's version against what this build requires",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			migrator, closePool, err := g.migrator(cmd)
			if err != nil {
				return err
			}
			defer closePool()
			statuses, err := migrator.Status(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "LINE\tCURRENT\tREQUIRED\tSTATE\tPENDING")
			behind := false
			for _, s := range statuses {
				state := "current"
				switch {
				case s.Behind():
					state, behind = "behind", true
				case len(s.Unknown) > 0:
					state = "ahead"
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", s.Line, s.Current, s.Latest, state, versionList(s.Pending))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if check && behind {
				return &exitError{code: 3, err: migrator.Verify(cmd.Context())}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "exit 3 when any line is behind this build")
	return cmd
}

func (g *globals) migrator(cmd *cobra.Command) (*migrations.Migrator, func(), error) {
	pool, err := g.pool(cmd.Context())
	if err != nil {
		return nil, nil, err
	}
	migrator, err := migrations.New(pool, &migrations.Config{Logger: g.logger(), Schema: g.schema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return migrator, pool.Close, nil
}

func printResult(g *globals, res *migrations.MigrateResult) {
	if len(res.Versions) == 0 {
		fmt.Fprintf(g.stdout, "migrate %s: nothing to do\n", res.Direction)
		return
	}
	for _, v := range res.Versions {
		fmt.Fprintf(g.stdout, "migrate %s: %s %03d %s (%s)\n", res.Direction, v.Line, v.Version, v.Name, v.Duration.Round(100_000))
	}
}

func versionList(versions []int) string {
	if len(versions) == 0 {
		return "-"
	}
	parts := make([]string, len(versions))
	for i, v := range versions {
		parts[i] = fmt.Sprintf("%03d", v)
	}
	return strings.Join(parts, ",")
}
