package history

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/attributes.json")

// TestAttributesJSON pins the persisted JSON of every event type: changing a
// field's name or encoding breaks every stored history, so it must be a
// deliberate act (-update) reviewed as a data migration.
func TestAttributesJSON(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	retry := &RetryPolicy{
		InitialInterval: Duration(time.Second), BackoffCoefficient: 2, MaximumInterval: Duration(100 * time.Second),
		MaximumAttempts: 25, NonRetryableErrorTypes: []string{"CardDeclined"},
	}
	samples := []Attributes{
		&WorkflowStartedAttributes{Kind: "order", Args: Payload(`{"id":"o-1"}`), WorkflowID: "order-o-1", RunID: "0193e9b0-0000-7000-8000-000000000001", Generation: 1},
		&WorkflowTaskStartedAttributes{Now: now, Attempt: 1},
		&ActivityScheduledAttributes{
			Kind: "charge", Args: Payload(`{"order":"o-1"}`), Queue: "default", Priority: 1,
			StartToCloseTimeout: Duration(time.Minute), ScheduleToCloseTimeout: Duration(time.Hour), HeartbeatTimeout: Duration(10 * time.Second),
			RetryPolicy: retry,
		},
		&ActivityCompletedAttributes{ScheduledEventID: 3, Result: Payload(`{"id":"ch_1"}`), Attempt: 1},
		&ActivityFailedAttributes{ScheduledEventID: 3, Attempt: 25, Failure: Failure{
			Message: "card declined", Type: "CardDeclined", NonRetryable: true, Details: Payload(`{"code":51}`),
			Cause: &Failure{Message: "issuer said no", Type: "*errors.errorString"},
		}},
		&ActivityTimedOutAttributes{ScheduledEventID: 3, TimeoutType: TimeoutStartToClose, LastFailure: &Failure{Message: "slow"}, Attempt: 2},
		&ActivityCanceledAttributes{ScheduledEventID: 3, Attempt: 1},
		&ActivityCancelRequestedAttributes{ScheduledEventID: 3},
		&TimerStartedAttributes{Duration: Duration(10 * time.Minute), FireAt: now.Add(10 * time.Minute)},
		&TimerFiredAttributes{StartedEventID: 5},
		&TimerCanceledAttributes{StartedEventID: 5},
		&SignalReceivedAttributes{Kind: "approve", Args: Payload(`{"by":"ann"}`)},
		&CancelRequestedAttributes{Reason: "customer asked"},
		&MarkerRecordedAttributes{Name: MarkerSideEffect, Data: Payload(`42`)},
		&MarkerRecordedAttributes{Name: MarkerVersion, Data: Payload(`{"change_id":"split","version":1}`)},
		&MarkerRecordedAttributes{Name: MarkerSideEffect, Data: Payload{0x00, 0xff}},
		&WorkflowCompletedAttributes{Result: Payload(`{"charge_id":"ch_1"}`)},
		&WorkflowFailedAttributes{Failure: Failure{Message: "charging: card declined", Type: "*fmt.wrapError"}},
		&WorkflowCanceledAttributes{Failure: Failure{Message: "workflow: canceled", Type: "Canceled"}},
		&WorkflowContinuedAsNewAttributes{Kind: "order", Args: Payload(`{"id":"o-1","round":2}`)},
		&UpdateAcceptedAttributes{UpdateID: "req-7", Kind: "add_item", Args: Payload(`{"sku":"A-1","quantity":2}`)},
		&UpdateCompletedAttributes{UpdateID: "req-7", Result: Payload(`{"items":3}`)},
		&UpdateCompletedAttributes{UpdateID: "req-8", Failure: &Failure{Message: "out of stock", Type: "OutOfStock"}},
		&ChildWorkflowScheduledAttributes{Kind: "ship", Args: Payload(`{"order":"o-1"}`), WorkflowID: "ship-o-1", ParentClosePolicy: ParentCloseTerminate},
		&ChildWorkflowCompletedAttributes{ScheduledEventID: 7, RunID: "0193e9b0-0000-7000-8000-000000000002", Result: Payload(`{"tracking":"T1"}`)},
		&ChildWorkflowFailedAttributes{ScheduledEventID: 7, State: "failed", Failure: Failure{Message: "no courier", Type: "NoCourier"}},
	}
	type sample struct {
		Type       EventType       `json:"type"`
		Attributes json.RawMessage `json:"attributes"`
	}
	var got []sample
	covered := map[EventType]bool{}
	for _, attrs := range samples {
		covered[attrs.EventType()] = true
		ev, err := NewEvent(1, now, attrs)
		require.NoError(t, err)
		got = append(got, sample{Type: ev.Type, Attributes: ev.Attributes})
	}
	for _, typ := range EventTypes() {
		require.True(t, covered[typ], "no sample of %s", typ)
		require.True(t, typ.IsInput() || typ.IsCommand() || typ == EventWorkflowTaskStarted)
		require.Contains(t, attributeTypes, typ)
	}
	require.Len(t, covered, len(EventTypes()))

	raw, err := json.MarshalIndent(got, "", "  ")
	require.NoError(t, err)
	raw = append(raw, '\n')

	path := filepath.Join("testdata", "attributes.json")
	if *update {
		require.NoError(t, os.WriteFile(path, raw, 0o600))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update to create it")
	require.Equal(t, string(want), string(raw))
}
