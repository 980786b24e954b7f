package history

import (
	"encoding/json"
	"iter"
)

// Row is one row of weir_event: an event and, when Boundary is set, the
// WorkflowTaskStarted event just before it (ID-1), folded into the row. A
// boundary is folded only into the command that
// follows it in the same task, which has the same time, so the row holds
// everything of both events: the boundary's attributes are Boundary, its
// time the row's.
type Row struct {
	Event
	Boundary json.RawMessage // nil: no boundary folded into this row
}

// Rows yields the rows that store events (consecutive events of one
// append): a WorkflowTaskStarted event followed by a command of the same
// time goes into the command's row; every other event has a row of its own.
func Rows(events []Event) iter.Seq[Row] {
	return func(yield func(Row) bool) {
		for i := 0; i < len(events); i++ {
			e := events[i]
			if e.Type == EventWorkflowTaskStarted && len(e.Attributes) > 0 && i+1 < len(events) {
				next := events[i+1]
				if next.ID == e.ID+1 && next.Type.IsCommand() && next.Time.Equal(e.Time) {
					if !yield(Row{Event: next, Boundary: e.Attributes}) {
						return
					}
					i++
					continue
				}
			}
			if !yield(Row{Event: e}) {
				return
			}
		}
	}
}

// Unfold appends the events r stores to dst: its folded boundary first, if
// it has one, then its own event.
func (r Row) Unfold(dst []Event) []Event {
	if r.Boundary != nil {
		dst = append(dst, Event{ID: r.ID - 1, Type: EventWorkflowTaskStarted, Attributes: r.Boundary, Time: r.Time})
	}
	return append(dst, r.Event)
}
