package worker

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/store"
)

// FuzzActivityMeta decodes River job metadata as the activity worker does for
// every job it fetches: any bytes in river_job.metadata (written by weir, by
// River, by hand in River UI) must give either nil (a plain River job) or an
// activity identity with a scheduled event, and never panic.
func FuzzActivityMeta(f *testing.F) {
	goodMeta := &activityMeta{
		Namespace: "default", RunID: uuid.New(), ScheduledEventID: 5, WorkflowID: "order-1", WorkflowKind: "order",
		RetryPolicy: &history.RetryPolicy{MaximumAttempts: 3},
	}
	earlier, err := json.Marshal(map[string]any{metadataKey: goodMeta}) // the form before the run_id + meta entry
	require.NoError(f, err)
	good, err := encodeActivityMeta(goodMeta)
	require.NoError(f, err)
	require.Equal(f, goodMeta, activityMetaOf(earlier), "the earlier form still reads")
	require.Equal(f, goodMeta, activityMetaOf(good))
	for _, seed := range [][]byte{
		good, earlier, nil, []byte(`{"weir":{"meta":"{}"}}`), []byte(`{"weir":{"meta":7}}`), []byte(`{"weir":{"meta":"{\"scheduled_event_id\":3}"}}`), []byte(`{}`), []byte(`null`), []byte(`[]`), []byte(`{"weir":null}`), []byte(`{"weir":{}}`),
		[]byte(`{"weir":{"scheduled_event_id":0}}`), []byte(`{"weir":{"scheduled_event_id":"7"}}`),
		[]byte(`{"weir":{"scheduled_event_id":7,"run_id":"not-a-uuid"}}`), []byte(`{"weir":{"scheduled_event_id":-1}}`),
		[]byte(`{"cancel_attempted_at":"2026-11-30T00:00:00Z","weir":{"scheduled_event_id":3}}`),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, metadata []byte) {
		meta := activityMetaOf(metadata)
		if meta == nil {
			return
		}
		require.NotZero(t, meta.ScheduledEventID)
		again, err := encodeActivityMeta(meta)
		require.NoError(t, err)
		require.Equal(t, meta, activityMetaOf(again), "metadata survives a round trip")
	})
}

// FuzzOutcomeOfEndedJob turns what river_job holds about an activity job that
// ended without writing an outcome (its state, attempt and recorded errors,
// as JSON written by River or by any tool) into the history event the
// sweeper delivers. Whatever the bytes, the event's attributes must be valid
// for history (they are decoded again on every replay).
func FuzzOutcomeOfEndedJob(f *testing.F) {
	for _, state := range []string{"", "completed", "cancelled", "discarded", "running"} {
		f.Add(state, 1, []byte(`{"at":"2026-11-30T00:00:00Z","attempt":1,"error":"boom","trace":"stack"}`), false)
		f.Add(state, 0, []byte(`{}`), true)
		f.Add(state, 25, []byte(`not json`), false)
	}
	f.Fuzz(func(t *testing.T, state string, attempt int, rawErr []byte, cancelRequested bool) {
		a := &store.EndedActivity{
			ActivityRef: store.ActivityRef{JobID: 42, RunID: uuid.New(), ScheduledEventID: 3}, Attempt: attempt, CancelRequested: cancelRequested,
			Errors: [][]byte{rawErr},
		}
		if state != "" {
			a.State = &state
		}
		eventType, data, err := outcomeOfEndedJob(a)
		require.NoError(t, err)
		attrs, err := history.DecodeAttributes(history.Event{ID: 9, Type: eventType, Attributes: data})
		require.NoError(t, err, "the sweeper's %s must decode: %s", eventType, data)
		require.Equal(t, eventType, attrs.EventType())
	})
}
