package main

import (
	"bytes"
	"log"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// TestReadmeProgram keeps the README's first program honest: it must be this
// package's main.go, byte for byte, so that the build of this package is the
// build of the README's sample.
func TestReadmeProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	source, err := os.ReadFile("main.go")
	require.NoError(t, err)

	block, ok := firstGoBlock(string(readme))
	require.True(t, ok, "README.md has no ```go block")
	require.Equal(t, string(source), block,
		"README.md's first ```go block and examples/quickstart/main.go differ; change both")
}

// firstGoBlock returns the body of the first fenced ```go block in markdown.
func firstGoBlock(markdown string) (string, bool) {
	_, rest, ok := strings.Cut(markdown, "\n```go\n")
	if !ok {
		return "", false
	}
	body, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		return "", false
	}
	return body + "\n", true
}

// TestQuickstartRuns runs main against a fresh, empty schema: it migrates
// it, runs the workflow and logs its result.
func TestQuickstartRuns(t *testing.T) {
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.EmptySchema(ctx, t)
	_, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)

	u, err := url.Parse(dbtest.URL(ctx, t))
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	t.Setenv("DATABASE_URL", u.String())

	var out bytes.Buffer
	log.SetOutput(&out)
	log.SetFlags(0)
	t.Cleanup(func() {
		log.SetOutput(os.Stderr)
		log.SetFlags(log.LstdFlags)
	})

	done := make(chan struct{})
	go func() {
		defer close(done)
		main() // log.Fatal ends the test binary with a failure
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the quickstart program did not finish within 2 minutes")
	}
	require.Contains(t, strings.Split(out.String(), "\n"), "Hello, Ada!", "the program did not log its greeting")
}
