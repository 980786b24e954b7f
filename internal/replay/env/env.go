// Package env is the seam between the public workflow package and the replay
// engine: the engine implements [Env], stores it in the workflow.Context it
// hands to workflow code under [Key], and the workflow package's functions
// find it there. Neither package imports the other through it, so the engine
// can import workflow for its types without a cycle.
package env

import (
	"encoding/json"
	"log/slog"
	"reflect"
	"time"

	"github.com/weirhq/weir/internal/history"
)

// Context is what the engine asks of a workflow.Context: whether it is
// cancelled.
type Context interface {
	Err() error
}

// Key is the workflow.Context value key under which the engine stores its
// [Env]. User code can't name it, so it can't fake or replace the Env.
type Key struct{}

// Codec encodes and decodes payloads: workflow args and results, activity
// args and results, side-effect values.
type Codec interface {
	// Encode encodes v.
	Encode(v any) ([]byte, error)
	// Decode decodes data into the value v points to.
	Decode(data []byte, v any) error
}

// JSONCodec is the default [Codec]: encoding/json.
type JSONCodec struct{}

// Encode implements Codec.
func (JSONCodec) Encode(v any) ([]byte, error) { return json.Marshal(v) }

// Decode implements Codec. Empty data decodes as JSON null (leaving v as is).
func (JSONCodec) Decode(data []byte, v any) error {
	if len(data) == 0 {
		data = []byte("null")
	}
	return json.Unmarshal(data, v)
}

// Info describes the run and the workflow task being executed; see
// workflow.Info for the meaning of each field.
type Info struct {
	Generation  int64  // numbers the runs of WorkflowID
	Kind        string // the workflow type
	RunID       string // identifies the run
	TaskAttempt int    // attempt of the current workflow task
	WorkflowID  string // caller-chosen identity
}

// Promise is the engine's side of the future of an activity or a timer: it
// becomes ready once the outcome is delivered (or the engine cancels it).
type Promise struct {
	// EventID is the ID of the ActivityScheduled or TimerStarted event: the
	// activity's or timer's identity.
	EventID int64
	// Kind is the activity's kind; empty for a timer.
	Kind string

	ready   bool
	seq     int64
	outcome history.Attributes
}

// Resolve makes p ready with outcome: for an activity
// *history.ActivityCompletedAttributes, *history.ActivityFailedAttributes,
// *history.ActivityTimedOutAttributes or *history.ActivityCanceledAttributes;
// for a timer *history.TimerFiredAttributes or
// *history.TimerCanceledAttributes. seq orders readiness.
func (p *Promise) Resolve(outcome history.Attributes, seq int64) {
	p.ready, p.outcome, p.seq = true, outcome, seq
}

// Ready reports whether p has its outcome.
func (p *Promise) Ready() bool { return p.ready }

// Seq is the order in which p became ready among everything that became
// ready in the run; it is meaningful only once p is ready.
func (p *Promise) Seq() int64 { return p.seq }

// Outcome returns what p was resolved with; nil until it is ready.
func (p *Promise) Outcome() history.Attributes { return p.outcome }

// Signal is a received signal waiting to be consumed.
type Signal struct {
	// Args are the signal's encoded args.
	Args []byte
	// Seq orders its arrival among everything that became ready.
	Seq int64
}

// SignalQueue holds the signals of one kind that workflow code has not
// consumed yet, oldest first.
type SignalQueue struct {
	signals []Signal
}

// Pending returns the signals not received yet, oldest first.
func (q *SignalQueue) Pending() []Signal { return append([]Signal(nil), q.signals...) }

// Push appends a signal.
func (q *SignalQueue) Push(s Signal) { q.signals = append(q.signals, s) }

// Len returns how many signals wait.
func (q *SignalQueue) Len() int { return len(q.signals) }

// Peek returns the oldest signal; ok is false when there is none.
func (q *SignalQueue) Peek() (s Signal, ok bool) {
	if len(q.signals) == 0 {
		return Signal{}, false
	}
	return q.signals[0], true
}

