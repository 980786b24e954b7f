package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/devexamples"
	"github.com/weirhq/weir/internal/pgcluster"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/server"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("WEIR_TEST_REPLAYER"); mode != "" {
		replayerMain(mode) // the test binary as a replayer program (replay_test.go)
	}
	dbtest.Main(m)
}

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// weirBinary builds cmd/weir once per test run: the tests below need real
// processes (two migrators at once, signals to weir dev).
func weirBinary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "weir-bin-")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "weir")
		out, err := exec.Command("go", "build", "-o", binaryPath, ".").CombinedOutput()
		if err != nil {
			binaryErr = fmt.Errorf("building weir: %w\n%s", err, out)
		}
	})
	require.NoError(t, binaryErr)
	return binaryPath
}

type result struct {
	code   int
	stderr string
	stdout string
}

func runWeir(ctx context.Context, t *testing.T, env []string, args ...string) *result {
	t.Helper()
	cmd := exec.CommandContext(ctx, weirBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := &result{stderr: stderr.String(), stdout: stdout.String()}
	if exitErr, ok := err.(*exec.ExitError); ok {
		res.code = exitErr.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return res
}

func TestMigrateCommand(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentProcessesOnEmptyDatabase", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		env := []string{"DATABASE_URL=" + dbtest.TestDatabase(ctx, t), "WEIR_SCHEMA="}

		const processes = 2
		results := make([]*result, processes)
		var wg sync.WaitGroup
		for i := range processes {
			wg.Go(func() { results[i] = runWeir(ctx, t, env, "migrate", "up") })
		}
		wg.Wait()

		applied := 0
		for i, res := range results {
			require.Zero(t, res.code, "process %d: %s", i, res.stderr)
			applied += strings.Count(res.stdout, "migrate up: ")
		}
		require.Equal(t, totalVersions(t), applied-strings.Count(results[0].stdout+results[1].stdout, "nothing to do"),
			"each version applied exactly once across both processes:\n%s\n%s", results[0].stdout, results[1].stdout)

		status := runWeir(ctx, t, env, "migrate", "status", "--check")
		require.Zero(t, status.code, status.stderr)
		requireAllLines(t, status.stdout, "current")

		down := runWeir(ctx, t, env, "migrate", "down", "--all")
		require.Zero(t, down.code, down.stderr)
		status = runWeir(ctx, t, env, "migrate", "status", "--check")
		require.Equal(t, 3, status.code, "behind after down --all")
		requireAllLines(t, status.stdout, "behind")

		up := runWeir(ctx, t, env, "migrate", "up")
		require.Zero(t, up.code, up.stderr)
		status = runWeir(ctx, t, env, "migrate", "status", "--check")
		require.Zero(t, status.code, status.stderr)
		requireAllLines(t, status.stdout, "current")
	})

	// The documented full removal of weir's lines: weir first, then
	// fencing, each entirely (--all with --line); fencing first is refused
	// unless forced.
	t.Run("DownFencingInOrder", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		schema := dbtest.EmptySchema(ctx, t)
		env := []string{"DATABASE_URL=" + dbtest.URL(ctx, t), "WEIR_SCHEMA=" + schema}
		res := runWeir(ctx, t, env, "migrate", "up")
		require.Zero(t, res.code, res.stderr)

		res = runWeir(ctx, t, env, "migrate", "down", "--line", "fencing", "--all")
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "weir migrate down --line weir --all")

		res = runWeir(ctx, t, env, "migrate", "down", "--line", "weir", "--all")
		require.Zero(t, res.code, res.stderr)
		res = runWeir(ctx, t, env, "migrate", "down", "--line", "fencing", "--all")
		require.Zero(t, res.code, res.stderr)

		m, err := migrations.New(dbtest.Pool(ctx, t), &migrations.Config{Schema: schema})
		require.NoError(t, err)
		statuses, err := m.Status(ctx)
		require.NoError(t, err)
		for _, s := range statuses {
			if s.Line == migrations.LineMain {
				require.Equal(t, s.Latest, s.Current, "River's main line stays")
			} else {
				require.Zero(t, s.Current, "line %s removed entirely", s.Line)
			}
		}

		// --target-version 0 leaves a line at version 0 too; --force
		// overrides the order.
		res = runWeir(ctx, t, env, "migrate", "up")
		require.Zero(t, res.code, res.stderr)
		res = runWeir(ctx, t, env, "migrate", "down", "--line", "fencing", "--target-version", "0", "--force")
		require.Zero(t, res.code, res.stderr)
		statuses, err = m.Status(ctx)
		require.NoError(t, err)
		require.Zero(t, statuses[1].Current, "fencing removed entirely")
	})

	t.Run("DownNeedsALine", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		res := runWeir(ctx, t, []string{"DATABASE_URL=" + dbtest.URL(ctx, t)}, "migrate", "down")
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "--line")
	})

	t.Run("NoDatabaseURL", func(t *testing.T) {
		t.Parallel()
		res := runWeir(t.Context(), t, []string{"DATABASE_URL="}, "migrate", "status")
		require.Equal(t, 1, res.code)
		require.Contains(t, res.stderr, "DATABASE_URL")
	})

	t.Run("SchemaOption", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		schema := dbtest.EmptySchema(ctx, t)
		env := []string{"DATABASE_URL=" + dbtest.URL(ctx, t)}

		res := runWeir(ctx, t, env, "migrate", "up", "--schema", schema)
		require.Zero(t, res.code, res.stderr)
		res = runWeir(ctx, t, env, "migrate", "status", "--schema", schema, "--check")
		require.Zero(t, res.code, res.stderr)
		requireAllLines(t, res.stdout, "current")

		var tables int
		require.NoError(t, dbtest.Pool(ctx, t).QueryRow(ctx,
			"SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename IN ('river_job', 'weir_namespace')", schema).Scan(&tables))
		require.Equal(t, 2, tables)
	})
}

