// Command withpostgres runs a command with TEST_DATABASE_URL pointing at a
// Postgres server, for `make test` and CI:
//
//	go run ./internal/cmd/withpostgres -- go test -race ./...
//
// When TEST_DATABASE_URL is already set it just runs the command. Otherwise it
// starts a private cluster (internal/pgcluster) in a temporary directory, runs
// the command, then stops the cluster and removes its files, whatever the
// command's outcome. It exits with the command's exit code. When no Postgres
// binaries are installed it says which command installs them and exits 2.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/pgcluster"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withpostgres -- command [args...]")
		return 2
	}
	if os.Getenv(dbtest.EnvDatabaseURL) != "" {
		return runCommand(args, nil)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	cluster, err := pgcluster.StartTemp(ctx, "weir-test-postgres-", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "withpostgres:", err)
		if errors.Is(err, pgcluster.ErrBinariesNotFound) {
			fmt.Fprintf(os.Stderr, "withpostgres: install Postgres with:\n  %s\nor set %s to a server you have.\n", pgcluster.InstallHint, dbtest.EnvDatabaseURL)
		}
		return 2
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cluster.Close(stopCtx); err != nil {
			fmt.Fprintln(os.Stderr, "withpostgres:", err)
		}
	}()
	url := cluster.URL("postgres")
	fmt.Fprintf(os.Stderr, "withpostgres: private Postgres ready in %s at %s\n", time.Since(start).Round(time.Millisecond), url)

	return runCommand(args, []string{dbtest.EnvDatabaseURL + "=" + url})
}

func runCommand(args, extraEnv []string) int {
	cmd := exec.Command(args[0], args[1:]...) //nolint:gosec,noctx // running the given command is the point
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), extraEnv...)

	// Let the child see Ctrl-C (it shares our process group) and finish its
	// own clean-up; we only wait for it, then stop the cluster.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)

	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "withpostgres:", err)
		return 2
	}
	go func() {
		for sig := range signals {
			if sig == syscall.SIGTERM {
				_ = cmd.Process.Signal(sig)
			}
		}
	}()
	if err := cmd.Wait(); cmd.ProcessState == nil {
		fmt.Fprintln(os.Stderr, "withpostgres:", err)
		return 2
	}
	return cmd.ProcessState.ExitCode()
}
