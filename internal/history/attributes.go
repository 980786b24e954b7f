package history

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"
	"unicode/utf8"
)

// Attributes is implemented by the typed attributes of every event type.
type Attributes interface {
	// EventType is the type of the event these attributes belong to.
	EventType() EventType
}

// validator is implemented by attributes that have required fields:
// validate says what is wrong, or "".
type validator interface {
	validate() string
}

// Timeout types of [ActivityTimedOutAttributes].
const (
	TimeoutStartToClose    = "StartToClose"
	TimeoutScheduleToClose = "ScheduleToClose"
	TimeoutHeartbeat       = "Heartbeat"
)

// Marker names.
const (
	// MarkerSideEffect names markers recorded by workflow.SideEffect; Data
	// is the value.
	MarkerSideEffect = "SideEffect"
	// MarkerVersion names markers recorded by workflow.GetVersion; Data is
	// a [VersionMarker].
	MarkerVersion = "Version"
)

// VersionMarker is the data of a [MarkerVersion] marker: the version of a
// change that the run chose when it first reached the change.
type VersionMarker struct {
	// ChangeID names the change.
	ChangeID string `json:"change_id"`
	// Version is the chosen version.
	Version int `json:"version"`
}

// WorkflowStartedAttributes are the attributes of [EventWorkflowStarted].
type WorkflowStartedAttributes struct {
	// Kind is the workflow type: the Kind() of its args.
	Kind string `json:"kind"`
	// Args are the workflow's encoded args.
	Args Payload `json:"args"`
	// WorkflowID is the caller-chosen identity of the workflow.
	WorkflowID string `json:"workflow_id,omitempty"`
	// RunID identifies this run.
	RunID string `json:"run_id,omitempty"`
	// Generation numbers the runs of WorkflowID: 1, 2, …
	Generation int64 `json:"generation,omitempty"`
}

func (*WorkflowStartedAttributes) EventType() EventType { return EventWorkflowStarted }

func (a *WorkflowStartedAttributes) validate() string { return required("kind", a.Kind) }

// WorkflowTaskStartedAttributes are the attributes of
// [EventWorkflowTaskStarted], the boundary of a workflow task.
type WorkflowTaskStartedAttributes struct {
	// Now is the time workflow code saw during the task (workflow.Now).
	Now time.Time `json:"now"`
	// Attempt is the attempt of the workflow-task job that committed it.
	Attempt int `json:"attempt,omitempty"`
}

func (*WorkflowTaskStartedAttributes) EventType() EventType { return EventWorkflowTaskStarted }

func (a *WorkflowTaskStartedAttributes) validate() string {
	if a.Now.IsZero() {
		return "now is required"
	}
	return ""
}

// RetryPolicy is an activity's retry policy, with every default applied.
type RetryPolicy struct {
	// InitialInterval is the delay before the first retry.
	InitialInterval Duration `json:"initial_interval"`
	// BackoffCoefficient multiplies the delay after each retry.
	BackoffCoefficient float64 `json:"backoff_coefficient"`
	// MaximumInterval caps the delay.
	MaximumInterval Duration `json:"maximum_interval"`
	// MaximumAttempts caps the attempts; 0 means unlimited.
	MaximumAttempts int `json:"maximum_attempts"`
	// NonRetryableErrorTypes lists [Failure.Type] values never retried.
	NonRetryableErrorTypes []string `json:"non_retryable_error_types,omitempty"`
}

// Delay is the delay after attempt (1 is the first): InitialInterval ×
// BackoffCoefficient^(attempt-1), capped at MaximumInterval when it is set.
func (p *RetryPolicy) Delay(attempt int) time.Duration {
	delay := float64(p.InitialInterval)
	for range max(attempt-1, 0) {
		delay *= max(p.BackoffCoefficient, 1)
		if p.MaximumInterval > 0 && delay >= float64(p.MaximumInterval) {
			return time.Duration(p.MaximumInterval)
		}
	}
	if p.MaximumInterval > 0 {
		delay = min(delay, float64(p.MaximumInterval))
	}
	return time.Duration(delay)
}

