package engine

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
)

// FuzzResolvedBy: the task worker drops an inbox row whose outcome history
// already has by reading the event it resolves straight from the persisted
// attributes (ResolvedBy), not through the typed decoder. For W5 the two must
// agree: whenever history's decoder accepts an outcome, ResolvedBy names the
// same scheduled (activity) or started (timer) event. Attributes written by
// weir carry only their own type's reference, so inputs with the other
// type's key are skipped.
func FuzzResolvedBy(f *testing.F) {
	types := []history.EventType{
		history.EventActivityCompleted, history.EventActivityFailed, history.EventActivityTimedOut,
		history.EventActivityCanceled, history.EventTimerFired, history.EventTimerCanceled,
	}
	for i := range types {
		f.Add(uint8(i), []byte(`{"scheduled_event_id":5,"started_event_id":5,"attempt":1,"result":42}`))
		f.Add(uint8(i), []byte(`{"scheduled_event_id":"5"}`))
		f.Add(uint8(i), []byte(`{"Scheduled_Event_ID":7,"failure":{"message":"x"},"timeout_type":"StartToClose"}`))
		f.Add(uint8(i), []byte(`{"started_event_id":9}`))
		f.Add(uint8(i), []byte(`null`))
	}
	f.Fuzz(func(t *testing.T, which uint8, attrs []byte) {
		eventType := types[int(which)%len(types)]
		e := history.Event{ID: 20, Type: eventType, Attributes: attrs}
		id, ok := ResolvedBy(e) // must not panic, whatever the bytes
		facts := NewFacts()
		for range 2 { // what the memo says, computed and then remembered, is the same
			memoID, memoOK := facts.ResolvedBy(e)
			require.Equal(t, ok, memoOK)
			require.Equal(t, id, memoID)
		}
		decoded, err := history.DecodeAttributes(e)
		if err != nil {
			return
		}
		// Which references the bytes carry, as encoding/json (used by both
		// readers) matches keys.
		var refs struct {
			Scheduled *json.RawMessage `json:"scheduled_event_id"`
			Started   *json.RawMessage `json:"started_event_id"`
		}
		_ = json.Unmarshal(attrs, &refs)
		var want int64
		var other *json.RawMessage
		switch a := decoded.(type) {
		case *history.ActivityCompletedAttributes:
			want, other = a.ScheduledEventID, refs.Started
		case *history.ActivityFailedAttributes:
			want, other = a.ScheduledEventID, refs.Started
		case *history.ActivityTimedOutAttributes:
			want, other = a.ScheduledEventID, refs.Started
		case *history.ActivityCanceledAttributes:
			want, other = a.ScheduledEventID, refs.Started
		case *history.TimerFiredAttributes:
			want, other = a.StartedEventID, refs.Scheduled
		case *history.TimerCanceledAttributes:
			want, other = a.StartedEventID, refs.Scheduled
		}
		if other != nil {
			return // the other type's reference too: never written by weir
		}
		require.True(t, ok, "history accepts %s %s but ResolvedBy does not", eventType, attrs)
		require.Equal(t, want, id, "%s %s resolves event %d for history, %d for the inbox dedup", eventType, attrs, want, id)
	})
}
