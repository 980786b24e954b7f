package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("OTLP", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		var (
			mu     sync.Mutex
			bodies = map[string]int{}
		)
		collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			bodies[r.URL.Path] += len(body)
			mu.Unlock()
			w.Header().Set("Content-Type", "application/x-protobuf")
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(collector.Close)

		var out bytes.Buffer
		require.NoError(t, run(ctx, &config{
			DatabaseURL: dbtest.URL(ctx, t), OTLPEndpoint: collector.URL, Out: &out, Schema: dbtest.TestSchema(ctx, t),
		}))
		require.Contains(t, out.String(), "charged 1299 cents on attempt 2")
		require.NotContains(t, out.String(), "StartWorkflow:order", "nothing exported to stdout")
		mu.Lock()
		defer mu.Unlock()
		require.Positive(t, bodies["/v1/traces"], "spans were sent")
		require.Positive(t, bodies["/v1/metrics"], "metrics were sent")
	})

	t.Run("Stdout", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		var out bytes.Buffer
		require.NoError(t, run(ctx, &config{DatabaseURL: dbtest.URL(ctx, t), Out: &out, Schema: dbtest.TestSchema(ctx, t)}))
		text := out.String()
		require.Contains(t, text, "charged 1299 cents on attempt 2")
		for _, want := range []string{`"Name":"StartWorkflow:order"`, `"Name":"WorkflowTask:order"`, `"Name":"Activity:charge"`, "weir.activity.attempts", "weir.workflow.runs"} {
			require.Contains(t, text, want)
		}
		require.Equal(t, 2, strings.Count(text, `"Name":"Activity:charge"`), "the failed attempt and its retry")
	})
}
