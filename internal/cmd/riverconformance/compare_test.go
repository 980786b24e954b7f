package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/riverqueue/river"

func TestParseTestJSON(t *testing.T) {
	t.Parallel()
	output := `{"Action":"run","Package":"github.com/riverqueue/river","Test":"TestA"}
{"Action":"run","Package":"github.com/riverqueue/river","Test":"TestA/Sub"}
{"Action":"pass","Package":"github.com/riverqueue/river","Test":"TestA/Sub"}
{"Action":"pass","Package":"github.com/riverqueue/river","Test":"TestA"}
{"Action":"run","Package":"github.com/riverqueue/river/rivertest","Test":"TestB"}
{"Action":"output","Package":"github.com/riverqueue/river/rivertest","Test":"TestB","Output":"panic: boom\n"}
{"Action":"fail","Package":"github.com/riverqueue/river/rivertest"}
{"Action":"fail","Package":"github.com/riverqueue/river/riverlog"}
not json: build output
`
	result, err := parseTestJSON(strings.NewReader(output), module)
	require.NoError(t, err)
	require.Equal(t, map[testID]string{
		{"river", "TestA"}:     outcomePass,
		{"river", "TestA/Sub"}: outcomePass,
		{"rivertest", "TestB"}: outcomeNotRun,
	}, result.outcomes)
	// A package that failed with no failed test failed as a whole.
	require.Equal(t, []string{"riverlog", "rivertest"}, result.brokenPkgs)
}

func TestParseKnown(t *testing.T) {
	t.Parallel()
	known, err := parseKnown(strings.NewReader("# comment\n\nriver Test_X/Sub issue-44.1: a reason\n"), "known")
	require.NoError(t, err)
	require.Equal(t, map[testID]string{{"river", "Test_X/Sub"}: "issue-44.1: a reason"}, known)

	_, err = parseKnown(strings.NewReader("river Test_X\n"), "known")
	require.ErrorContains(t, err, "known:1: want package, test and reason")

	_, err = parseKnown(strings.NewReader("river Test_X a\nriver Test_X b\n"), "known")
	require.ErrorContains(t, err, "known:2: river Test_X is listed twice")
}

func TestCompare(t *testing.T) {
	t.Parallel()
	reference := &runResult{driver: driverReference, outcomes: map[testID]string{
		{"river", "TestA"}:        outcomeFail, // a parent: not compared itself
		{"river", "TestA/Same"}:   outcomePass,
		{"river", "TestA/Listed"}: outcomePass,
		{"river", "TestA/New"}:    outcomePass,
		{"river", "TestA/Stale"}:  outcomePass,
		{"river", "TestA/Flaky"}:  outcomeFail,
		{"river", "TestA/Gone"}:   outcomePass,
	}}
	fencing := &runResult{driver: driverFencing, outcomes: map[testID]string{
		{"river", "TestA"}:        outcomeFail,
		{"river", "TestA/Same"}:   outcomePass,
		{"river", "TestA/Listed"}: outcomeFail,
		{"river", "TestA/New"}:    outcomeFail,
		{"river", "TestA/Stale"}:  outcomePass,
		{"river", "TestA/Flaky"}:  outcomePass,
	}}
	known := map[testID]string{
		{"river", "TestA/Listed"}: "a reason",
		{"river", "TestA/Stale"}:  "fixed since",
	}

	rep := compare(reference, fencing, known)
	require.Equal(t, []testID{{"river", "TestA/Listed"}}, rep.listed)
	// Not passing at all (not run) on the fencing driver is a difference too.
	require.Equal(t, []testID{{"river", "TestA/Gone"}, {"river", "TestA/New"}}, rep.unlisted)
	require.Equal(t, []testID{{"river", "TestA/Stale"}}, rep.stale)
	// Counts are of leaf tests; a test that fails only on riverpgxv5 is no difference.
	require.Equal(t, map[string]int{outcomePass: 3, outcomeFail: 2, outcomeNotRun: 1}, rep.counts[driverFencing]["river"])
	require.Equal(t, map[string]int{outcomePass: 5, outcomeFail: 1}, rep.counts[driverReference]["river"])

	var out strings.Builder
	rep.print(&out, "v0.51.2")
	require.Contains(t, out.String(), "FAIL: 2 test(s) pass on riverpgxv5 but not on fencing and are not listed")
	require.Contains(t, out.String(), "river TestA/Gone not run: <reason>")
}

func TestRunPattern(t *testing.T) {
	t.Parallel()
	groups := bySubtestParent([]testID{
		{"rivertest", "TestA/Insert.Opts/Y"},
		{"rivertest", "TestB/X"},
		{"rivertest", "TestA/Insert.Opts/Z"},
		{"rivertest", "TestC"},
		{"rivertest", "TestB/W"},
		{"rivertest", "TestD"},
	})
	var patterns []string
	for _, siblings := range groups {
		patterns = append(patterns, runPattern(siblings))
	}
	require.Equal(t, []string{
		"^(TestC|TestD)$",
		"^TestA$/^Insert\\.Opts$/^(Y|Z)$",
		"^TestB$/^(W|X)$",
	}, patterns)
}

func TestUnfinished(t *testing.T) {
	t.Parallel()
	result := &runResult{outcomes: map[testID]string{
		{"river", "TestA"}:      outcomeFail,
		{"river", "TestA/Done"}: outcomePass,
		{"river", "TestA/Cut"}:  outcomeNotRun,
	}}
	require.Equal(t, map[string][]testID{
		"river":     {{"river", "TestA/Cut"}},
		"rivertest": {{"rivertest", "TestNever"}},
	}, unfinished(result, []testID{{"river", "TestA/Done"}, {"rivertest", "TestNever"}}))
}

// TestPrepareRiver applies the driver hook to River's module at the pinned
// version: a River upgrade that breaks the hook fails here, in `make test`,
// not only in the periodic conformance run.
func TestPrepareRiver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	weirRoot, err := goOutput(ctx, "", "env", "GOMOD")
	require.NoError(t, err)
	weirRoot = filepath.Dir(weirRoot)

	river, err := prepareRiver(ctx, weirRoot, filepath.Join(t.TempDir(), "river"))
	require.NoError(t, err)
	require.Equal(t, riverModule, river.path)

	pinned, err := goOutput(ctx, weirRoot, "list", "-m", "-f", "{{.Version}}", riverModule)
	require.NoError(t, err)
	require.Equal(t, pinned, river.version)

	read := func(name string) string {
		content, err := os.ReadFile(filepath.Join(river.dir, name))
		require.NoError(t, err)
		return string(content)
	}
	require.Contains(t, read("client.go"), "TestNewClientHook(driver, config)")
	require.Contains(t, read("riverdbtest/riverdbtest.go"), "driver = hookDriver(driver)")
	require.Contains(t, read("internal/weirconformance/weirconformance.go"), "fencing.NewDriver")
	require.Contains(t, read("rivertest/rivertest_test.go"), "[*conformanceDriver]")
	require.NotContains(t, read("rivertest/rivertest_test.go"), "[*riverpgxv5.Driver]")
	require.Contains(t, read("go.mod"), "github.com/weirhq/weir => "+weirRoot)
	require.NoFileExists(t, filepath.Join(river.dir, "go.work"))
}
