// Command riverconformance runs River's own tests on weir's fencing driver and
// compares them with a run on River's riverpgxv5 driver (`make
// river-conformance`):
//
//	go run ./internal/cmd/withpostgres -- go run ./internal/cmd/riverconformance
//
// It copies River's module source at the version weir's go.mod pins from the
// Go module cache, applies a small driver hook (testdata/river.patch and the
// files under testdata/hook, see testdata/README.md), then runs the tests of
// River's root package, rivertest and riverlog once per driver with `go test
// -json`, each run in a database of its own created on TEST_DATABASE_URL's
// server. It exits 1 when a test passes on riverpgxv5 but not on the fencing
// driver and known-differences.txt does not list it with its reason, and
// prints entries of that file which no longer differ.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Drivers, in run order: the reference first.
const (
	driverReference = "riverpgxv5"
	driverFencing   = "fencing"
)

// commandDir is this command's directory in weir's module.
const commandDir = "internal/cmd/riverconformance"

// fencingBuildTag selects the hook files that switch River's tests to the
// fencing driver.
const fencingBuildTag = "riverconformance_fencing"

type options struct {
	known    string
	keep     bool
	out      string
	packages []string
	run      string
	timeout  time.Duration
}

func main() {
	os.Exit(run())
}

func run() int {
	var opts options
	var packages string
	flag.StringVar(&opts.known, "known", "", "known-differences file (default: the one next to this command)")
	flag.BoolVar(&opts.keep, "keep", false, "keep the patched copy of River's module")
	flag.StringVar(&opts.out, "out", "", "directory for each run's go test -json output (default: the work directory)")
	flag.StringVar(&packages, "packages", ". ./rivertest ./riverlog", "River packages to test, relative to its module root")
	flag.StringVar(&opts.run, "run", "", "go test -run pattern (all tests when empty)")
	flag.DurationVar(&opts.timeout, "timeout", 20*time.Minute, "go test -timeout of each run")
	flag.Parse()
	opts.packages = strings.Fields(packages)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := conform(ctx, &opts); err != nil {
		fmt.Fprintln(os.Stderr, "riverconformance:", err)
		if errors.Is(err, errDifferences) {
			return 1
		}
		return 2
	}
	return 0
}

var errDifferences = errors.New("the fencing driver fails River tests that known-differences.txt does not list")

func conform(ctx context.Context, opts *options) error {
	adminURL := os.Getenv("TEST_DATABASE_URL")
	if adminURL == "" {
		return errors.New("TEST_DATABASE_URL is not set; run through `make river-conformance` or go run ./internal/cmd/withpostgres")
	}
	weirRoot, err := goOutput(ctx, "", "env", "GOMOD")
	if err != nil {
		return err
	}
	weirRoot = filepath.Dir(weirRoot)
	if opts.known == "" {
		opts.known = filepath.Join(weirRoot, commandDir, "known-differences.txt")
	}
	known, err := readKnown(opts.known)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "weir-river-conformance-")
	if err != nil {
		return err
	}
	if opts.keep {
		fmt.Fprintln(os.Stderr, "riverconformance: work directory", work)
	} else {
		defer os.RemoveAll(work)
	}
	if opts.out == "" {
		opts.out = work
	}
	if err := os.MkdirAll(opts.out, 0o755); err != nil {
		return err
	}

	start := time.Now()
	river, err := prepareRiver(ctx, weirRoot, filepath.Join(work, "river"))
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "riverconformance: %s %s, hooked copy ready in %s\n", river.path, river.version, time.Since(start).Round(time.Millisecond))

	reference, err := runTests(ctx, river, driverReference, adminURL, opts, nil)
	if err != nil {
		return err
	}
	expected := make([]testID, 0, len(reference.outcomes))
	for id := range reference.outcomes {
		expected = append(expected, id)
	}
	fencing, err := runTests(ctx, river, driverFencing, adminURL, opts, expected)
	if err != nil {
		return err
	}

	report := compare(reference, fencing, known)
	if len(report.unlisted) > 0 {
		// A difference must fail twice: River's tests have timing of their
		// own, and one failure on a loaded machine is not an incompatibility.
		if err := confirm(ctx, river, adminURL, opts, fencing, report.unlisted); err != nil {
			return err
		}
		report = compare(reference, fencing, known)
	}
	report.print(os.Stdout, river.version)
	where := "in " + opts.out
	if opts.out == work && !opts.keep {
		where = "not kept (-out keeps it)"
	}
	fmt.Fprintf(os.Stderr, "riverconformance: done in %s; go test -json output %s\n", time.Since(start).Round(time.Second), where)
	if len(report.unlisted) > 0 {
		return errDifferences
	}
	return nil
}
