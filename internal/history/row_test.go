package history

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRows(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 16, 0, 0, 123456000, time.UTC)
	later := now.Add(time.Millisecond)
	event := func(id int64, typ EventType, at time.Time) Event {
		return Event{ID: id, Type: typ, Attributes: json.RawMessage(`{"n":` + string(rune('0'+id%10)) + `}`), Time: at}
	}
	events := []Event{
		event(4, EventActivityCompleted, now),
		event(5, EventWorkflowTaskStarted, now), // folded into 6
		event(6, EventActivityScheduled, now),
		event(7, EventActivityScheduled, now),
		event(8, EventWorkflowTaskStarted, now), // followed by an input: a row of its own
		event(9, EventSignalReceived, now),
		event(10, EventWorkflowTaskStarted, now), // a command at another time: a row of its own
		event(11, EventTimerStarted, later),
		event(12, EventWorkflowTaskStarted, later), // last: a row of its own
	}
	rows := slices.Collect(Rows(events))

	var ids []int64
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	require.Equal(t, []int64{4, 6, 7, 8, 9, 10, 11, 12}, ids)
	require.Equal(t, events[1].Attributes, rows[1].Boundary)
	for i, r := range rows {
		if i != 1 {
			require.Nil(t, r.Boundary, "row %d", r.ID)
		}
	}

	var unfolded []Event
	for _, r := range rows {
		unfolded = r.Unfold(unfolded)
	}
	require.Equal(t, events, unfolded, "unfolding gives back every event as it was")

	require.Empty(t, slices.Collect(Rows(nil)))
}