// Pop removes the oldest signal and returns it; ok is false when there is
// none.
func (q *SignalQueue) Pop() (s Signal, ok bool) {
	s, ok = q.Peek()
	if ok {
		q.signals[0] = Signal{}
		q.signals = q.signals[1:]
	}
	return s, ok
}

// Env is what the engine offers workflow code. Every method must be called
// from a coroutine of the workflow (workflow code), never concurrently.
type Env interface {
	// ActivityResultType returns the result type of the activity of kind
	// registered on this worker; ok is false when it has none.
	ActivityResultType(kind string) (t reflect.Type, ok bool)
	// Await blocks the calling coroutine until cond returns true.
	Await(cond func() bool)
	// AwaitPromise blocks the calling coroutine until p is ready: Await of
	// p.Ready, without making a closure of it.
	AwaitPromise(p *Promise)
	// Codec returns the payload codec.
	Codec() Codec
	// GetVersion returns the version of changeID this run uses: the one
	// recorded in history, DefaultVersion (-1) for a run that passed this
	// point before the change existed, or maxSupported (recorded) for code
	// running for the first time. A version outside [minSupported,
	// maxSupported] fails the task.
	GetVersion(changeID string, minSupported, maxSupported int) int
	// Go starts fn in a new coroutine.
	Go(fn func())
	// Info describes the run and the task.
	Info() Info
	// IsReplaying reports whether workflow code is replaying history (as
	// opposed to deciding new commands).
	IsReplaying() bool
	// Logger returns the workflow's logger (already replay-aware).
	Logger() *slog.Logger
	// MaxPayloadBytes is the largest payload workflow code may record; 0
	// or less means no limit.
	MaxPayloadBytes() int
	// NextSeq returns the next value of a counter that orders readiness
	// (deterministic: it advances only as workflow code and inputs do).
	NextSeq() int64
	// Now returns the time of the current workflow task.
	Now() time.Time
	// ScheduleActivity records the command to schedule an activity (or, when
	// replaying, matches it against history) and returns its promise.
	// Whenever every coroutine is blocked, the engine checks ctx.Err for
	// each pending activity (ctx is the activity's workflow.Context); once
	// it is not nil, the engine records an ActivityCancelRequested command
	// and resolves the promise as cancelled.
	ScheduleActivity(attrs *history.ActivityScheduledAttributes, ctx Context) *Promise
	// StartTimer records the command to start a timer (or, when replaying,
	// matches it against history) and returns its promise. ctx works as for
	// ScheduleActivity (the command is then TimerCanceled).
	StartTimer(attrs *history.TimerStartedAttributes, ctx Context) *Promise
	// NextEventID is the ID the next command would get (deterministic: the
	// same on every replay of the same code).
	NextEventID() int64
	// StartChildWorkflow records the command to start a child workflow (or,
	// when replaying, matches it against history) and returns its promise,
	// resolved by the child's ChildWorkflowCompleted or ChildWorkflowFailed.
	StartChildWorkflow(attrs *history.ChildWorkflowScheduledAttributes) *Promise
	// SetQueryHandler registers the handler of queries of kind, replacing
	// any previous one.
	SetQueryHandler(kind string, handler func(args []byte) ([]byte, error))
	// SetUpdateHandler registers the handler of updates of kind, replacing
	// any previous one: validate (may be nil) accepts or rejects an update
	// before anything is recorded; handle runs in a coroutine of its own once
	// it is accepted.
	SetUpdateHandler(kind string, validate func(args []byte) error, handle func(args []byte) ([]byte, error))
	// SignalQueue returns the queue of received signals of kind (the same
	// queue on every call).
	SignalQueue(kind string) *SignalQueue
	// SideEffect runs fn and records its result as a marker, or, when
	// replaying, returns the recorded result without running fn.
	SideEffect(fn func() ([]byte, error)) ([]byte, error)
}