// ActivityScheduledAttributes are the attributes of [EventActivityScheduled]:
// everything the worker needs to insert the activity's River job. Options are
// recorded with every default applied.
type ActivityScheduledAttributes struct {
	// Kind is the activity type: its args' Kind(), which is the River job kind.
	Kind string `json:"kind"`
	// Args are the activity's encoded args (the River job's args).
	Args Payload `json:"args"`
	// Queue is the River queue to insert the job into.
	Queue string `json:"queue"`
	// Priority is the River priority (1 is first, 4 last).
	Priority int `json:"priority"`
	// StartToCloseTimeout bounds one attempt.
	StartToCloseTimeout Duration `json:"start_to_close_timeout"`
	// ScheduleToCloseTimeout bounds all attempts together; 0 means no bound.
	ScheduleToCloseTimeout Duration `json:"schedule_to_close_timeout,omitempty"`
	// HeartbeatTimeout is the longest gap between heartbeats; 0 means
	// heartbeats aren't required.
	HeartbeatTimeout Duration `json:"heartbeat_timeout,omitempty"`
	// RetryPolicy says how attempts are retried.
	RetryPolicy *RetryPolicy `json:"retry_policy"`
	// Tags are the River tags of the activity's job.
	Tags []string `json:"tags,omitempty"`
}

func (*ActivityScheduledAttributes) EventType() EventType { return EventActivityScheduled }

func (a *ActivityScheduledAttributes) validate() string {
	if a.RetryPolicy == nil {
		return cmp.Or(required("kind", a.Kind), "retry_policy is required")
	}
	return required("kind", a.Kind)
}

// RoundTrips reports whether DecodeAttributes gives back attributes equal
// to a from the event NewEvent makes of them: a is valid, its strings are
// UTF-8 (json.Marshal replaces invalid bytes), its lists nil or not empty
// (omitempty drops empty ones) and its args come back byte for byte.
func (a *ActivityScheduledAttributes) RoundTrips() bool {
	return a.validate() == "" && utf8.ValidString(a.Kind) && utf8.ValidString(a.Queue) && a.Args.roundTrips() &&
		listRoundTrips(a.Tags) && listRoundTrips(a.RetryPolicy.NonRetryableErrorTypes)
}

