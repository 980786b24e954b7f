package history

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeAttributes feeds arbitrary persisted bytes to the decoder: it must
// never panic, and whatever it accepts must re-encode and decode to the same
// attributes.
func FuzzDecodeAttributes(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	seeds := []Attributes{
		&WorkflowStartedAttributes{Kind: "order", Args: Payload(`{"id":"o-1"}`)},
		&WorkflowTaskStartedAttributes{Now: now},
		&ActivityScheduledAttributes{Kind: "charge", Args: Payload(`{}`), RetryPolicy: &RetryPolicy{InitialInterval: Duration(time.Second)}},
		&ActivityCompletedAttributes{ScheduledEventID: 3, Result: Payload{0xff}},
		&ActivityFailedAttributes{ScheduledEventID: 3, Failure: Failure{Message: "m", Cause: &Failure{Message: "c"}}},
		&ActivityTimedOutAttributes{ScheduledEventID: 3, TimeoutType: TimeoutStartToClose},
		&ActivityCanceledAttributes{ScheduledEventID: 3},
		&MarkerRecordedAttributes{Name: MarkerSideEffect, Data: Payload(`1`)},
		&WorkflowCompletedAttributes{Result: Payload(`null`)},
		&WorkflowFailedAttributes{Failure: Failure{Message: "m"}},
		&CancelRequestedAttributes{Reason: "r"},
		&ActivityCancelRequestedAttributes{ScheduledEventID: 2},
		&WorkflowCanceledAttributes{},
		&TimerStartedAttributes{Duration: Duration(time.Minute), FireAt: now},
		&TimerFiredAttributes{StartedEventID: 2},
		&TimerCanceledAttributes{StartedEventID: 2},
		&SignalReceivedAttributes{Kind: "approve", Args: Payload(`{}`)},
		&WorkflowContinuedAsNewAttributes{Kind: "order", Args: Payload(`{}`)},
	}
	for _, s := range seeds {
		ev, err := NewEvent(1, now, s)
		require.NoError(f, err)
		f.Add(string(ev.Type), []byte(ev.Attributes))
	}
	f.Add("ActivityCompleted", []byte(`{"scheduled_event_id":1,"result":{"$binary":"AA=="}}`))
	f.Add("ActivityScheduled", []byte(`{"kind":"k","retry_policy":{},"heartbeat_timeout":12}`))

	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		attrs, err := DecodeAttributes(Event{ID: 1, Type: EventType(typ), Attributes: data})
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidEvent)
			return
		}
		ev, err := NewEvent(1, now, attrs)
		require.NoError(t, err)
		again, err := DecodeAttributes(ev)
		require.NoError(t, err)
		require.Equal(t, normalize(t, attrs), normalize(t, again))
	})
}

// normalize re-encodes attributes so that JSON payloads compare by meaning
// (the encoder compacts them).
func normalize(t *testing.T, attrs Attributes) string {
	t.Helper()
	raw, err := json.Marshal(attrs)
	require.NoError(t, err)
	return string(raw)
}

// FuzzPayload checks that any bytes survive a round trip through JSON:
// exactly when they aren't JSON, semantically when they are.
func FuzzPayload(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"$binary":"AA=="}`, `"x"`, `[1, 2]`, "\xff\x00", ` 1 `, `{"$binary":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, err := json.Marshal(Payload(data))
		require.NoError(t, err)
		var back Payload
		require.NoError(t, json.Unmarshal(raw, &back))
		if json.Valid(data) {
			// Same meaning; the encoder may compact and escape HTML characters.
			require.Equal(t, decodeJSON(t, data), decodeJSON(t, back))
			return
		}
		require.Equal(t, data, []byte(back))
	})
}

func decodeJSON(t *testing.T, data []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	return v
}

// FuzzDuration checks that the duration decoder never panics and that what it
// accepts round-trips.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{`"1s"`, `"-1h2m"`, `12`, `"x"`, `null`, `1e3`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d Duration
		if err := json.Unmarshal(data, &d); err != nil {
			return
		}
		raw, err := json.Marshal(d)
		require.NoError(t, err)
		var back Duration
		require.NoError(t, json.Unmarshal(raw, &back))
		require.Equal(t, d, back)
	})
}

