package engine

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzReadRef: whatever readRef reads is what json.Unmarshal reads; what
// it declines, json.Unmarshal decides.
func FuzzReadRef(f *testing.F) {
	for _, s := range []string{
		`{"scheduled_event_id":3,"result":-68,"attempt":1}`,
		`{"result": {"scheduled_event_id": 9, "x": [1, "}", {"y": "\"]"}]}, "attempt": 1, "scheduled_event_id": 3}`,
		`{"started_event_id":12}`, `{"scheduled_event_id":5,"started_event_id":7}`,
		`{"scheduled_event_id":1,"scheduled_event_id":2}`, `{"Scheduled_Event_ID":7}`, `{"scheduled_event_id":null}`,
		`{"scheduled_event_id":1.5}`, `{"scheduled_event_id":1e3}`, `{"scheduled_event_id":"5"}`,
		`{"sch\u0065duled_event_id":4}`, `{"scheduled_event_id":12345678901234567890}`, `{}`, `[]`, `null`, `{"a":1,}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ref, ok := readRef(data)
		if !ok {
			return
		}
		var want outcomeRef
		require.NoError(t, json.Unmarshal(data, &want))
		require.Equal(t, want, ref)
	})
}

func TestReadRef(t *testing.T) {
	for _, c := range []struct {
		data string
		want outcomeRef
		ok   bool
	}{
		{`{"scheduled_event_id":3,"result":-68,"attempt":1}`, outcomeRef{ScheduledEventID: 3}, true},
		// As Postgres's jsonb prints it: keys by length, spaces.
		{`{"result": {"scheduled_event_id": 9, "s": "}\"]"}, "attempt": 1, "scheduled_event_id": 3}`, outcomeRef{ScheduledEventID: 3}, true},
		{`{"started_event_id": 12}`, outcomeRef{StartedEventID: 12}, true},
		{`{"scheduled_event_id":1,"scheduled_event_id":-2}`, outcomeRef{ScheduledEventID: -2}, true},
		{`{"Scheduled_Event_ID":7}`, outcomeRef{}, false},
		{`{"scheduled_event_id":null}`, outcomeRef{}, false},
		{`{"scheduled_event_id":1.5}`, outcomeRef{}, false},
		{`{"sch\u0065duled_event_id":4}`, outcomeRef{}, false},
		{`{"scheduled_event_id":3`, outcomeRef{}, false},
		{`[3]`, outcomeRef{}, false},
	} {
		ref, ok := readRef([]byte(c.data))
		require.Equal(t, c.ok, ok, c.data)
		if ok {
			require.Equal(t, c.want, ref, c.data)
		}
	}
}
