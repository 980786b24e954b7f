package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Outcomes of a test in a run. A test the run never finished (its binary did
// not build, panicked or timed out first) is outcomeNotRun.
const (
	outcomePass   = "pass"
	outcomeFail   = "fail"
	outcomeSkip   = "skip"
	outcomeNotRun = "not run"
)

// testID names a test: River's package, relative to its module ("river" for
// the root package), and the test's full name with its subtests.
type testID struct {
	pkg  string
	name string
}

func (id testID) String() string { return id.pkg + " " + id.name }

// runResult is the outcome of each test of one run, and the packages whose
// test binary failed as a whole (build failure, panic, timeout).
type runResult struct {
	driver     string
	outcomes   map[testID]string
	brokenPkgs []string
	elapsed    time.Duration
	reruns     int
	// passedOnRerun failed once and passed when run again (confirm).
	passedOnRerun []testID
}

// runTests runs River's tests in the copy on driver, in a database of its own.
// A panic ends a test binary with its other tests unfinished; those (and the
// tests of expected it never reached) are rerun until a rerun finishes none.
func runTests(ctx context.Context, river *riverCopy, driver, adminURL string, opts *options, expected []testID) (*runResult, error) {
	databaseURL, err := createDatabase(ctx, adminURL, "river_conformance_"+driver)
	if err != nil {
		return nil, err
	}
	logs, err := newRunLogs(opts.out, driver)
	if err != nil {
		return nil, err
	}
	defer logs.close()

	start := time.Now()
	result, err := goTest(ctx, river, driver, databaseURL, opts.packages, opts.run, opts.timeout, logs)
	if err != nil {
		return nil, err
	}
	for progress := true; progress; {
		progress = false
		pending := unfinished(result, expected)
		for _, pkg := range slices.Sorted(maps.Keys(pending)) {
			for _, siblings := range bySubtestParent(pending[pkg]) {
				rerun, err := goTest(ctx, river, driver, databaseURL, []string{packageArg(pkg)}, runPattern(siblings), opts.timeout, logs)
				if err != nil {
					return nil, err
				}
				result.reruns++
				for id, outcome := range rerun.outcomes {
					if current, ok := result.outcomes[id]; ok && current != outcomeNotRun {
						continue // finished in an earlier run
					}
					if outcome != outcomeNotRun {
						progress = true
					}
					result.outcomes[id] = outcome
				}
			}
		}
	}
	result.driver, result.elapsed = driver, time.Since(start)
	return result, nil
}

// confirm runs ids again on the fencing driver, in a database of its own, and
// records in fencing the outcome of each that passes now, counted in its
// passedOnRerun.
func confirm(ctx context.Context, river *riverCopy, adminURL string, opts *options, fencing *runResult, ids []testID) error {
	databaseURL, err := createDatabase(ctx, adminURL, "river_conformance_confirm")
	if err != nil {
		return err
	}
	logs, err := newRunLogs(opts.out, driverFencing+"-confirm")
	if err != nil {
		return err
	}
	defer logs.close()
	byPkg := map[string][]testID{}
	for _, id := range ids {
		byPkg[id.pkg] = append(byPkg[id.pkg], id)
	}
	for _, pkg := range slices.Sorted(maps.Keys(byPkg)) {
		for _, siblings := range bySubtestParent(byPkg[pkg]) {
			rerun, err := goTest(ctx, river, driverFencing, databaseURL, []string{packageArg(pkg)}, runPattern(siblings), opts.timeout, logs)
			if err != nil {
				return err
			}
			for _, id := range siblings {
				if rerun.outcomes[id] == outcomePass {
					fencing.outcomes[id] = outcomePass
					fencing.passedOnRerun = append(fencing.passedOnRerun, id)
				}
			}
		}
	}
	return nil
}

// goTest runs go test -json once and reads its outcomes.
func goTest(ctx context.Context, river *riverCopy, driver, databaseURL string, packages []string, run string, timeout time.Duration, logs *runLogs) (*runResult, error) {
	args := []string{"test", "-json", "-count=1", "-timeout", timeout.String()}
	if driver == driverFencing {
		args = append(args, "-tags", fencingBuildTag)
	}
	if run != "" {
		args = append(args, "-run", run)
	}
	args = append(args, packages...)
	fmt.Fprintf(os.Stderr, "riverconformance: go %s (driver %s)\n", strings.Join(args, " "), driver)

	var output bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = river.dir
	cmd.Env = goEnv("TEST_DATABASE_URL=" + databaseURL)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&output, logs.json), logs.stderr
	// Interrupted, go test stops its test binaries.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	// go test exits non-zero when a test fails; the outcomes tell which.
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	result, err := parseTestJSON(&output, river.path)
	if err != nil {
		return nil, err
	}
	if len(result.outcomes) == 0 {
		return nil, fmt.Errorf("go test on driver %s ran no test (%v); see %s and %s", driver, runErr, logs.json.Name(), logs.stderr.Name())
	}
	return result, nil
}

