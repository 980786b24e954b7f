package engine

import (
	"encoding/json"
	"sync"

	"github.com/weirhq/weir/internal/history"
)

// Facts memoizes what a task reads out of its run's committed events'
// attributes: the operation an outcome resolves, a signal's request ID and
// the decoded attributes a replay reads.
// Every task looks them up over the whole history (to drop outcomes and
// signals history already has, and to find the activities still open), and
// decoding the attributes each time made a task's cost grow with its
// history even when its code was not replayed (sticky execution). A
// committed event never changes, so its facts stay true for as long as the
// run's history is cached, and the memo goes with it; facts of events not
// committed yet are never looked up through it. It is safe for concurrent
// use (two tasks of one run may read it at once, one of them bound to fail
// its compare-and-swap). A nil memo decodes every time.
type Facts struct {
	mu       sync.Mutex
	resolves map[int64]resolution // by event ID: outcomes and timer cancellations
	requests map[int64]string     // by event ID: SignalReceived's request ID
	decoded  map[int64]history.Attributes
}

// resolution is what ResolvedBy said of an event.
type resolution struct {
	id int64
	ok bool
}

func NewFacts() *Facts {
	return &Facts{resolves: map[int64]resolution{}, requests: map[int64]string{}, decoded: map[int64]history.Attributes{}}
}

// Decode is history.DecodeAttributes(e) for a committed event e of the run
// (replay.ExecuteParams.Decode); the attributes are shared, to be read only.
func (f *Facts) Decode(e history.Event) (history.Attributes, error) {
	if f == nil {
		return history.DecodeAttributes(e)
	}
	f.mu.Lock()
	attrs, known := f.decoded[e.ID]
	f.mu.Unlock()
	if known {
		return attrs, nil
	}
	attrs, err := history.DecodeAttributes(e)
	if err == nil {
		f.mu.Lock()
		f.decoded[e.ID] = attrs
		f.mu.Unlock()
	}
	return attrs, err
}

// ResolvedBy is ResolvedBy(e) for a committed event e of the run.
func (f *Facts) ResolvedBy(e history.Event) (int64, bool) {
	if f == nil || !ResolvesEvent(e.Type) && e.Type != history.EventTimerCanceled {
		return ResolvedBy(e)
	}
	f.mu.Lock()
	r, known := f.resolves[e.ID]
	f.mu.Unlock()
	if !known {
		r.id, r.ok = ResolvedBy(e)
		f.mu.Lock()
		f.resolves[e.ID] = r
		f.mu.Unlock()
	}
	return r.id, r.ok
}

// SignalRequestID is SignalRequestID(e) for a committed event e of the run.
func (f *Facts) SignalRequestID(e history.Event) string {
	if f == nil || e.Type != history.EventSignalReceived {
		return SignalRequestID(e)
	}
	f.mu.Lock()
	id, known := f.requests[e.ID]
	f.mu.Unlock()
	if !known {
		id = SignalRequestID(e)
		f.mu.Lock()
		f.requests[e.ID] = id
		f.mu.Unlock()
	}
	return id
}

// outcomeRef is what outcome events' attributes share: the event they
// resolve (an activity's ActivityScheduled, a timer's TimerStarted).
type outcomeRef struct {
	ScheduledEventID int64 `json:"scheduled_event_id"`
	StartedEventID   int64 `json:"started_event_id"`
}

func (r outcomeRef) id() int64 { return max(r.ScheduledEventID, r.StartedEventID) }

// ResolvedBy returns the event e resolves, if e is an outcome or a
// cancellation of a timer.
func ResolvedBy(e history.Event) (int64, bool) {
	if !ResolvesEvent(e.Type) && e.Type != history.EventTimerCanceled {
		return 0, false
	}
	var ref outcomeRef
	if err := json.Unmarshal(e.Attributes, &ref); err != nil {
		return 0, false
	}
	return ref.id(), true
}

// SignalRequestID is a SignalReceived event's request ID ("" for others).
func SignalRequestID(e history.Event) string {
	if e.Type != history.EventSignalReceived {
		return ""
	}
	var ref struct {
		RequestID string `json:"request_id"`
	}
	_ = json.Unmarshal(e.Attributes, &ref)
	return ref.RequestID
}
