package engine

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
)

// longHistory is a run's history of n sequential activities, each
// scheduled and completed, and a signal after every tenth.
func longHistory(t testing.TB, n int) []history.Event {
	t.Helper()
	now := time.Now()
	add := func(events []history.Event, attrs history.Attributes) []history.Event {
		e, err := history.NewEvent(int64(len(events))+1, now, attrs)
		require.NoError(t, err)
		return append(events, e)
	}
	events := add(nil, &history.WorkflowStartedAttributes{Kind: "k", Args: []byte("{}"), RunID: "r", WorkflowID: "w", Generation: 1})
	for i := range n {
		events = add(events, &history.ActivityScheduledAttributes{Kind: "a", Args: []byte("{}")})
		scheduled := int64(len(events))
		events = add(events, &history.ActivityCompletedAttributes{ScheduledEventID: scheduled, Result: []byte("1"), Attempt: 1})
		if i%10 == 9 {
			events = add(events, &history.SignalReceivedAttributes{Kind: "s", Args: []byte("{}"), RequestID: fmt.Sprint("req-", i)})
		}
	}
	return events
}

// TestEventFacts: the memo answers as the attributes do, remembers what it
// read (an event's facts are read once), and a task's inputs are filtered
// the same with it or without it.
func TestEventFacts(t *testing.T) {
	t.Parallel()

	events := longHistory(t, 30)
	facts := NewFacts()
	for _, e := range events {
		id, ok := facts.ResolvedBy(e)
		wantID, wantOK := ResolvedBy(e)
		require.Equal(t, wantOK, ok, "event %d", e.ID)
		require.Equal(t, wantID, id, "event %d", e.ID)
		require.Equal(t, SignalRequestID(e), facts.SignalRequestID(e), "event %d", e.ID)
	}

	// Committed events never change, so what was decoded stays: the memo
	// answers from what json.Unmarshal read (keys in another case), not
	// from the bytes; what readRef reads without allocating is read again.
	completed := events[2]
	require.Equal(t, history.EventActivityCompleted, completed.Type)
	completed.Attributes = []byte(`{"Scheduled_Event_ID":2}`)
	id, ok := facts.ResolvedBy(completed)
	require.True(t, ok)
	require.Equal(t, int64(2), id)
	changed := completed
	changed.Attributes = []byte(`{"Scheduled_Event_ID":99}`)
	id, ok = facts.ResolvedBy(changed)
	require.True(t, ok)
	require.Equal(t, int64(2), id, "decoded once")
	changed.ID = events[4].ID
	changed.Attributes = []byte(`{"scheduled_event_id":99}`)
	id, ok = facts.ResolvedBy(changed)
	require.True(t, ok)
	require.Equal(t, int64(99), id, "read from the bytes")
	signal := events[len(events)-1]
	require.Equal(t, history.EventSignalReceived, signal.Type)
	changed = signal
	changed.Attributes = []byte(`{"request_id":"other"}`)
	require.Equal(t, "req-29", facts.SignalRequestID(changed), "read once")

	// Decoded attributes: as history.DecodeAttributes decodes them, decoded
	// once; a decoding error is not kept.
	for _, e := range events {
		want, wantErr := history.DecodeAttributes(e)
		got, err := facts.Decode(e)
		require.Equal(t, wantErr, err, "event %d", e.ID)
		require.Equal(t, want, got, "event %d", e.ID)
	}
	changed = completed
	changed.Attributes = []byte(`{"scheduled_event_id":99}`)
	attrs, err := facts.Decode(changed)
	require.NoError(t, err)
	require.Equal(t, int64(2), attrs.(*history.ActivityCompletedAttributes).ScheduledEventID, "decoded once")
	bad := history.Event{ID: int64(len(events)) + 1, Type: history.EventActivityCompleted, Attributes: []byte(`{`)}
	_, err = facts.Decode(bad)
	require.ErrorIs(t, err, history.ErrInvalidEvent)
	bad.Attributes = []byte(`{"scheduled_event_id":2}`)
	_, err = facts.Decode(bad)
	require.NoError(t, err, "the error was not kept")

	// Inputs: an outcome history has, one it does not, a signal it has, and
	// one it does not.
	dup := history.Event{Type: history.EventActivityCompleted, Attributes: []byte(`{"scheduled_event_id":2}`)}
	fresh := history.Event{Type: history.EventActivityFailed, Attributes: []byte(`{"scheduled_event_id":5}`)}
	fresh.ID = 0
	oldSignal := history.Event{Type: history.EventSignalReceived, Attributes: []byte(`{"kind":"s","request_id":"req-9"}`)}
	newSignal := history.Event{Type: history.EventSignalReceived, Attributes: []byte(`{"kind":"s","request_id":"req-new"}`)}
	direct := []history.Event{dup, fresh, oldSignal, newSignal}
	logger := slog.New(slog.DiscardHandler)
	pieces := [][]history.Event{events[:2], events[2:]} // as a run cache keeps a history
	// Event 5 is completed in history too: only the new signal goes in.
	for _, memo := range []*Facts{nil, NewFacts(), facts} {
		inputs, err := NewInputs(context.Background(), uuid.New(), pieces, memo, nil, direct, logger)
		require.NoError(t, err)
		require.Equal(t, []history.Event{newSignal}, inputs)
	}
	open := history.Event{ID: int64(len(events)) + 1, Type: history.EventActivityScheduled, Attributes: []byte(`{}`)}
	require.Equal(t, Pending{Activities: true}, PendingWork(pieces, facts, []history.Event{open}, nil))
	require.Equal(t, Pending{}, PendingWork(pieces, facts, nil, nil))
}

