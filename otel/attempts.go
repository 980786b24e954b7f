package otel

import (
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// endedMax bounds how many ended attempt spans a registry remembers.
const endedMax = 4096

type attemptKey struct {
	attempt int
	jobID   int64
}

// attempts tracks the spans of the attempts this process runs, so that a
// fencing event (which knows only a job and an attempt) finds its span, and
// an attempt finds the span of the one before it.
type attempts struct {
	mu         sync.Mutex
	ended      map[attemptKey]trace.SpanContext
	endedOrder []attemptKey // oldest first, at most endedMax
	live       map[attemptKey]*liveSpan
}

// liveSpan is a running attempt's span, by pointer: spans need not be
// comparable.
type liveSpan struct {
	span trace.Span
}

func newAttempts() *attempts {
	return &attempts{ended: make(map[attemptKey]trace.SpanContext), live: make(map[attemptKey]*liveSpan)}
}

func (a *attempts) begin(key attemptKey, span trace.Span) *liveSpan {
	live := &liveSpan{span: span}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.live[key] = live
	return live
}

func (a *attempts) end(key attemptKey, live *liveSpan) {
	span := live.span
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.live[key] == live {
		delete(a.live, key)
	}
	if _, ok := a.ended[key]; !ok {
		if len(a.endedOrder) == endedMax {
			delete(a.ended, a.endedOrder[0])
			a.endedOrder = a.endedOrder[1:]
		}
		a.endedOrder = append(a.endedOrder, key)
	}
	a.ended[key] = span.SpanContext()
}

// find returns the live span of key, or else the context of its ended span.
func (a *attempts) find(key attemptKey) (trace.Span, trace.SpanContext) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if live, ok := a.live[key]; ok {
		return live.span, live.span.SpanContext()
	}
	return nil, a.ended[key]
}
