package replay

import (
	"cmp"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay/env"
	"github.com/weirhq/weir/workflow"
)

// rootContext is the workflow.Context given to the workflow's code.
type rootContext struct{ e *engine }

func (c rootContext) Done() workflow.Readier { return c }

// IsReady implements workflow.Readier for Done.
func (c rootContext) IsReady() bool { return c.e.cancelRequested }

func (c rootContext) Err() error {
	if c.e.cancelRequested {
		return workflow.ErrCanceled
	}
	return nil
}

func (c rootContext) Value(key any) any {
	if key == (env.Key{}) {
		return env.Env(c.e)
	}
	return nil
}

// The env.Env methods.

func (e *engine) Await(cond func() bool) { e.sched.Await(cond) }
func (e *engine) Codec() env.Codec       { return e.codec }
func (e *engine) Go(fn func())           { e.sched.Spawn(fn) }

// AwaitPromise implements env.Env: p.Ready does not escape the scheduler's
// Await, so it needs no closure on the heap, as one through Await does.
func (e *engine) AwaitPromise(p *env.Promise) { e.sched.Await(p.Ready) }

func (e *engine) GetVersion(changeID string, minSupported, maxSupported int) int {
	e.sched.Guard()
	version, known := e.more().versions[changeID]
	eventID := e.boundaryID
	switch {
	case known:
	case e.replaying:
		version = workflow.DefaultVersion
		want := versionMarkerAttributes(changeID, 0)
		e.skipVersionMarkers(want)
		if e.cursor < len(e.expected) && keyOf(e.expected[e.cursor].attrs) == keyOf(want) {
			marker, _ := versionMarker(e.expected[e.cursor].attrs)
			version, eventID = marker.Version, e.expected[e.cursor].event.ID
			e.cursor++
		}
	default:
		version = maxSupported
		e.commandOrAbort(versionMarkerAttributes(changeID, version))
	}
	set(&e.more().versions, changeID, version)
	if version < minSupported || version > maxSupported {
		err := nondeterminism(eventID, fmt.Sprintf("version %d of change %q", version, changeID),
			fmt.Sprintf("GetVersion supporting versions %d to %d", minSupported, maxSupported))
		e.abortErr = err
		panic(&abort{err: err})
	}
	return version
}

func versionMarkerAttributes(changeID string, version int) *history.MarkerRecordedAttributes {
	data, _ := json.Marshal(history.VersionMarker{ChangeID: changeID, Version: version}) // can't fail
	return &history.MarkerRecordedAttributes{Name: history.MarkerVersion, Data: data}
}
func (e *engine) Info() env.Info    { return e.info }
func (e *engine) IsReplaying() bool { return e.replaying }

// Logger makes the workflow's logger on first use: few workflows log.
func (e *engine) Logger() *slog.Logger {
	r := e.more()
	if r.logger == nil {
		logger := cmp.Or(e.logTo, slog.New(slog.DiscardHandler))
		r.logger = slog.New(&replayHandler{inner: logger.Handler(), replaying: func() bool { return e.replaying }}).
			With("workflow_kind", e.info.Kind, "workflow_id", e.info.WorkflowID, "run_id", e.info.RunID)
	}
	return r.logger
}
func (e *engine) Now() time.Time { return e.now }

func (e *engine) ActivityResultType(kind string) (reflect.Type, bool) {
	if e.resultType == nil {
		return nil, false
	}
	return e.resultType(kind)
}

func (e *engine) MaxPayloadBytes() int {
	return cmp.Or(e.maxPayloadBytes, MaxPayloadBytesDefault)
}

func (e *engine) NextSeq() int64 {
	e.sched.Guard()
	return e.nextSeq()
}

// nextSeq advances the readiness counter (for the engine's own use, outside
// coroutines).
func (e *engine) nextSeq() int64 {
	e.seq++
	return e.seq
}

func (e *engine) ScheduleActivity(attrs *history.ActivityScheduledAttributes, ctx env.Context) *env.Promise {
	e.sched.Guard()
	op := e.startOperation(attrs, attrs.Kind, ctx, false)
	if !e.replaying {
		e.activities = append(e.activities, ScheduledActivity{Attributes: attrs, EventID: op.promise.EventID})
	}
	return &op.promise
}

func (e *engine) StartTimer(attrs *history.TimerStartedAttributes, ctx env.Context) *env.Promise {
	e.sched.Guard()
	rec := e.startOperation(attrs, "", ctx, true)
	if !e.replaying {
		r := e.more()
		r.timers = append(r.timers, StartedTimer{Attributes: attrs, EventID: rec.promise.EventID})
	}
	return &rec.promise
}

func (e *engine) NextEventID() int64 {
	e.sched.Guard()
	if e.replaying {
		// The next command recorded in this task, or the first after them.
		e.skipVersionMarkers(nil)
		if e.cursor < len(e.expected) {
			return e.expected[e.cursor].event.ID
		}
		return e.boundaryID + int64(len(e.expected)) + 1
	}
	return e.nextID
}

func (e *engine) StartChildWorkflow(attrs *history.ChildWorkflowScheduledAttributes) *env.Promise {
	e.sched.Guard()
	rec := e.commandOrAbort(attrs)
	op := &operation{child: true, promise: env.Promise{EventID: rec.event.ID, Kind: attrs.Kind}}
	e.pending = append(e.pending, op)
	e.operations = append(e.operations, op) // event IDs only grow
	if !e.replaying {
		r := e.more()
		r.children = append(r.children, ScheduledChild{Attributes: attrs, EventID: op.promise.EventID})
	}
	return &op.promise
}

func (e *engine) startOperation(attrs history.Attributes, kind string, ctx env.Context, timer bool) *operation {
	rec := e.commandOrAbort(attrs)
	op := &operation{ctx: ctx, promise: env.Promise{EventID: rec.event.ID, Kind: kind}, timer: timer}
	e.pending = append(e.pending, op)
	e.operations = append(e.operations, op) // event IDs only grow
	return op
}

func (e *engine) SetQueryHandler(kind string, handler func([]byte) ([]byte, error)) {
	e.sched.Guard()
	set(&e.more().queryHandlers, kind, handler)
}

func (e *engine) SetUpdateHandler(kind string, validate func([]byte) error, handle func([]byte) ([]byte, error)) {
	e.sched.Guard()
	set(&e.more().updateHandlers, kind, updateHandler{handle: handle, validate: validate})
}

func (e *engine) SignalQueue(kind string) *env.SignalQueue {
	set(&e.more().signalsOpened, kind, true)
	return e.signalQueue(kind)
}

// signalQueue is kind's queue, made on first use.
func (e *engine) signalQueue(kind string) *env.SignalQueue {
	q, ok := e.more().signals[kind]
	if !ok {
		q = &env.SignalQueue{}
		set(&e.more().signals, kind, q)
	}
	return q
}

func (e *engine) SideEffect(fn func() ([]byte, error)) ([]byte, error) {
	e.sched.Guard()
	if e.replaying {
		rec := e.commandOrAbort(&history.MarkerRecordedAttributes{Name: history.MarkerSideEffect})
		return rec.attrs.(*history.MarkerRecordedAttributes).Data, nil
	}
	data, err := fn()
	if err != nil {
		return nil, err
	}
	e.commandOrAbort(&history.MarkerRecordedAttributes{Name: history.MarkerSideEffect, Data: data})
	return data, nil
}
