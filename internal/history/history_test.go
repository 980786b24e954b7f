package history

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAttributesRoundTrip(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	all := []Attributes{
		&WorkflowStartedAttributes{Kind: "order", Args: Payload(`{"id":"o-1"}`), WorkflowID: "w", RunID: "r", Generation: 2},
		&WorkflowTaskStartedAttributes{Now: now, Attempt: 3},
		&ActivityScheduledAttributes{
			Kind: "charge", Args: Payload(`{"n":1}`), Queue: "q", Priority: 2,
			StartToCloseTimeout: Duration(time.Minute), ScheduleToCloseTimeout: Duration(time.Hour), HeartbeatTimeout: Duration(time.Second),
			RetryPolicy: &RetryPolicy{
				InitialInterval: Duration(time.Second), BackoffCoefficient: 1.5, MaximumInterval: Duration(time.Minute),
				MaximumAttempts: 5, NonRetryableErrorTypes: []string{"Fatal"},
			},
		},
		&ActivityCompletedAttributes{ScheduledEventID: 3, Result: Payload(`42`), Attempt: 1},
		&ActivityFailedAttributes{ScheduledEventID: 3, Attempt: 2, Failure: Failure{
			Message: "m", Type: "T", Stack: "s", NonRetryable: true, Details: Payload(`[1]`),
			Cause: &Failure{Message: "inner"},
		}},
		&ActivityTimedOutAttributes{ScheduledEventID: 3, TimeoutType: TimeoutHeartbeat, LastFailure: &Failure{Message: "x"}, Attempt: 4},
		&ActivityCanceledAttributes{ScheduledEventID: 3, Details: Payload(`"why"`), Attempt: 1},
		&MarkerRecordedAttributes{Name: MarkerSideEffect, Data: Payload{0xff, 0x00, 0x01}},
		&WorkflowCompletedAttributes{Result: Payload(`{"total":6}`)},
		&WorkflowFailedAttributes{Failure: Failure{Message: "no", Type: "*errors.errorString"}},
		&CancelRequestedAttributes{Reason: "customer changed their mind"},
		&ActivityCancelRequestedAttributes{ScheduledEventID: 3},
		&WorkflowCanceledAttributes{Failure: Failure{Message: "workflow: canceled", Type: "Canceled"}},
		&TimerStartedAttributes{Duration: Duration(time.Hour), FireAt: now.Add(time.Hour)},
		&TimerFiredAttributes{StartedEventID: 5},
		&TimerCanceledAttributes{StartedEventID: 5},
		&SignalReceivedAttributes{Kind: "approve", Args: Payload(`{"by":"ann"}`)},
		&WorkflowContinuedAsNewAttributes{Kind: "order", Args: Payload(`{"id":"o-2"}`)},
		&UpdateAcceptedAttributes{UpdateID: "u-1", Kind: "add_item", Args: Payload(`{"sku":"A"}`)},
		&UpdateCompletedAttributes{UpdateID: "u-1", Result: Payload(`3`)},
		&ChildWorkflowScheduledAttributes{Kind: "ship", Args: Payload(`{}`), WorkflowID: "ship-1", ParentClosePolicy: ParentCloseAbandon},
		&ChildWorkflowCompletedAttributes{ScheduledEventID: 4, Result: Payload(`1`)},
		&ChildWorkflowFailedAttributes{ScheduledEventID: 4, State: "terminated", Failure: Failure{Message: "stop"}},
	}
	seen := map[EventType]bool{}
	for _, attrs := range all {
		ev, err := NewEvent(7, now, attrs)
		require.NoError(t, err)
		require.Equal(t, attrs.EventType(), ev.Type)
		require.True(t, ev.Type.IsInput() || ev.Type.IsCommand() || ev.Type == EventWorkflowTaskStarted)
		seen[ev.Type] = true

		// Through the JSON of a whole event, as golden files store it.
		raw, err := json.Marshal(ev)
		require.NoError(t, err)
		var back Event
		require.NoError(t, json.Unmarshal(raw, &back))

		decoded, err := DecodeAttributes(back)
		require.NoError(t, err)
		require.Equal(t, attrs, decoded)
	}
	require.Len(t, seen, len(EventTypes()))
}

