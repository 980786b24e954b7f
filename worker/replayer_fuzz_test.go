package worker_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// FuzzReplayHistory: a history file is external bytes (an export, a file
// someone edited). Replaying any of them returns a result or an error,
// never panics or hangs, and a result counts the events it replayed.
func FuzzReplayHistory(f *testing.F) {
	started := `{"id":1,"type":"WorkflowStarted","attributes":{"kind":"order","args":{"id":"x","cents":[1]},"workflow_id":"w","run_id":"r","generation":1},"time":"2026-01-01T00:00:00Z"}`
	task := `{"id":2,"type":"WorkflowTaskStarted","attributes":{"now":"2026-01-01T00:00:00Z","attempt":1},"time":"2026-01-01T00:00:00Z"}`
	for _, seed := range []string{
		`{"events":[` + started + `]}`,
		`[` + started + `,` + task + `]`,
		`{"events":[` + started + `,` + task + `,{"id":3,"type":"ActivityScheduled","attributes":{"kind":"charge","args":{"cents":1}}}]}`,
		`{"events":[]}`, `[]`, `{}`, `null`, `[null]`, `{"events":[{"id":1}]}`,
	} {
		f.Add([]byte(seed))
	}
	r, err := worker.NewReplayer(nil)
	if err != nil {
		f.Fatal(err)
	}
	worker.AddReplayerWorkflow(r, &SequentialWorkflow{})
	f.Fuzz(func(t *testing.T, data []byte) {
		result, err := r.ReplayHistory(t.Context(), bytes.NewReader(data))
		if err != nil {
			if result != nil {
				t.Fatalf("a result with an error: %+v, %v", result, err)
			}
			var nde *workflow.NonDeterminismError
			if errors.As(err, &nde) && nde.EventID < 1 {
				t.Fatalf("non-determinism at event %d", nde.EventID)
			}
			return
		}
		if result.Events < 1 || result.Kind != "order" {
			t.Fatalf("replayed %+v", result)
		}
	})
}
