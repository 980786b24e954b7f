package otel

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// IDGenerator gives weir's attempt spans IDs derived from what they are: the
// span of attempt n of job j of run r always has the same span ID, and the
// workflow tasks of a run started without a trace context share a trace ID
// derived from the run ID. So the span of attempt n+1 can link to the span of
// attempt n wherever it ran, and a run's spans form one trace even without a
// start span. Every other span gets random IDs, as with the SDK's default.
//
// Install it on the SDK's TracerProvider with
// sdktrace.WithIDGenerator(otel.NewIDGenerator()). Without it spans still
// work; an attempt then links to the previous attempt only when that ran in
// the same process.
type IDGenerator struct{}

var _ sdktrace.IDGenerator = IDGenerator{}

// NewIDGenerator returns an IDGenerator.
func NewIDGenerator() IDGenerator { return IDGenerator{} }

// NewIDs returns the IDs of a root span.
func (IDGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if ids, ok := ctx.Value(idsKey{}).(*attemptIDs); ok {
		return ids.traceID, ids.spanID
	}
	var tid trace.TraceID
	_, _ = rand.Read(tid[:])
	return tid, randomSpanID()
}

// NewSpanID returns the ID of a span with a parent.
func (IDGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if ids, ok := ctx.Value(idsKey{}).(*attemptIDs); ok {
		return ids.spanID
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		_, _ = rand.Read(sid[:])
	}
	return sid
}

// idsKey is the context key of the IDs the generator should give the span
// being started. It is set only on the context passed to Tracer.Start, never
// on the context the attempt runs with, so spans of user code get random IDs.
type idsKey struct{}

type attemptIDs struct {
	spanID  trace.SpanID
	traceID trace.TraceID
}

func withAttemptIDs(ctx context.Context, runID uuid.UUID, jobID int64, attempt int) (context.Context, *attemptIDs) {
	ids := &attemptIDs{spanID: attemptSpanID(runID, jobID, attempt), traceID: runTraceID(runID)}
	return context.WithValue(ctx, idsKey{}, ids), ids
}

// attemptSpanID is the span ID of attempt of jobID working for runID.
func attemptSpanID(runID uuid.UUID, jobID int64, attempt int) trace.SpanID {
	h := sha256.New()
	h.Write([]byte("weir.attempt\x00"))
	h.Write(runID[:])
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(jobID)))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(attempt)))
	var sid trace.SpanID
	copy(sid[:], h.Sum(nil))
	if !sid.IsValid() {
		sid[7] = 1
	}
	return sid
}

// runTraceID is the trace ID of a run started without a trace context.
func runTraceID(runID uuid.UUID) trace.TraceID {
	sum := sha256.Sum256(append([]byte("weir.run\x00"), runID[:]...))
	var tid trace.TraceID
	copy(tid[:], sum[:])
	if !tid.IsValid() {
		tid[15] = 1
	}
	return tid
}