func TestDecode(t *testing.T) {
	t.Parallel()

	ev, err := NewEvent(3, time.Time{}, &ActivityCompletedAttributes{ScheduledEventID: 2, Result: Payload(`1`)})
	require.NoError(t, err)

	t.Run("RightType", func(t *testing.T) {
		t.Parallel()
		attrs, err := Decode[*ActivityCompletedAttributes](ev)
		require.NoError(t, err)
		require.Equal(t, int64(2), attrs.ScheduledEventID)
	})
	t.Run("WrongType", func(t *testing.T) {
		t.Parallel()
		_, err := Decode[*ActivityFailedAttributes](ev)
		require.ErrorIs(t, err, ErrInvalidEvent)
	})
}

func TestDecodeAttributesRejects(t *testing.T) {
	t.Parallel()

	tests := map[string]Event{
		"EmptyAttributes":          {Type: EventActivityCompleted},
		"MissingKind":              {Type: EventActivityScheduled, Attributes: []byte(`{"retry_policy":{}}`)},
		"MissingCancelScheduledID": {Type: EventActivityCancelRequested, Attributes: []byte(`{}`)},
		"MissingFireAt":            {Type: EventTimerStarted, Attributes: []byte(`{"duration":"1s"}`)},
		"MissingStartedID":         {Type: EventTimerFired, Attributes: []byte(`{}`)},
		"NonPositiveTimer":         {Type: EventTimerStarted, Attributes: []byte(`{"duration":"0s","fire_at":"2026-01-01T00:00:00Z"}`)},
		"MissingSignalKind":        {Type: EventSignalReceived, Attributes: []byte(`{"args":1}`)},
		"MissingMarkerName":        {Type: EventMarkerRecorded, Attributes: []byte(`{}`)},
		"MissingNow":               {Type: EventWorkflowTaskStarted, Attributes: []byte(`{}`)},
		"MissingRetryPolicy":       {Type: EventActivityScheduled, Attributes: []byte(`{"kind":"k"}`)},
		"MissingScheduledID":       {Type: EventActivityFailed, Attributes: []byte(`{"failure":{}}`)},
		"MissingWorkflowKind":      {Type: EventWorkflowStarted, Attributes: []byte(`{"args":{}}`)},
		"NegativeScheduledID":      {Type: EventActivityCanceled, Attributes: []byte(`{"scheduled_event_id":-1}`)},
		"NotJSON":                  {Type: EventActivityTimedOut, Attributes: []byte(`{`)},
		"UnknownType":              {Type: "Teleported", Attributes: []byte(`{}`)},
		"WrongDuration":            {Type: EventActivityScheduled, Attributes: []byte(`{"kind":"k","retry_policy":{},"start_to_close_timeout":"soon"}`)},
		"WrongFieldType":           {Type: EventActivityCompleted, Attributes: []byte(`{"scheduled_event_id":"3"}`)},
		"WrongBinaryPayloadBase":   {Type: EventActivityCompleted, Attributes: []byte(`{"scheduled_event_id":3,"result":{"$binary":"!!"}}`)},
	}
	for name, ev := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := DecodeAttributes(ev)
			require.ErrorIs(t, err, ErrInvalidEvent)
			var invalid *InvalidEventError
			require.ErrorAs(t, err, &invalid)
			require.NotEmpty(t, invalid.Error())
		})
	}
}

func TestEventTypeClasses(t *testing.T) {
	t.Parallel()

	require.True(t, EventWorkflowStarted.IsInput())
	require.False(t, EventWorkflowStarted.IsCommand())
	require.True(t, EventActivityScheduled.IsCommand())
	require.False(t, EventWorkflowTaskStarted.IsInput())
	require.False(t, EventWorkflowTaskStarted.IsCommand())
	require.True(t, EventWorkflowFailed.IsTerminal())
	require.True(t, EventWorkflowContinuedAsNew.IsTerminal())
	require.True(t, EventWorkflowContinuedAsNew.IsCommand())
	require.False(t, EventMarkerRecorded.IsTerminal())
	require.False(t, EventType("Nope").IsInput() || EventType("Nope").IsCommand())
}