// BenchmarkNewInputs measures reading a task's inputs against its run's
// history of n activities: decoding the history's outcomes every time, or
// with the memo the history cache keeps (warm from the run's earlier
// tasks).
func BenchmarkNewInputs(b *testing.B) {
	logger := slog.New(slog.DiscardHandler)
	for _, n := range []int{10, 100, 1000} {
		events := longHistory(b, n)
		last := events[len(events)-2] // the last ActivityScheduled... or a completion; any outcome does
		direct := []history.Event{{Type: history.EventActivityCompleted, Attributes: []byte(fmt.Sprintf(`{"scheduled_event_id":%d}`, last.ID))}}
		for _, memo := range []bool{false, true} {
			b.Run(fmt.Sprintf("Activities=%d/Memo=%t", n, memo), func(b *testing.B) {
				var facts *Facts
				if memo {
					facts = NewFacts()
				}
				runID := uuid.New()
				b.ReportAllocs()
				for b.Loop() {
					_, err := NewInputs(context.Background(), runID, [][]history.Event{events}, facts, nil, direct, logger)
					require.NoError(b, err)
					PendingWork([][]history.Event{events}, facts, nil, nil)
				}
			})
		}
	}
}

// TestNewInputsOrder: the inputs are the inbox's, then direct's, each
// once and in order, without those history has; when they are direct's
// alone, they are direct itself, with no room, so that appending to them
// copies.
func TestNewInputsOrder(t *testing.T) {
	t.Parallel()

	events := longHistory(t, 1) // 2 scheduled, 3 completes it
	for range 2 {               // 4 and 5, open
		e, err := history.NewEvent(int64(len(events))+1, time.Now(), &history.ActivityScheduledAttributes{Kind: "a", Args: []byte("{}")})
		require.NoError(t, err)
		events = append(events, e)
	}
	outcome := func(id int64) history.Event {
		return history.Event{Type: history.EventActivityCompleted, Attributes: fmt.Appendf(nil, `{"scheduled_event_id":%d}`, id)}
	}
	inboxOf := func(events ...history.Event) []InboxItem {
		var items []InboxItem
		for i, e := range events {
			items = append(items, InboxItem{ID: int64(i) + 1, Event: e})
		}
		return items
	}
	for _, c := range []struct {
		name          string
		inbox, direct []history.Event
		want          []history.Event
	}{
		{name: "DirectAlone", direct: []history.Event{outcome(4), outcome(5)}, want: []history.Event{outcome(4), outcome(5)}},
		{name: "DirectTwice", direct: []history.Event{outcome(4), outcome(4), outcome(5)}, want: []history.Event{outcome(4), outcome(5)}},
		{name: "DirectInHistory", direct: []history.Event{outcome(2), outcome(5)}, want: []history.Event{outcome(5)}},
		{name: "InboxFirst", inbox: []history.Event{outcome(5)}, direct: []history.Event{outcome(4), outcome(5)}, want: []history.Event{outcome(5), outcome(4)}},
		{name: "InboxInHistory", inbox: []history.Event{outcome(2)}, direct: []history.Event{outcome(4)}, want: []history.Event{outcome(4)}},
		{name: "None", inbox: []history.Event{outcome(2)}, direct: []history.Event{outcome(2)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			inputs, err := NewInputs(context.Background(), uuid.New(), [][]history.Event{events}, NewFacts(), inboxOf(c.inbox...), c.direct, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
			require.Equal(t, len(c.want), len(inputs))
			for i := range c.want {
				require.Equal(t, c.want[i].Attributes, inputs[i].Attributes, "input %d", i)
			}
			if c.name == "DirectAlone" {
				require.Same(t, &c.direct[0], &inputs[0], "direct's alone are direct itself")
				require.Equal(t, len(inputs), cap(inputs), "room to append in place")
			}
		})
	}
}
