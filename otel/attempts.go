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
	live       map[attemptKey]trace.Span
}

func newAttempts() *attempts {
	return &attempts{ended: make(map[attemptKey]trace.SpanContext), live: make(map[attemptKey]trace.Span)}
}

func (a *attempts) begin(key attemptKey, span trace.Span) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.live[key] = span
}

func (a *attempts) end(key attemptKey, span trace.Span) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.live[key] == span {
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
	if span, ok := a.live[key]; ok {
		return span, span.SpanContext()
	}
	return nil, a.ended[key]
}