// totalVersions is how many versions this build ships across all lines.
func totalVersions(t *testing.T) int {
	t.Helper()
	m, err := migrations.New(dbtest.Pool(t.Context(), t), &migrations.Config{Schema: dbtest.EmptySchema(t.Context(), t)})
	require.NoError(t, err)
	statuses, err := m.Status(t.Context())
	require.NoError(t, err)
	total := 0
	for _, s := range statuses {
		total += s.Latest
	}
	return total
}

func requireAllLines(t *testing.T, statusOut, state string) {
	t.Helper()
	for _, line := range []string{"main", "fencing", "weir"} {
		require.Regexp(t, regexp.MustCompile(`(?m)^`+line+`\s+\d+\s+\d+\s+`+state+`\b`), statusOut)
	}
}

func TestDevCommand(t *testing.T) {
	t.Parallel()

	// startDev runs weir dev and returns once it serves, with its base URL.
	startDev := func(ctx context.Context, t *testing.T, env []string, args ...string) (*exec.Cmd, string, *lockedBuffer) {
		t.Helper()
		cmd := exec.Command(weirBinary(t), append([]string{"dev", "--addr", "127.0.0.1:0"}, args...)...) //nolint:noctx // signalled by the test
		cmd.Env = append(os.Environ(), env...)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })

		var (
			output   = &lockedBuffer{}
			baseURL  = make(chan string, 1)
			serveRE  = regexp.MustCompile(`serving (http://\S+)`)
			scanDone = make(chan struct{})
		)
		go func() {
			defer close(scanDone)
			scanner := bufio.NewScanner(stdout)
			for scanner.Scan() {
				output.WriteString(scanner.Text() + "\n")
				if m := serveRE.FindStringSubmatch(scanner.Text()); m != nil {
					baseURL <- m[1]
				}
			}
		}()
		select {
		case url := <-baseURL:
			t.Cleanup(func() { <-scanDone })
			return cmd, url, output
		case <-scanDone:
			t.Fatalf("weir dev exited before serving:\n%s\n%s", output.String(), stderr.String())
		case <-time.After(2 * time.Minute):
			t.Fatalf("weir dev did not serve in time:\n%s", stderr.String())
		}
		return nil, "", nil
	}

	getOK := func(t *testing.T, url string) string {
		t.Helper()
		resp, err := http.Get(url) //nolint:noctx // test
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		return string(body)
	}

	waitExit := func(t *testing.T, cmd *exec.Cmd) {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			require.NoError(t, err, "weir dev exits 0 after a signal")
		case <-time.After(2 * time.Minute):
			t.Fatal("weir dev did not exit")
		}
	}

	for name, sig := range map[string]syscall.Signal{"SIGINT": syscall.SIGINT, "SIGTERM": syscall.SIGTERM} {
		t.Run("PrivatePostgresStopsOn"+name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			dataDir, err := pgcluster.TempDir("weir-dev-test-")
			require.NoError(t, err)
			t.Cleanup(func() { _ = os.RemoveAll(dataDir) })
			env := []string{"DATABASE_URL="}

			// First start creates the cluster; the second reuses it.
			for range 2 {
				cmd, url, output := startDev(ctx, t, env, "--data-dir", dataDir)
				require.Contains(t, getOK(t, url+"/healthz"), `"status":"ok"`)
				require.Contains(t, getOK(t, url+"/readyz"), `"status":"ready"`)
				require.NotEmpty(t, postgresPIDs(t, dataDir), "a postgres runs from the data dir")

				require.NoError(t, cmd.Process.Signal(sig))
				waitExit(t, cmd)
				require.Contains(t, output.String(), "Postgres stopped")
				require.Empty(t, postgresPIDs(t, dataDir), "no postgres process left behind")
			}
		})
	}

	t.Run("UsesDatabaseURL", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		env := []string{"DATABASE_URL=" + dbtest.TestDatabase(ctx, t), "WEIR_POSTGRES_BIN=" + t.TempDir()}

		cmd, url, output := startDev(ctx, t, env)
		require.Contains(t, output.String(), "using DATABASE_URL")
		require.Contains(t, output.String(), "API open without auth: loopback only")
		require.Contains(t, getOK(t, url+"/readyz"), `"status":"ready"`)
		require.Contains(t, getOK(t, url+"/api/v1/namespaces/default/workflows"), `"runs":[]`)
		require.Contains(t, getOK(t, url+"/metrics"), "weir_http_requests_total")
		require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		waitExit(t, cmd)
	})

	t.Run("Examples", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		env := []string{"DATABASE_URL=" + dbtest.TestDatabase(ctx, t), "WEIR_POSTGRES_BIN=" + t.TempDir()}
		examples := devexamples.Examples()

		// describe reads a run through the API.
		describe := func(t *testing.T, url, workflowID string) *server.DescribeResponse {
			t.Helper()
			var d server.DescribeResponse
			require.NoError(t, json.Unmarshal([]byte(getOK(t, url+"/api/v1/namespaces/default/workflows/"+workflowID)), &d))
			return &d
		}
		// waitExamples waits until every example reached the state it
		// wants; the running one must have finished its first task (it
		// waits on its signal and timer with no task pending).
		waitExamples := func(t *testing.T, url string) map[string]uuid.UUID {
			t.Helper()
			runIDs := map[string]uuid.UUID{}
			for _, ex := range examples {
				require.Eventually(t, func() bool {
					d := describe(t, url, ex.WorkflowID)
					runIDs[ex.WorkflowID] = d.RunID
					require.Equal(t, int64(1), d.Generation, ex.WorkflowID)
					require.Equal(t, devexamples.Queue, d.Queue, ex.WorkflowID)
					if ex.Want == "running" {
						return d.State == "running" && d.TaskJobID == nil && d.HistoryLength > 1
					}
					require.Contains(t, []string{"running", ex.Want}, d.State, ex.WorkflowID)
					return d.State == ex.Want
				}, time.Minute, 50*time.Millisecond, ex.WorkflowID)
			}
			return runIDs
		}

		cmd, url, output := startDev(ctx, t, env, "--examples")
		for _, ex := range examples {
			require.Contains(t, output.String(), "example "+ex.WorkflowID+" started")
		}
		first := waitExamples(t, url)
		require.Contains(t, describe(t, url, "order-1002").Failure.Message, "ship failed, order compensated")
		require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		waitExit(t, cmd)

		// A second run starts nothing new, and its worker runs the waiting
		// approval to the end once signalled.
		cmd, url, output = startDev(ctx, t, env, "--examples")
		for _, ex := range examples {
			require.Contains(t, output.String(), "example "+ex.WorkflowID+" already started")
		}
		require.Equal(t, first, waitExamples(t, url))
		res := runWeir(ctx, t, []string{"WEIR_ADDRESS=" + url, "WEIR_TOKEN="}, "workflow", "signal", "approval-r-1", "approval.decision",
			"--args", `{"approved":true,"by":"test"}`)
		require.Equal(t, 0, res.code, res.stderr)
		require.Eventually(t, func() bool {
			return describe(t, url, "approval-r-1").State == "completed"
		}, time.Minute, 50*time.Millisecond)
		require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		waitExit(t, cmd)
	})

	t.Run("OpenOnlyOnLoopback", func(t *testing.T) {
		t.Parallel()
		env := []string{"DATABASE_URL=" + dbtest.TestDatabase(t.Context(), t), "WEIR_TOKENS="}
		res := runWeir(t.Context(), t, env, "dev", "--addr", "0.0.0.0:0")
		require.Equal(t, exitUsage, res.code, res.stderr)
		require.Contains(t, res.stderr, "only on loopback")
	})

	t.Run("NoBinariesNoDatabaseURL", func(t *testing.T) {
		t.Parallel()
		env := []string{"DATABASE_URL=", pgcluster.EnvBinDir + "=" + t.TempDir()}
		res := runWeir(t.Context(), t, env, "dev", "--data-dir", filepath.Join(t.TempDir(), "dev"))
		require.Equal(t, 2, res.code)
		require.Contains(t, res.stderr, "apt-get install -y postgresql")
		require.Contains(t, res.stderr, "DATABASE_URL=")
	})
}

// lockedBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type lockedBuffer struct {
	buf bytes.Buffer
	mu  sync.Mutex
}

func (b *lockedBuffer) WriteString(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(s)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// postgresPIDs lists running postgres processes whose command line names
// dataDir.
func postgresPIDs(t *testing.T, dataDir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []string
	for _, entry := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(cmdline, []byte("postgres")) && bytes.Contains(cmdline, []byte(dataDir)) {
			stat, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "stat"))
			if err == nil && strings.Contains(string(stat), ") Z ") {
				continue // a zombie is already dead
			}
			pids = append(pids, entry.Name())
		}
	}
	return pids
}