func TestPayload(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		payload Payload
		encoded string
		back    Payload // when not the same bytes
	}{
		{name: "Binary", payload: Payload{0xff, 0xfe}, encoded: `{"$binary":"//4="}`},
		{name: "BinaryLookalike", payload: Payload(`{"$binary":"AAAA"}`), encoded: `{"$binary":"eyIkYmluYXJ5IjoiQUFBQSJ9"}`},
		{name: "EscapedBinaryLookalike", payload: Payload(`{"\u0024binary":"AAAA"}`), encoded: `{"$binary":"eyJcdTAwMjRiaW5hcnkiOiJBQUFBIn0="}`},
		{name: "Compacted", payload: Payload("{ \"a\" : 1 }"), encoded: `{"a":1}`, back: Payload(`{"a":1}`)},
		{name: "Empty", payload: Payload{}, encoded: `{"$binary":""}`},
		{name: "JSONObject", payload: Payload(`{"a":[1,2]}`), encoded: `{"a":[1,2]}`},
		{name: "JSONString", payload: Payload(`"hi"`), encoded: `"hi"`},
		{name: "Nil", payload: nil, encoded: `null`},
		{name: "ObjectWithBinaryAndMore", payload: Payload(`{"$binary":"AAAA","x":1}`), encoded: `{"$binary":"AAAA","x":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			raw, err := json.Marshal(tt.payload)
			require.NoError(t, err)
			require.Equal(t, tt.encoded, string(raw))
			var back Payload
			require.NoError(t, json.Unmarshal(raw, &back))
			want := tt.payload
			if tt.back != nil {
				want = tt.back
			}
			require.Equal(t, want, back)
		})
	}
}

func TestDuration(t *testing.T) {
	t.Parallel()

	raw, err := json.Marshal(Duration(90 * time.Second))
	require.NoError(t, err)
	require.Equal(t, `"1m30s"`, string(raw))

	var d Duration
	require.NoError(t, json.Unmarshal([]byte(`"2h"`), &d))
	require.Equal(t, Duration(2*time.Hour), d)
	require.NoError(t, json.Unmarshal([]byte(`1000`), &d))
	require.Equal(t, Duration(time.Microsecond), d)
	require.Error(t, json.Unmarshal([]byte(`"later"`), &d))
	require.Error(t, json.Unmarshal([]byte(`true`), &d))
}

// TestNewBoundaryIsNewEvent: NewBoundary encodes the same bytes, and fails
// with the same error, as NewEvent of the WorkflowTaskStartedAttributes.
func TestNewBoundaryIsNewEvent(t *testing.T) {
	t.Parallel()
	east := time.FixedZone("east", 5*3600+30*60)
	times := []time.Time{
		time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 30, 12, 0, 0, 123456000, time.UTC),
		time.Date(2026, 11, 30, 12, 0, 0, 1, east),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.Local),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), // out of RFC 3339's range: an error
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),    // likewise
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 25*3600)),
		time.UnixMicro(1_780_000_000_123_456),
		{},
	}
	for _, now := range times {
		for _, attempt := range []int{0, 1, 7, -3, 1 << 40} {
			want, wantErr := NewEvent(42, now, &WorkflowTaskStartedAttributes{Now: now, Attempt: attempt})
			got, err := NewBoundary(42, now, attempt)
			if wantErr != nil {
				require.EqualError(t, err, wantErr.Error(), "%v attempt %d", now, attempt)
				continue
			}
			require.NoError(t, err, "%v attempt %d", now, attempt)
			require.Equal(t, string(want.Attributes), string(got.Attributes), "%v attempt %d", now, attempt)
			require.Equal(t, want, got)
		}
	}
}