func listRoundTrips(list []string) bool {
	for _, s := range list {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return list == nil || len(list) > 0
}

// ActivityCompletedAttributes are the attributes of [EventActivityCompleted].
type ActivityCompletedAttributes struct {
	// ScheduledEventID is the ID of the activity's ActivityScheduled event.
	ScheduledEventID int64 `json:"scheduled_event_id"`
	// Result is the activity's encoded result.
	Result Payload `json:"result"`
	// Attempt is the attempt that completed (1 is the first).
	Attempt int `json:"attempt"`
}

func (*ActivityCompletedAttributes) EventType() EventType { return EventActivityCompleted }

func (a *ActivityCompletedAttributes) validate() string {
	return positiveID("scheduled_event_id", a.ScheduledEventID)
}

// ActivityFailedAttributes are the attributes of [EventActivityFailed].
type ActivityFailedAttributes struct {
	// ScheduledEventID is the ID of the activity's ActivityScheduled event.
	ScheduledEventID int64 `json:"scheduled_event_id"`
	// Failure is the last attempt's error.
	Failure Failure `json:"failure"`
	// Attempt is the last attempt (1 is the first).
	Attempt int `json:"attempt"`
}

func (*ActivityFailedAttributes) EventType() EventType { return EventActivityFailed }

func (a *ActivityFailedAttributes) validate() string {
	return positiveID("scheduled_event_id", a.ScheduledEventID)
}

// ActivityTimedOutAttributes are the attributes of [EventActivityTimedOut].
type ActivityTimedOutAttributes struct {
	// ScheduledEventID is the ID of the activity's ActivityScheduled event.
	ScheduledEventID int64 `json:"scheduled_event_id"`
	// TimeoutType is the timeout that fired: [TimeoutStartToClose],
	// [TimeoutScheduleToClose] or [TimeoutHeartbeat].
	TimeoutType string `json:"timeout_type"`
	// LastFailure is the previous attempt's error, if any.
	LastFailure *Failure `json:"last_failure,omitempty"`
	// Attempt is the last attempt (1 is the first).
	Attempt int `json:"attempt"`
}

func (*ActivityTimedOutAttributes) EventType() EventType { return EventActivityTimedOut }

func (a *ActivityTimedOutAttributes) validate() string {
	return positiveID("scheduled_event_id", a.ScheduledEventID)
}

// ActivityCanceledAttributes are the attributes of [EventActivityCanceled].
type ActivityCanceledAttributes struct {
	// ScheduledEventID is the ID of the activity's ActivityScheduled event.
	ScheduledEventID int64 `json:"scheduled_event_id"`
	// Details is an optional payload given by whoever cancelled it.
	Details Payload `json:"details,omitempty"`
	// Attempt is the last attempt (1 is the first).
	Attempt int `json:"attempt"`
}

func (*ActivityCanceledAttributes) EventType() EventType { return EventActivityCanceled }

func (a *ActivityCanceledAttributes) validate() string {
	return positiveID("scheduled_event_id", a.ScheduledEventID)
}

// MarkerRecordedAttributes are the attributes of [EventMarkerRecorded].
type MarkerRecordedAttributes struct {
	// Name says what recorded the marker, e.g. [MarkerSideEffect].
	Name string `json:"name"`
	// Data is the recorded value.
	Data Payload `json:"data"`
}

func (*MarkerRecordedAttributes) EventType() EventType { return EventMarkerRecorded }

func (a *MarkerRecordedAttributes) validate() string { return required("name", a.Name) }

// WorkflowCompletedAttributes are the attributes of [EventWorkflowCompleted].
type WorkflowCompletedAttributes struct {
	// Result is the workflow's encoded result.
	Result Payload `json:"result"`
}

func (*WorkflowCompletedAttributes) EventType() EventType { return EventWorkflowCompleted }

// WorkflowFailedAttributes are the attributes of [EventWorkflowFailed].
type WorkflowFailedAttributes struct {
	// Failure is the error the workflow returned.
	Failure Failure `json:"failure"`
}

func (*WorkflowFailedAttributes) EventType() EventType { return EventWorkflowFailed }

// CancelRequestedAttributes are the attributes of [EventCancelRequested].
type CancelRequestedAttributes struct {
	// Reason says why, for people.
	Reason string `json:"reason,omitempty"`
}

func (*CancelRequestedAttributes) EventType() EventType { return EventCancelRequested }

// ActivityCancelRequestedAttributes are the attributes of
// [EventActivityCancelRequested].
type ActivityCancelRequestedAttributes struct {
	// ScheduledEventID is the ID of the activity's ActivityScheduled event.
	ScheduledEventID int64 `json:"scheduled_event_id"`
}

func (*ActivityCancelRequestedAttributes) EventType() EventType { return EventActivityCancelRequested }

func (a *ActivityCancelRequestedAttributes) validate() string {
	return positiveID("scheduled_event_id", a.ScheduledEventID)
}

// WorkflowCanceledAttributes are the attributes of [EventWorkflowCanceled].
type WorkflowCanceledAttributes struct {
	// Failure is the error the workflow returned (it matches
	// workflow.ErrCanceled).
	Failure Failure `json:"failure"`
}

func (*WorkflowCanceledAttributes) EventType() EventType { return EventWorkflowCanceled }

// TimerStartedAttributes are the attributes of [EventTimerStarted].
type TimerStartedAttributes struct {
	// Duration is how long the workflow asked to wait.
	Duration Duration `json:"duration"`
	// FireAt is when the timer fires: the task's time plus Duration. The
	// worker makes a TimerFired input at that time.
	FireAt time.Time `json:"fire_at"`
}

func (*TimerStartedAttributes) EventType() EventType { return EventTimerStarted }

func (a *TimerStartedAttributes) validate() string {
	switch {
	case a.Duration <= 0:
		return "duration must be positive"
	case a.FireAt.IsZero():
		return "fire_at is required"
	}
	return ""
}

// TimerFiredAttributes are the attributes of [EventTimerFired].
type TimerFiredAttributes struct {
	// StartedEventID is the ID of the timer's TimerStarted event.
	StartedEventID int64 `json:"started_event_id"`
}

func (*TimerFiredAttributes) EventType() EventType { return EventTimerFired }

func (a *TimerFiredAttributes) validate() string {
	return positiveID("started_event_id", a.StartedEventID)
}

// TimerCanceledAttributes are the attributes of [EventTimerCanceled].
type TimerCanceledAttributes struct {
	// StartedEventID is the ID of the timer's TimerStarted event.
	StartedEventID int64 `json:"started_event_id"`
}

func (*TimerCanceledAttributes) EventType() EventType { return EventTimerCanceled }

func (a *TimerCanceledAttributes) validate() string {
	return positiveID("started_event_id", a.StartedEventID)
}

// WorkflowContinuedAsNewAttributes are the attributes of
// [EventWorkflowContinuedAsNew]: what the next run starts with.
type WorkflowContinuedAsNewAttributes struct {
	// Kind is the next run's workflow type.
	Kind string `json:"kind"`
	// Args are the next run's encoded args.
	Args Payload `json:"args"`
}

func (*WorkflowContinuedAsNewAttributes) EventType() EventType { return EventWorkflowContinuedAsNew }

func (a *WorkflowContinuedAsNewAttributes) validate() string { return required("kind", a.Kind) }

// SignalReceivedAttributes are the attributes of [EventSignalReceived].
type SignalReceivedAttributes struct {
	// Kind is the signal type: the Kind() of its args.
	Kind string `json:"kind"`
	// Args are the signal's encoded args.
	Args Payload `json:"args"`
	// RequestID is the sender's request ID: a signal whose request ID is
	// already in the run's history is a retry and is dropped.
	RequestID string `json:"request_id,omitempty"`
	// Headers are the sender's client.SignalInfo.Headers (a trace context):
	// for telemetry, never read by workflow code.
	Headers map[string]string `json:"headers,omitempty"`
}

func (*SignalReceivedAttributes) EventType() EventType { return EventSignalReceived }

func (a *SignalReceivedAttributes) validate() string { return required("kind", a.Kind) }

// UpdateAcceptedAttributes are the attributes of [EventUpdateAccepted].
type UpdateAcceptedAttributes struct {
	// UpdateID identifies the update (the caller's request ID).
	UpdateID string `json:"update_id"`
	// Kind is the update type: the Kind() of its args.
	Kind string `json:"kind"`
	// Args are the update's encoded args.
	Args Payload `json:"args"`
}

func (*UpdateAcceptedAttributes) EventType() EventType { return EventUpdateAccepted }

func (a *UpdateAcceptedAttributes) validate() string {
	return cmp.Or(required("update_id", a.UpdateID), required("kind", a.Kind))
}

// UpdateCompletedAttributes are the attributes of [EventUpdateCompleted].
type UpdateCompletedAttributes struct {
	// UpdateID identifies the update.
	UpdateID string `json:"update_id"`
	// Result is the handler's encoded result, when it returned no error.
	Result Payload `json:"result,omitempty"`
	// Failure is the handler's error, if it returned one.
	Failure *Failure `json:"failure,omitempty"`
}

func (*UpdateCompletedAttributes) EventType() EventType { return EventUpdateCompleted }

func (a *UpdateCompletedAttributes) validate() string { return required("update_id", a.UpdateID) }

// Parent-close policies of child workflows.
const (
	// ParentCloseTerminate terminates a running child when its parent closes.
	ParentCloseTerminate = "terminate"
	// ParentCloseRequestCancel asks a running child to cancel when its parent
	// closes.
	ParentCloseRequestCancel = "request_cancel"
	// ParentCloseAbandon leaves a running child alone when its parent closes.
	ParentCloseAbandon = "abandon"
)

// ChildWorkflowScheduledAttributes are the attributes of
// [EventChildWorkflowScheduled]: everything the worker needs to start the
// child, in the same transaction.
type ChildWorkflowScheduledAttributes struct {
	// Kind is the child's workflow type.
	Kind string `json:"kind"`
	// Args are the child's encoded args.
	Args Payload `json:"args"`
	// WorkflowID is the child's workflow ID.
	WorkflowID string `json:"workflow_id"`
	// Queue is the River queue of the child's workflow tasks; empty means
	// the parent's.
	Queue string `json:"queue,omitempty"`
	// ParentClosePolicy is what happens to the child if the parent closes
	// first: [ParentCloseTerminate], [ParentCloseRequestCancel] or
	// [ParentCloseAbandon].
	ParentClosePolicy string `json:"parent_close_policy"`
	// RunTimeout bounds the child's run; 0 means none.
	RunTimeout Duration `json:"run_timeout,omitempty"`
}

func (*ChildWorkflowScheduledAttributes) EventType() EventType { return EventChildWorkflowScheduled }

func (a *ChildWorkflowScheduledAttributes) validate() string {
	return cmp.Or(required("kind", a.Kind), required("workflow_id", a.WorkflowID))
}

// ChildWorkflowCompletedAttributes are the attributes of
// [EventChildWorkflowCompleted].
type ChildWorkflowCompletedAttributes struct {
	// ScheduledEventID is the child's ChildWorkflowScheduled event.
	ScheduledEventID int64 `json:"scheduled_event_id"`
	// RunID is the child's run (its last, if it continued as new).
	RunID string `json:"run_id,omitempty"`
	// Result is the child's encoded result.
	Result Payload `json:"result"`
}

func (*ChildWorkflowCompletedAttributes) EventType() EventType { return EventChildWorkflowCompleted }

func (a *ChildWorkflowCompletedAttributes) validate() string {
	return positiveID("scheduled_event_id", a.ScheduledEventID)
}

// ChildWorkflowFailedAttributes are the attributes of
// [EventChildWorkflowFailed].
type ChildWorkflowFailedAttributes struct {
	// ScheduledEventID is the child's ChildWorkflowScheduled event.
	ScheduledEventID int64 `json:"scheduled_event_id"`
	// RunID is the child's run, if it started.
	RunID string `json:"run_id,omitempty"`
	// State is how the child ended: failed, cancelled, terminated,
	// timed_out, or not_started.
	State string `json:"state"`
	// Failure says why.
	Failure Failure `json:"failure"`
}

func (*ChildWorkflowFailedAttributes) EventType() EventType { return EventChildWorkflowFailed }

func (a *ChildWorkflowFailedAttributes) validate() string {
	return positiveID("scheduled_event_id", a.ScheduledEventID)
}

// required is the validation of a string field that must be set.
func required(name, value string) string {
	if value == "" {
		return name + " is required"
	}
	return ""
}

// positiveID is the validation of an event ID that attributes refer to.
func positiveID(name string, id int64) string {
	if id <= 0 {
		return name + " must be positive"
	}
	return ""
}

// NewEvent encodes attrs into an event of their type with the given ID and
// time. IDs of inputs not yet numbered are 0.
func NewEvent(id int64, at time.Time, attrs Attributes) (Event, error) {
	var buf [256]byte // most ActivityScheduled attributes fit: their bytes are copied out of it
	if a, ok := attrs.(*ActivityScheduledAttributes); ok {
		if raw, ok := a.appendCanonical(buf[:0]); ok {
			return Event{ID: id, Type: EventActivityScheduled, Attributes: bytes.Clone(raw), Time: at}, nil
		}
	}
	raw, err := json.Marshal(attrs)
	if err != nil {
		return Event{}, fmt.Errorf("encoding %s attributes: %w", attrs.EventType(), err)
	}
	return Event{ID: id, Type: attrs.EventType(), Attributes: raw, Time: at}, nil
}

// NewBoundary is NewEvent(id, now, &WorkflowTaskStartedAttributes{Now: now,
// Attempt: attempt}), the same bytes, encoded without reflection: every
// workflow task appends one.
func NewBoundary(id int64, now time.Time, attempt int) (Event, error) {
	raw := append(make([]byte, 0, 64), `{"now":"`...)
	raw, err := now.AppendText(raw) // as Time.MarshalJSON, unquoted; nothing in it to escape
	if err != nil {
		return NewEvent(id, now, &WorkflowTaskStartedAttributes{Now: now, Attempt: attempt}) // its error
	}
	raw = append(raw, '"')
	if attempt != 0 {
		raw = strconv.AppendInt(append(raw, `,"attempt":`...), int64(attempt), 10)
	}
	raw = append(raw, '}')
	return Event{ID: id, Type: EventWorkflowTaskStarted, Attributes: raw, Time: now}, nil
}

// attributeTypes are the attributes type of every event type.
var attributeTypes = func() map[EventType]reflect.Type {
	types := map[EventType]reflect.Type{}
	for _, attrs := range []Attributes{
		&WorkflowStartedAttributes{},
		&WorkflowTaskStartedAttributes{},
		&ActivityScheduledAttributes{},
		&ActivityCompletedAttributes{},
		&ActivityFailedAttributes{},
		&ActivityTimedOutAttributes{},
		&ActivityCanceledAttributes{},
		&MarkerRecordedAttributes{},
		&WorkflowCompletedAttributes{},
		&WorkflowFailedAttributes{},
		&CancelRequestedAttributes{},
		&ActivityCancelRequestedAttributes{},
		&WorkflowCanceledAttributes{},
		&TimerStartedAttributes{},
		&TimerFiredAttributes{},
		&TimerCanceledAttributes{},
		&SignalReceivedAttributes{},
		&WorkflowContinuedAsNewAttributes{},
		&UpdateAcceptedAttributes{},
		&UpdateCompletedAttributes{},
		&ChildWorkflowScheduledAttributes{},
		&ChildWorkflowCompletedAttributes{},
		&ChildWorkflowFailedAttributes{},
	} {
		types[attrs.EventType()] = reflect.TypeOf(attrs).Elem()
	}
	return types
}()

// DecodeAttributes decodes the attributes of e into the typed struct of its
// type (a pointer, e.g. *ActivityScheduledAttributes) and validates them. The
// error matches [ErrInvalidEvent].
func DecodeAttributes(e Event) (Attributes, error) {
	t, ok := attributeTypes[e.Type]
	if !ok {
		return nil, &InvalidEventError{ID: e.ID, Type: e.Type, Reason: "unknown event type"}
	}
	attrs, ok := decodeCanonical(e.Type, e.Attributes)
	if !ok {
		attrs = reflect.New(t).Interface().(Attributes) //nolint:forcetypeassert // every type in attributeTypes is
		if len(e.Attributes) == 0 {
			return nil, &InvalidEventError{ID: e.ID, Type: e.Type, Reason: "attributes are missing"}
		}
		if err := json.Unmarshal(e.Attributes, attrs); err != nil {
			return nil, &InvalidEventError{ID: e.ID, Type: e.Type, Reason: "decoding attributes", Err: err}
		}
	}
	if v, ok := attrs.(validator); ok && v.validate() != "" {
		return nil, &InvalidEventError{ID: e.ID, Type: e.Type, Reason: v.validate()}
	}
	return attrs, nil
}

// Decode decodes the attributes of e as T, which must be the attributes
// type of e.Type (for example *ActivityCompletedAttributes). The error matches
// [ErrInvalidEvent].
func Decode[T Attributes](e Event) (T, error) {
	var zero T
	attrs, err := DecodeAttributes(e)
	if err != nil {
		return zero, err
	}
	typed, ok := attrs.(T)
	if !ok {
		return zero, &InvalidEventError{ID: e.ID, Type: e.Type, Reason: fmt.Sprintf("attributes are %T, not %T", attrs, zero)}
	}
	return typed, nil
}