// FuzzDecodeCanonical: whatever decodeCanonical accepts, json.Unmarshal
// decodes to the same attributes.
func FuzzDecodeCanonical(f *testing.F) {
	for _, attrs := range canonicalSamples() {
		raw, err := json.Marshal(attrs)
		require.NoError(f, err)
		f.Add(string(attrs.EventType()), raw)
	}
	for typ, seeds := range map[EventType][]string{
		EventActivityCompleted: {
			`{"scheduled_event_id": 3,"result":1,"attempt":1}`,
			`{"scheduled_event_id":3,"result":1 ,"attempt":1}`,
			`{"scheduled_event_id":3,"result":1,"attempt":1,"attempt":2}`,
			`{"scheduled_event_id":3,"result":{"a":1,"attempt":2},"attempt":1}`,
			`{"scheduled_event_id":3,"result":{"a":1,"attempt":2}}`,
			`{"scheduled_event_id":3,"result":1,"foo":2,"attempt":1}`,
			`{"scheduled_event_id":1.5,"result":1,"attempt":1}`,
			`{"scheduled_event_id":3,"result":1,"attempt":1e2}`,
			`{"scheduled_event_id":99999999999999999999,"result":1,"attempt":1}`,
			`{"scheduled_event_id":-0,"result":null,"attempt":-1}`,
			`{"scheduled_event_id":3,"result":{"$binary":"!!"},"attempt":1}`,
		},
		EventActivityScheduled: {
			`{"kind":"k","args":[],"queue":"q","priority":1,"start_to_close_timeout":"1s","retry_policy":null}`,
			`{"kind":"k\u0041","args":{},"queue":"q","priority":1,"start_to_close_timeout":1000,"retry_policy":{"initial_interval":"1s","backoff_coefficient":1e0,"maximum_interval":"1s","maximum_attempts":0}}`,
			`{"kind":"k","args":{},"queue":"q","priority":1,"start_to_close_timeout":"1s","retry_policy":{"initial_interval":"1s","backoff_coefficient":1.5,"maximum_interval":"1s","maximum_attempts":0,"non_retryable_error_types":[]},"tags":["a","b\"c"]}`,
			`{"kind":"k","args":"s","queue":"q","priority":1,"start_to_close_timeout":"1s","heartbeat_timeout":"x","retry_policy":{"initial_interval":"1s","backoff_coefficient":"2","maximum_interval":"1s","maximum_attempts":0},"tags":["abc"]}`,
		},
		EventWorkflowStarted: {
			`{"kind":"k","args":null,"run_id":"r","generation":2}`,
			`{"kind":"\u00e9","args":{"$binary":"AA=="},"workflow_id":"w"}`,
			"{\"kind\":\"\xff\",\"args\":1}",
		},
	} {
		for _, s := range seeds {
			f.Add(string(typ), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		got, ok := decodeCanonical(EventType(typ), data)
		if !ok {
			return
		}
		want := reflect.New(attributeTypes[EventType(typ)]).Interface()
		require.NoError(t, json.Unmarshal(data, want), "%s", data)
		require.Equal(t, want, got, "%s", data)
	})
}

// TestDecodeCanonical: what json.Marshal writes of the attributes every
// run has is decoded without reflection, to the same attributes.
func TestDecodeCanonical(t *testing.T) {
	t.Parallel()
	for _, attrs := range canonicalSamples() {
		raw, err := json.Marshal(attrs)
		require.NoError(t, err)
		got, ok := decodeCanonical(attrs.EventType(), raw)
		require.True(t, ok, "%s", raw)
		want := reflect.New(attributeTypes[attrs.EventType()]).Interface()
		require.NoError(t, json.Unmarshal(raw, want))
		require.Equal(t, want, got, "%s", raw)
		decoded, err := DecodeAttributes(Event{ID: 7, Type: attrs.EventType(), Attributes: raw})
		require.NoError(t, err)
		require.Equal(t, want, decoded)
	}
	_, err := DecodeAttributes(Event{ID: 7, Type: EventActivityCompleted, Attributes: []byte(`{"scheduled_event_id":0,"result":1,"attempt":1}`)})
	require.ErrorIs(t, err, ErrInvalidEvent, "validated as json.Unmarshal's are")
}

func canonicalSamples() []Attributes {
	retry := RetryPolicy{InitialInterval: Duration(time.Second), BackoffCoefficient: 2, MaximumInterval: Duration(100 * time.Second), MaximumAttempts: 25}
	odd := RetryPolicy{InitialInterval: 1, BackoffCoefficient: 1.0000001e-3, MaximumInterval: Duration(-1 << 63), NonRetryableErrorTypes: []string{"A", "é"}}
	return []Attributes{
		&ActivityCompletedAttributes{ScheduledEventID: 3, Result: Payload(`7`), Attempt: 1},
		&ActivityCompletedAttributes{ScheduledEventID: 1 << 40, Result: Payload(`{"a":[1,2,{"attempt":3}],"b":"x,\"attempt\":4"}`), Attempt: 12},
		&ActivityCompletedAttributes{ScheduledEventID: 5, Result: nil, Attempt: 2},
		&ActivityCompletedAttributes{ScheduledEventID: 5, Result: Payload(`"<&>"`), Attempt: 1},
		&ActivityCompletedAttributes{ScheduledEventID: 5, Result: Payload{0xff, 0x00, 0x01}, Attempt: 1},     // binary
		&ActivityCompletedAttributes{ScheduledEventID: 5, Result: Payload(`{"$binary":"AAE="}`), Attempt: 1}, // JSON of the binary shape
		&ActivityCompletedAttributes{ScheduledEventID: 9, Result: Payload(`[ 1 , 2 ]`), Attempt: 0},
		&ActivityScheduledAttributes{
			Kind: "bench.step", Args: Payload(`{"value":1}`), Queue: "default", Priority: 1, StartToCloseTimeout: Duration(time.Minute),
			RetryPolicy: &retry,
		},
		&ActivityScheduledAttributes{
			Kind: "ünïcode", Args: Payload(`["a,\"]",{"b":[{}]}]`), Queue: "q", Priority: -4, StartToCloseTimeout: 0,
			ScheduleToCloseTimeout: Duration(time.Hour), HeartbeatTimeout: 1, RetryPolicy: &odd, Tags: []string{"t1", "t-2"},
		},
		&ActivityScheduledAttributes{Kind: "k", Args: Payload{0x01}, Queue: "q", RetryPolicy: &RetryPolicy{BackoffCoefficient: 1e300}, Tags: []string{"x"}},
		&WorkflowStartedAttributes{Kind: "bench.three_steps", Args: Payload(`{"input":1}`), WorkflowID: "wf-1", RunID: "0193b9f2-6f4e-7c1a-9b8e-2f0d1c2b3a4d", Generation: 1},
		&WorkflowStartedAttributes{Kind: "k", Args: nil},
		&WorkflowStartedAttributes{Kind: "k", Args: Payload(`"x"`), RunID: "r", Generation: -3},
	}
}

// FuzzRoundTrips: ActivityScheduled attributes that say they round-trip
// are what decoding their event gives.
func FuzzRoundTrips(f *testing.F) {
	f.Add("charge", "default", []byte(`{"n":1}`), "", "", uint8(0))
	f.Add("k", "q", []byte(`{"a": 1}`), "t1", "E", uint8(3))
	f.Add("k", "\xff", []byte(`null`), "", "", uint8(1))
	f.Add("k", "q", []byte(`"<>"`), "\xfe", "", uint8(2))
	f.Add("k", "q", []byte{0xff}, "", "", uint8(2))
	f.Add("k", "q", []byte(`{"$binary":"AA=="}`), "a", "b", uint8(3))
	f.Add("k", "q", []byte("\"\u2028\""), "", "", uint8(0))
	f.Add("", "q", []byte(`1`), "", "", uint8(0))
	f.Add("k", "q", []byte(`null`), "", "", uint8(0))
	f.Add("k", "q", []byte(`{}`), "", "", uint8(1))
	f.Fuzz(func(t *testing.T, kind, queue string, args []byte, tag, errType string, lists uint8) {
		attrs := &ActivityScheduledAttributes{
			Kind: kind, Args: args, Queue: queue, Priority: 1, StartToCloseTimeout: Duration(time.Minute),
			RetryPolicy: &RetryPolicy{InitialInterval: Duration(time.Second), BackoffCoefficient: 2, MaximumAttempts: 3},
		}
		switch lists % 4 {
		case 1:
			attrs.Tags, attrs.RetryPolicy.NonRetryableErrorTypes = []string{}, []string{}
		case 2:
			attrs.Tags = []string{tag}
		case 3:
			attrs.Tags, attrs.RetryPolicy.NonRetryableErrorTypes = []string{tag, tag}, []string{errType}
		}
		ev, err := NewEvent(3, time.Time{}, attrs)
		if !attrs.RoundTrips() || err != nil {
			return
		}
		decoded, err := Decode[*ActivityScheduledAttributes](ev)
		require.NoError(t, err)
		require.Equal(t, attrs, decoded, "%s", ev.Attributes)
	})
}

// FuzzNewEventScheduled: the ActivityScheduled attributes NewEvent encodes
// without reflection are the bytes json.Marshal writes.
func FuzzNewEventScheduled(f *testing.F) {
	f.Add("charge", "weir", []byte(`{"n":1}`), "", "", 1, int64(time.Minute), int64(0), 1.5, uint8(0))
	f.Add("k", "q", []byte(`{"a": 1}`), "t1", "E", 4, int64(-1), int64(time.Hour), 2.0, uint8(3))
	f.Add("k<", "q", []byte(`"<>"`), "t&", "", 2, int64(0), int64(1), 1e21, uint8(2))
	f.Add("k", "\xff", []byte(`{"$binary":"AA=="}`), "\u2028", "\"", 0, int64(7), int64(0), 1e-7, uint8(1))
	f.Add("k", "q", []byte(nil), "", "", -3, int64(0), int64(0), 0.0, uint8(4))
	f.Fuzz(func(t *testing.T, kind, queue string, args []byte, tag, errType string, priority int, d1, d2 int64, coef float64, lists uint8) {
		attrs := &ActivityScheduledAttributes{
			Kind: kind, Args: args, Queue: queue, Priority: priority, StartToCloseTimeout: Duration(d1),
			ScheduleToCloseTimeout: Duration(d2), HeartbeatTimeout: Duration(d1 ^ d2),
			RetryPolicy: &RetryPolicy{InitialInterval: Duration(d2), BackoffCoefficient: coef, MaximumInterval: Duration(d1), MaximumAttempts: priority * 7},
		}
		switch lists % 5 {
		case 1:
			attrs.Tags, attrs.RetryPolicy.NonRetryableErrorTypes = []string{}, []string{}
		case 2:
			attrs.Tags = []string{tag}
		case 3:
			attrs.Tags, attrs.RetryPolicy.NonRetryableErrorTypes = []string{tag, errType}, []string{errType, tag}
		case 4:
			attrs.RetryPolicy = nil
		}
		want, wantErr := json.Marshal(attrs)
		ev, err := NewEvent(3, time.Time{}, attrs)
		if wantErr != nil {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		require.Equal(t, string(want), string(ev.Attributes))
		require.Equal(t, EventActivityScheduled, ev.Type)
	})
}

// TestNewEventScheduledEveryField: with every field of ActivityScheduled
// attributes and their retry policy set, NewEvent writes the bytes
// json.Marshal writes without falling back to it, so a field added to
// either struct fails here until appendCanonical writes it too.
func TestNewEventScheduledEveryField(t *testing.T) {
	t.Parallel()

	attrs := &ActivityScheduledAttributes{RetryPolicy: &RetryPolicy{}}
	fill(t, reflect.ValueOf(attrs).Elem())
	fill(t, reflect.ValueOf(attrs.RetryPolicy).Elem())
	want, err := json.Marshal(attrs)
	require.NoError(t, err)
	raw, ok := attrs.appendCanonical(nil)
	require.True(t, ok, "every field set with plain values is encoded without reflection")
	require.Equal(t, string(want), string(raw))
}

// fill sets every field of the struct v to a plain value that is not its
// zero, and fails on a field of a kind it does not know.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch {
		case f.Type() == reflect.TypeFor[Payload]():
			f.SetBytes([]byte(`{"n":1}`))
		case f.Kind() == reflect.String:
			f.SetString(name)
		case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
			f.SetInt(int64(1500 + i))
		case f.Kind() == reflect.Float64:
			f.SetFloat(1.5)
		case f.Type() == reflect.TypeFor[[]string]():
			f.Set(reflect.ValueOf([]string{name, "b"}))
		case f.Type() == reflect.TypeFor[*RetryPolicy]() && !f.IsNil():
		default:
			t.Fatalf("field %s (%s): teach appendCanonical and this test its kind", name, f.Type())
		}
	}
}