// runLogs keep each driver's go test -json output and stderr.
type runLogs struct{ json, stderr *os.File }

func newRunLogs(dir, driver string) (*runLogs, error) {
	jsonFile, err := os.Create(filepath.Join(dir, driver+".json"))
	if err != nil {
		return nil, err
	}
	stderrFile, err := os.Create(filepath.Join(dir, driver+".stderr"))
	if err != nil {
		jsonFile.Close()
		return nil, err
	}
	return &runLogs{json: jsonFile, stderr: stderrFile}, nil
}

func (l *runLogs) close() {
	l.json.Close()
	l.stderr.Close()
}

// unfinished returns, by package, the leaf tests of result and expected that
// result has no outcome for.
func unfinished(result *runResult, expected []testID) map[string][]testID {
	byPkg := map[string][]testID{}
	for _, id := range leaves(maps.Keys(result.outcomes), slices.Values(expected)) {
		if outcome, ok := result.outcomes[id]; !ok || outcome == outcomeNotRun {
			byPkg[id.pkg] = append(byPkg[id.pkg], id)
		}
	}
	return byPkg
}

// bySubtestParent groups ids by the test they are subtests of (top-level tests
// form one group), in name order.
func bySubtestParent(ids []testID) [][]testID {
	groups := map[string][]testID{}
	for _, id := range ids {
		parent, _ := cutLast(id.name)
		groups[parent] = append(groups[parent], id)
	}
	sorted := make([][]testID, 0, len(groups))
	for _, parent := range slices.Sorted(maps.Keys(groups)) {
		sorted = append(sorted, groups[parent])
	}
	return sorted
}

// runPattern is a go test -run pattern that selects exactly siblings, tests
// with the same parent: a rerun must not run again a finished test that
// panics.
func runPattern(siblings []testID) string {
	var names []string
	parent := ""
	for _, id := range siblings {
		var name string
		parent, name = cutLast(id.name)
		names = append(names, regexp.QuoteMeta(name))
	}
	slices.Sort(names)
	var levels []string
	if parent != "" {
		for part := range strings.SplitSeq(parent, "/") {
			levels = append(levels, "^"+regexp.QuoteMeta(part)+"$")
		}
	}
	return strings.Join(append(levels, "^("+strings.Join(names, "|")+")$"), "/")
}

// cutLast splits name around its last slash: ("", name) when it has none.
func cutLast(name string) (before, after string) {
	i := strings.LastIndexByte(name, '/')
	return name[:max(i, 0)], name[i+1:]
}

func packageArg(pkg string) string {
	if pkg == "river" {
		return "."
	}
	return "./" + pkg
}

// testEvent is the part of a `go test -json` event read here.
type testEvent struct {
	Action  string
	Package string
	Test    string
}

// parseTestJSON reads `go test -json` output: the last outcome of each test,
// and the packages that failed without a test failing (their unfinished tests
// are not run).
func parseTestJSON(r io.Reader, modulePath string) (*runResult, error) {
	result := &runResult{outcomes: map[testID]string{}}
	failedPkgs := map[string]bool{}
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for scanner.Scan() {
		line := scanner.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var event testEvent
		if err := json.Unmarshal(line, &event); err != nil {
			return nil, fmt.Errorf("reading go test -json output: %w", err)
		}
		pkg := shortPackage(event.Package, modulePath)
		switch {
		case event.Test == "" && event.Action == outcomeFail:
			failedPkgs[pkg] = true
		case event.Test == "":
		case event.Action == "run":
			result.outcomes[testID{pkg, event.Test}] = outcomeNotRun
		case event.Action == outcomePass, event.Action == outcomeFail, event.Action == outcomeSkip:
			result.outcomes[testID{pkg, event.Test}] = event.Action
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	for pkg := range failedPkgs {
		broken := true
		for id, outcome := range result.outcomes {
			if id.pkg == pkg && outcome == outcomeFail {
				broken = false
				break
			}
		}
		if broken {
			result.brokenPkgs = append(result.brokenPkgs, pkg)
		}
	}
	slices.Sort(result.brokenPkgs)
	return result, nil
}

// shortPackage names River's package relative to its module: "river" for the
// root, else the directory ("rivertest").
func shortPackage(importPath, modulePath string) string {
	if importPath == modulePath {
		return "river"
	}
	return strings.TrimPrefix(importPath, modulePath+"/")
}

// leaves returns the tests of sets that have no subtests, each once.
func leaves(sets ...iter.Seq[testID]) []testID {
	all, parents := map[testID]bool{}, map[testID]bool{}
	for _, set := range sets {
		for id := range set {
			all[id] = true
			for name, _ := cutLast(id.name); name != ""; name, _ = cutLast(name) {
				parents[testID{id.pkg, name}] = true
			}
		}
	}
	ids := slices.Collect(maps.Keys(all))
	ids = slices.DeleteFunc(ids, func(id testID) bool { return parents[id] })
	slices.SortFunc(ids, func(a, b testID) int { return strings.Compare(a.String(), b.String()) })
	return ids
}
