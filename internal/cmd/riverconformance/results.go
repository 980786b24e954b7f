package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
}

// runTests runs River's tests in the copy on driver, in a database of its own.
func runTests(ctx context.Context, river *riverCopy, driver, adminURL string, opts *options) (*runResult, error) {
	databaseURL, err := createDatabase(ctx, adminURL, "river_conformance_"+driver)
	if err != nil {
		return nil, err
	}
	args := []string{"test", "-json", "-count=1", "-timeout", opts.timeout.String()}
	if driver == driverFencing {
		args = append(args, "-tags", fencingBuildTag)
	}
	if opts.run != "" {
		args = append(args, "-run", opts.run)
	}
	args = append(args, opts.packages...)

	jsonPath := filepath.Join(opts.out, driver+".json")
	jsonFile, err := os.Create(jsonPath)
	if err != nil {
		return nil, err
	}
	defer jsonFile.Close()
	stderrFile, err := os.Create(filepath.Join(opts.out, driver+".stderr"))
	if err != nil {
		return nil, err
	}
	defer stderrFile.Close()

	fmt.Fprintf(os.Stderr, "riverconformance: go %s (driver %s)\n", strings.Join(args, " "), driver)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = river.dir
	cmd.Env = goEnv("TEST_DATABASE_URL=" + databaseURL)
	cmd.Stdout, cmd.Stderr = jsonFile, stderrFile
	start := time.Now()
	// go test exits non-zero when a test fails; the outcomes tell which.
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if _, err := jsonFile.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	result, err := parseTestJSON(jsonFile, river.path)
	if err != nil {
		return nil, err
	}
	result.driver, result.elapsed = driver, time.Since(start)
	if len(result.outcomes) == 0 {
		return nil, fmt.Errorf("go test on driver %s ran no test (%v); see %s and %s.stderr", driver, runErr, jsonPath, driver)
	}
	return result, nil
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

// leaves returns the tests of outcomes that have no subtests.
func leaves(outcomes map[testID]string) []testID {
	parents := map[testID]bool{}
	for id := range outcomes {
		name := id.name
		for {
			i := strings.LastIndexByte(name, '/')
			if i < 0 {
				break
			}
			name = name[:i]
			parents[testID{id.pkg, name}] = true
		}
	}
	var ids []testID
	for id := range outcomes {
		if !parents[id] {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b testID) int {
		return strings.Compare(a.String(), b.String())
	})
	return ids
}
