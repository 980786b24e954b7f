package engine

import (
	"encoding/json"
	"sync"

	"github.com/weirhq/weir/internal/history"
)

// Facts memoizes what a task reads out of its run's committed events'
// attributes: the operation an outcome resolves (when reading it
// allocates), a signal's request ID and the decoded attributes a replay
// reads, so that a task on a cached run
// does not decode its whole history again. A committed event never
// changes, so its facts stay true while the run's history is cached; facts
// of events not committed yet are never looked up through it. It is safe
// for concurrent use. A nil memo decodes every time.
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

// NewFacts returns an empty memo. Its maps are made on first use: a task
// on a cached run usually needs none.
func NewFacts() *Facts {
	return &Facts{}
}

// memo returns *m's fact of event id, computing it the first time and
// keeping it unless computing it failed.
func memo[T any](f *Facts, m *map[int64]T, id int64, compute func() (T, error)) (T, error) {
	f.mu.Lock()
	fact, known := (*m)[id]
	f.mu.Unlock()
	if known {
		return fact, nil
	}
	fact, err := compute()
	if err == nil {
		f.mu.Lock()
		if *m == nil {
			*m = map[int64]T{}
		}
		(*m)[id] = fact
		f.mu.Unlock()
	}
	return fact, err
}

// Decode is history.DecodeAttributes(e) for a committed event e of the run
// (replay.ExecuteParams.Decode); the attributes are shared, to be read only.
func (f *Facts) Decode(e history.Event) (history.Attributes, error) {
	if f == nil {
		return history.DecodeAttributes(e)
	}
	return memo(f, &f.decoded, e.ID, func() (history.Attributes, error) { return history.DecodeAttributes(e) })
}

// ResolvedBy is ResolvedBy(e) for a committed event e of the run. What
// readRef reads costs no allocation and is not kept: only what
// json.Unmarshal decodes is.
func (f *Facts) ResolvedBy(e history.Event) (int64, bool) {
	if f == nil || !ResolvesEvent(e.Type) && e.Type != history.EventTimerCanceled {
		return ResolvedBy(e)
	}
	if ref, ok := readRef(e.Attributes); ok {
		return ref.id(), true
	}
	r, _ := memo(f, &f.resolves, e.ID, func() (r resolution, _ error) {
		r.id, r.ok = ResolvedBy(e)
		return r, nil
	})
	return r.id, r.ok
}

// SignalRequestID is SignalRequestID(e) for a committed event e of the run.
func (f *Facts) SignalRequestID(e history.Event) string {
	if f == nil || e.Type != history.EventSignalReceived {
		return SignalRequestID(e)
	}
	id, _ := memo(f, &f.requests, e.ID, func() (string, error) { return SignalRequestID(e), nil })
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
	ref, ok := readRef(e.Attributes)
	if !ok {
		var decoded outcomeRef // on the heap: only this path pays for it
		if err := json.Unmarshal(e.Attributes, &decoded); err != nil {
			return 0, false
		}
		ref = decoded
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
