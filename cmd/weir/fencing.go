package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirhq/weir/fencing"
)

func newFencingCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fencing",
		Short: "Operate the fencing layer's leases",
	}
	cmd.AddCommand(newRecoverUnleasedCommand(g))
	return cmd
}

// listedJobIDsMax caps the job IDs recover-unleased prints.
const listedJobIDsMax = 100

func newRecoverUnleasedCommand(g *globals) *cobra.Command {
	opts := &fencing.RecoverUnleasedOpts{}
	cmd := &cobra.Command{
		Use:   "recover-unleased --older-than DURATION",
		Short: "Recover running jobs without a lease, left by processes without fencing that are gone",
		Long: `Recover running jobs that have no lease: attempts that processes without fencing
(plain River clients, before or during the upgrade) started and never finished. Nothing else
recovers them but River's rescuer, after its RescueStuckJobsAfter (1 hour by default): the lease
reaper never touches a job without a lease, since its attempt may still run in a live process.

Run it only once every process without fencing is gone: a job still running in such a process
would run twice. Jobs whose attempt started within --older-than are left alone and counted.
Each job recovered goes back to available (discarded past its max attempts, cancelled if a
cancel was requested), with an error entry saying so. Try --dry-run first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.OlderThan <= 0 {
				return usageError(errors.New("say how old an attempt must be to recover it with --older-than (e.g. 10m): longer than any attempt of the processes without fencing could still run"))
			}
			pool, err := g.pool(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			driver, err := fencing.NewDriver(pool, nil)
			if err != nil {
				return err
			}
			opts.Schema = g.schema
			res, err := driver.RecoverUnleased(cmd.Context(), opts)
			if err != nil {
				return err
			}
			printRecovered(g, opts, res)
			return nil
		},
	}
	cmd.Flags().DurationVar(&opts.OlderThan, "older-than", 0, "only jobs whose attempt started longer ago than this (required)")
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "count what would be recovered, change nothing")
	return cmd
}

func printRecovered(g *globals, opts *fencing.RecoverUnleasedOpts, res *fencing.RecoverUnleasedResult) {
	verb := "recovered"
	if opts.DryRun {
		verb = "would recover"
	}
	fmt.Fprintf(g.stdout, "recover-unleased: %s %d jobs: %d available, %d discarded, %d cancelled\n",
		verb, len(res.JobIDs), res.Available, res.Discarded, res.Cancelled)
	if len(res.JobIDs) > 0 {
		shown := res.JobIDs[:min(len(res.JobIDs), listedJobIDsMax)]
		ids := make([]string, len(shown))
		for i, id := range shown {
			ids[i] = strconv.FormatInt(id, 10)
		}
		more := ""
		if len(res.JobIDs) > listedJobIDsMax {
			more = fmt.Sprintf(" and %d more", len(res.JobIDs)-listedJobIDsMax)
		}
		fmt.Fprintf(g.stdout, "recover-unleased: job IDs: %s%s\n", strings.Join(ids, ","), more)
	}
	if res.Younger > 0 {
		fmt.Fprintf(g.stdout, "recover-unleased: left %d running jobs without a lease whose attempt started within %s\n",
			res.Younger, opts.OlderThan.Round(time.Second))
	}
}
