package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// readKnown reads a known-differences file: one River test a line, as its
// package (relative to River's module, "river" for the root), its full test
// name and the reason it differs on the fencing driver, separated by spaces.
// Blank lines and lines starting with # are ignored.
func readKnown(path string) (map[testID]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return parseKnown(file, path)
}

func parseKnown(r io.Reader, name string) (map[testID]string, error) {
	known := map[testID]string{}
	scanner := bufio.NewScanner(r)
	for number := 1; scanner.Scan(); number++ {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want package, test and reason, got %q", name, number, line)
		}
		id := testID{pkg: fields[0], name: fields[1]}
		if _, dup := known[id]; dup {
			return nil, fmt.Errorf("%s:%d: %s is listed twice", name, number, id)
		}
		known[id] = strings.Join(fields[2:], " ")
	}
	return known, scanner.Err()
}

// report compares a fencing run with the reference run, test by test.
type report struct {
	runs []*runResult
	// counts[driver][pkg][outcome] counts leaf tests.
	counts   map[string]map[string]map[string]int
	pkgs     []string
	listed   []testID // differ, and are listed
	unlisted []testID // differ, and are not listed
	stale    []testID // listed, but pass on both drivers
	outcomes map[testID][2]string
	known    map[testID]string
}

// compare finds the leaf tests that pass on the reference run but not on the
// fencing run.
func compare(reference, fencing *runResult, known map[testID]string) *report {
	rep := &report{
		runs:     []*runResult{reference, fencing},
		counts:   map[string]map[string]map[string]int{},
		outcomes: map[testID][2]string{},
		known:    known,
	}
	for _, id := range leaves(maps.Keys(reference.outcomes), maps.Keys(fencing.outcomes)) {
		outcomes := [2]string{outcomeOf(reference, id), outcomeOf(fencing, id)}
		rep.outcomes[id] = outcomes
		if !slices.Contains(rep.pkgs, id.pkg) {
			rep.pkgs = append(rep.pkgs, id.pkg)
		}
		for i, run := range rep.runs {
			if rep.counts[run.driver] == nil {
				rep.counts[run.driver] = map[string]map[string]int{}
			}
			if rep.counts[run.driver][id.pkg] == nil {
				rep.counts[run.driver][id.pkg] = map[string]int{}
			}
			rep.counts[run.driver][id.pkg][outcomes[i]]++
		}
		_, isKnown := known[id]
		switch {
		case outcomes[0] != outcomePass:
		case outcomes[1] != outcomePass && isKnown:
			rep.listed = append(rep.listed, id)
		case outcomes[1] != outcomePass:
			rep.unlisted = append(rep.unlisted, id)
		case isKnown:
			rep.stale = append(rep.stale, id)
		}
	}
	slices.Sort(rep.pkgs)
	return rep
}

func outcomeOf(run *runResult, id testID) string {
	if outcome, ok := run.outcomes[id]; ok {
		return outcome
	}
	return outcomeNotRun
}

func (rep *report) print(w io.Writer, version string) {
	fmt.Fprintf(w, "River %s tests, leaf tests per package and driver:\n\n", version)
	fmt.Fprintf(w, "%-12s %-12s %6s %6s %6s %8s\n", "package", "driver", "pass", "fail", "skip", "not run")
	for _, pkg := range rep.pkgs {
		for _, run := range rep.runs {
			counts := rep.counts[run.driver][pkg]
			fmt.Fprintf(w, "%-12s %-12s %6d %6d %6d %8d\n", pkg, run.driver,
				counts[outcomePass], counts[outcomeFail], counts[outcomeSkip], counts[outcomeNotRun])
		}
	}
	for _, run := range rep.runs {
		fmt.Fprintf(w, "go test on %s took %s", run.driver, run.elapsed.Round(time.Second))
		if run.reruns > 0 {
			fmt.Fprintf(w, ", with %d rerun(s) of tests a test binary left unfinished (a panic ends it)", run.reruns)
		}
		if len(run.passedOnRerun) > 0 {
			fmt.Fprintf(w, "; failed once and passed when run again (not counted as differences): %s", joinIDs(run.passedOnRerun))
		}
		if len(run.brokenPkgs) > 0 {
			fmt.Fprintf(w, "; failed with no failing test (build failure, timeout): %s", strings.Join(run.brokenPkgs, ", "))
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintf(w, "\n%d test(s) pass on %s but not on %s and are listed in the known differences.\n",
		len(rep.listed), driverReference, driverFencing)
	if len(rep.stale) > 0 {
		fmt.Fprintf(w, "\nListed, but now passing on %s too (remove them from the known differences):\n", driverFencing)
		for _, id := range rep.stale {
			fmt.Fprintf(w, "  %s  (%s)\n", id, rep.known[id])
		}
	}
	if len(rep.unlisted) > 0 {
		fmt.Fprintf(w, "\nFAIL: %d test(s) pass on %s but not on %s and are not listed (add each with its reason, or fix it):\n",
			len(rep.unlisted), driverReference, driverFencing)
		for _, id := range rep.unlisted {
			fmt.Fprintf(w, "%s %s: <reason>\n", id, rep.outcomes[id][1])
		}
	}
}

func joinIDs(ids []testID) string {
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = id.String()
	}
	return strings.Join(names, ", ")
}
