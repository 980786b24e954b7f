package history

import (
	"testing"
	"time"
)

// benchEvents are the events of a run of three no-op activities, one of
// each type it has.
func benchEvents(b *testing.B) []Event {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var events []Event
	for i, attrs := range []Attributes{
		&WorkflowStartedAttributes{Kind: "bench.three_steps", Args: Payload(`{"input":1}`), WorkflowID: "wf-1", RunID: "0193b9f2-6f4e-7c1a-9b8e-2f0d1c2b3a4d", Generation: 1},
		&WorkflowTaskStartedAttributes{Now: now, Attempt: 1},
		&ActivityScheduledAttributes{
			Kind: "bench.step", Args: Payload(`{"value":1}`), Queue: "weir", Priority: 1, StartToCloseTimeout: Duration(time.Minute),
			RetryPolicy: &RetryPolicy{InitialInterval: Duration(time.Second), BackoffCoefficient: 2, MaximumInterval: Duration(100 * time.Second), MaximumAttempts: 25},
		},
		&ActivityCompletedAttributes{ScheduledEventID: 3, Result: Payload(`2`), Attempt: 1},
		&WorkflowCompletedAttributes{Result: Payload(`4`)},
	} {
		e, err := NewEvent(int64(i+1), now, attrs)
		if err != nil {
			b.Fatal(err)
		}
		events = append(events, e)
	}
	return events
}

func BenchmarkDecodeAttributes(b *testing.B) {
	for _, e := range benchEvents(b) {
		b.Run(string(e.Type), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := DecodeAttributes(e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNewEvent(b *testing.B) {
	for _, e := range benchEvents(b) {
		attrs, err := DecodeAttributes(e)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(e.Type), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := NewEvent(e.ID, e.Time, attrs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
