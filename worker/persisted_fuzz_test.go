package worker

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/store"
)

// FuzzActivityMeta decodes River job metadata as the activity worker does for
// every job it fetches: any bytes in river_job.metadata (written by weir, by
// River, by hand in River UI) must give either nil (a plain River job) or an
// activity identity with a scheduled event, and never panic.
func FuzzActivityMeta(f *testing.F) {
	goodMeta := &activityMeta{
		Namespace: "billing", RunID: uuid.New(), ScheduledEventID: 5, RetryPolicy: &history.RetryPolicy{MaximumAttempts: 3},
	}
	good, err := encodeActivityMeta(goodMeta)
	require.NoError(f, err)
	require.Equal(f, goodMeta, activityMetaOf(good))
	withRivers := append([]byte(`{"snoozes":1,"cancel_attempted_at":"2026-11-30T00:00:00Z",`), good[1:]...)
	require.Equal(f, goodMeta, activityMetaOf(withRivers), "River's own keys beside weir's")
	for _, seed := range [][]byte{
		good, withRivers, nil, []byte(`{"weir":{"event":3}}`), []byte(`{"weir":{"event":3,"retry":7}}`), []byte(`{"weir":{"meta":"{\"event\":3}"}}`),
		[]byte(`{}`), []byte(`null`), []byte(`[]`), []byte(`{"weir":null}`), []byte(`{"weir":{}}`),
		[]byte(`{"weir":{"event":0}}`), []byte(`{"weir":{"event":"7"}}`),
		[]byte(`{"weir":{"event":7,"run_id":"not-a-uuid"}}`), []byte(`{"weir":{"event":-1}}`),
		[]byte(`{"cancel_attempted_at":"2026-11-30T00:00:00Z","weir":{"event":3}}`),
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

// TestActivityMetaLeavesDefaultsOut: an activity's metadata is one JSON
// object holding its run, its event and what differs from the defaults
// (written with the job and again at its completion, and indexed); the
// defaults read back.
func TestActivityMetaLeavesDefaultsOut(t *testing.T) {
	runID := uuid.New()
	policy := retryPolicyDefault
	meta := &activityMeta{
		Namespace: client.NamespaceDefault, RetryPolicy: &policy, RunID: runID, ScheduledEventID: 5,
		StartToCloseTimeout: history.Duration(time.Minute), Generation: 2, WorkflowID: "order-1", WorkflowKind: "order",
	}
	encoded, err := encodeActivityMeta(meta)
	require.NoError(t, err)
	require.JSONEq(t, `{"weir":{"event":5,"run_id":"`+runID.String()+`","timeout":"1m0s"}}`, string(encoded))
	meta.Generation, meta.WorkflowID, meta.WorkflowKind = 0, "", "" // the run's row has them
	require.Equal(t, meta, activityMetaOf(encoded))
}

// FuzzEncodeActivityMeta: encodeActivityMeta writes the bytes json.Marshal
// writes of the metadata without its defaults.
func FuzzEncodeActivityMeta(f *testing.F) {
	d := retryPolicyDefault
	initial, backoff, maxInterval, attempts := int64(d.InitialInterval), d.BackoffCoefficient, int64(d.MaximumInterval), d.MaximumAttempts
	f.Add(int64(0), "", []byte{1, 2, 3}, int64(5), int64(time.Minute), initial, backoff, maxInterval, attempts, uint8(0))
	f.Add(int64(time.Second), "billing", []byte{0xff}, int64(-7), int64(0), initial, backoff, maxInterval, attempts, uint8(1))
	f.Add(int64(-1), client.NamespaceDefault, []byte(nil), int64(1)<<62, int64(1), initial, backoff, maxInterval, attempts, uint8(2))
	f.Add(int64(0), "a<b", []byte{}, int64(3), int64(0), initial, backoff, maxInterval, attempts, uint8(1))
	f.Add(int64(0), "ns", []byte{}, int64(3), int64(0), initial, backoff, maxInterval, attempts+1, uint8(1))
	f.Add(int64(0), "é\"", []byte{}, int64(3), int64(0), initial, math.NaN(), maxInterval, attempts, uint8(1))
	f.Fuzz(func(t *testing.T, heartbeat int64, namespace string, runID []byte, event, timeout,
		initial int64, backoff float64, maxInterval int64, attempts int, policy uint8,
	) {
		meta := &activityMeta{
			HeartbeatTimeout: history.Duration(heartbeat), Namespace: namespace, ScheduledEventID: event,
			StartToCloseTimeout: history.Duration(timeout), WorkflowID: "not written",
		}
		copy(meta.RunID[:], runID)
		if policy%3 > 0 {
			meta.RetryPolicy = &history.RetryPolicy{
				InitialInterval: history.Duration(initial), BackoffCoefficient: backoff, MaximumInterval: history.Duration(maxInterval),
				MaximumAttempts: attempts,
			}
			if policy%3 == 2 {
				meta.RetryPolicy.NonRetryableErrorTypes = []string{}
			}
		}
		entry := *meta
		if reflect.DeepEqual(entry.RetryPolicy, &retryPolicyDefault) {
			entry.RetryPolicy = nil
		}
		if entry.Namespace == client.NamespaceDefault {
			entry.Namespace = ""
		}
		want, wantErr := json.Marshal(activityMetadata{Weir: &entry})
		got, err := encodeActivityMeta(meta)
		require.Equal(t, wantErr == nil, err == nil, "%v, %v", wantErr, err)
		require.Equal(t, string(want), string(got))
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
