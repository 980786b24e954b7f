// Package timer defines the River job that fires a workflow's durable timer:
// due at the timer's fire time, it delivers a TimerFired input to the run.
package timer

import "github.com/google/uuid"

// Kind is the River job kind of durable timers.
const Kind = "weir.timer"

// Args are a timer job's args.
type Args struct {
	// RunID is the run the timer belongs to.
	RunID uuid.UUID `json:"run_id"`

	// StartedEventID is the timer's TimerStarted event: its identity.
	StartedEventID int64 `json:"started_event_id"`
}

// Kind implements river.JobArgs.
func (Args) Kind() string { return Kind }
