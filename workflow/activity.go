package workflow

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"time"

	"github.com/riverqueue/river"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay/env"
	"github.com/weirhq/weir/internal/task"
)

// Defaults of [ActivityOpts] and [RetryPolicy].
const (
	// BackoffCoefficientDefault multiplies the retry delay after each attempt.
	BackoffCoefficientDefault = 2.0
	// HeartbeatTimeoutDefault is 0: heartbeats aren't required.
	HeartbeatTimeoutDefault time.Duration = 0
	// InitialIntervalDefault is the delay before the first retry.
	InitialIntervalDefault = time.Second
	// MaximumAttemptsDefault matches River's default MaxAttempts.
	MaximumAttemptsDefault = 25
	// MaximumIntervalDefault caps the retry delay (100 × InitialIntervalDefault).
	MaximumIntervalDefault = 100 * time.Second
	// PriorityDefault is River's default priority.
	PriorityDefault = 1
	// QueueDefault is weir's default River queue ("weir", not River's
	// "default"), which workers serve unless configured.
	QueueDefault = task.QueueDefault
	// ScheduleToCloseTimeoutDefault is 0: all attempts together are unbounded.
	ScheduleToCloseTimeoutDefault time.Duration = 0
	// StartToCloseTimeoutDefault bounds one attempt; it matches River's
	// default job timeout.
	StartToCloseTimeoutDefault = time.Minute
)

// ActivityArgs are an activity's arguments. Like River's JobArgs, Kind names
// the activity; it is the kind of the River job that runs it, so it must be
// stable. Args are encoded with the payload codec (JSON by default).
type ActivityArgs interface {
	// Kind names the activity type; it is persisted.
	Kind() string
}

// ActivityOpts are the options of one activity. A nil *ActivityOpts, or a
// zero field, takes the value from the options attached to the Context with
// [WithActivityOpts], then from the workflow's [Opts], then the documented
// default. Options are recorded in history when the activity is scheduled.
type ActivityOpts struct {
	// HeartbeatTimeout is the longest gap allowed between the activity's
	// heartbeats before the attempt is considered lost. Defaults to 0 (no
	// heartbeats required).
	HeartbeatTimeout time.Duration

	// Priority is the River priority, 1 (first) to 4 (last). Defaults to
	// the priority of the args' InsertOpts, else 1.
	Priority int

	// Queue is the River queue the activity's job is inserted into. Defaults
	// to the queue of the args' InsertOpts (River's JobArgsWithInsertOpts),
	// else QueueDefault.
	Queue string

	// RetryPolicy says how failed attempts are retried. Zero fields take
	// their defaults. Defaults to the default RetryPolicy.
	RetryPolicy *RetryPolicy

	// ScheduleToCloseTimeout bounds the activity from scheduling to its
	// outcome, all attempts included. Defaults to 0 (unbounded).
	ScheduleToCloseTimeout time.Duration

	// StartToCloseTimeout bounds one attempt. Defaults to 1 minute.
	StartToCloseTimeout time.Duration

	// Tags are the River tags of the activity's job. Defaults to the tags
	// of the args' InsertOpts, else none.
	Tags []string
}

// RetryPolicy says how an activity's failed attempts are retried: the n-th
// retry waits InitialInterval × BackoffCoefficient^(n-1), capped at
// MaximumInterval.
type RetryPolicy struct {
	// BackoffCoefficient multiplies the delay after each retry; at least 1.
	// Defaults to 2.
	BackoffCoefficient float64

	// InitialInterval is the delay before the first retry. Defaults to 1
	// second.
	InitialInterval time.Duration

	// MaximumAttempts caps the attempts, the first included. Defaults to 25.
	MaximumAttempts int

	// MaximumInterval caps the delay between attempts. Defaults to 100
	// seconds.
	MaximumInterval time.Duration

	// NonRetryableErrorTypes lists error types (ApplicationError.Type, or
	// the Go type of other errors such as "*errors.errorString") that are
	// never retried. Defaults to none.
	NonRetryableErrorTypes []string
}

type activityOptsKey struct{}

// WithActivityOpts returns a copy of ctx whose activities default to opts.
func WithActivityOpts(ctx Context, opts *ActivityOpts) Context {
	return WithValue(ctx, activityOptsKey{}, mergeActivityOpts(activityOptsOf(ctx), opts))
}

func activityOptsOf(ctx Context) *ActivityOpts {
	opts, _ := ctx.Value(activityOptsKey{}).(*ActivityOpts)
	return opts
}

// mergeActivityOpts returns base overridden by the non-zero fields of over.
func mergeActivityOpts(base, over *ActivityOpts) *ActivityOpts {
	switch {
	case base == nil:
		return over
	case over == nil:
		return base
	}
	out := *base
	out.HeartbeatTimeout = cmp.Or(over.HeartbeatTimeout, base.HeartbeatTimeout)
	out.Priority = cmp.Or(over.Priority, base.Priority)
	out.Queue = cmp.Or(over.Queue, base.Queue)
	if over.RetryPolicy != nil {
		out.RetryPolicy = over.RetryPolicy
	}
	out.ScheduleToCloseTimeout = cmp.Or(over.ScheduleToCloseTimeout, base.ScheduleToCloseTimeout)
	out.StartToCloseTimeout = cmp.Or(over.StartToCloseTimeout, base.StartToCloseTimeout)
	if over.Tags != nil {
		out.Tags = over.Tags
	}
	return &out
}

// withInsertOpts fills what opts leave unset from the InsertOpts of args
// that declare them (River's JobArgsWithInsertOpts), as River's insert
// does: the queue, priority, tags and max attempts (the retry policy's
// MaximumAttempts) an args type asks for hold when it runs as an activity.
func withInsertOpts(args ActivityArgs, opts *ActivityOpts) *ActivityOpts {
	withOpts, ok := args.(river.JobArgsWithInsertOpts)
	if !ok {
		return opts
	}
	insert := withOpts.InsertOpts()
	out := mergeActivityOpts(&ActivityOpts{Priority: insert.Priority, Queue: insert.Queue, Tags: insert.Tags}, opts)
	if insert.MaxAttempts > 0 && (out.RetryPolicy == nil || out.RetryPolicy.MaximumAttempts == 0) {
		retry := RetryPolicy{}
		if out.RetryPolicy != nil {
			retry = *out.RetryPolicy
		}
		retry.MaximumAttempts = insert.MaxAttempts
		out.RetryPolicy = &retry
	}
	return out
}

// scheduledAttributes applies defaults to opts, validates them and returns
// the attributes of the ActivityScheduled event. They own their lists: the
// worker reads them once the code ran on, and may have changed opts'.
func scheduledAttributes(kind string, args []byte, opts *ActivityOpts) (*history.ActivityScheduledAttributes, error) {
	if opts == nil {
		opts = &ActivityOpts{}
	}
	retry := opts.RetryPolicy
	if retry == nil {
		retry = &RetryPolicy{}
	}
	scheduled := &struct { // one allocation for both
		attrs history.ActivityScheduledAttributes
		retry history.RetryPolicy
	}{
		attrs: history.ActivityScheduledAttributes{
			Kind:                   kind,
			Args:                   args,
			Queue:                  cmp.Or(opts.Queue, QueueDefault),
			Priority:               cmp.Or(opts.Priority, PriorityDefault),
			StartToCloseTimeout:    history.Duration(cmp.Or(opts.StartToCloseTimeout, StartToCloseTimeoutDefault)),
			ScheduleToCloseTimeout: history.Duration(cmp.Or(opts.ScheduleToCloseTimeout, ScheduleToCloseTimeoutDefault)),
			HeartbeatTimeout:       history.Duration(cmp.Or(opts.HeartbeatTimeout, HeartbeatTimeoutDefault)),
			Tags:                   slices.Clone(opts.Tags),
		},
		retry: history.RetryPolicy{
			InitialInterval:        history.Duration(cmp.Or(retry.InitialInterval, InitialIntervalDefault)),
			BackoffCoefficient:     cmp.Or(retry.BackoffCoefficient, BackoffCoefficientDefault),
			MaximumInterval:        history.Duration(cmp.Or(retry.MaximumInterval, MaximumIntervalDefault)),
			MaximumAttempts:        cmp.Or(retry.MaximumAttempts, MaximumAttemptsDefault),
			NonRetryableErrorTypes: slices.Clone(retry.NonRetryableErrorTypes),
		},
	}
	attrs := &scheduled.attrs
	attrs.RetryPolicy = &scheduled.retry
	var problem string
	switch {
	case kind == "":
		problem = "Kind() is empty"
	case attrs.Priority < 1 || attrs.Priority > 4:
		problem = fmt.Sprintf("Priority %d is not between 1 and 4", attrs.Priority)
	case attrs.StartToCloseTimeout < 0, attrs.ScheduleToCloseTimeout < 0, attrs.HeartbeatTimeout < 0:
		problem = "timeouts must not be negative"
	case attrs.RetryPolicy.BackoffCoefficient < 1:
		problem = fmt.Sprintf("RetryPolicy.BackoffCoefficient %v is below 1", attrs.RetryPolicy.BackoffCoefficient)
	case attrs.RetryPolicy.InitialInterval < 0, attrs.RetryPolicy.MaximumInterval < attrs.RetryPolicy.InitialInterval:
		problem = "RetryPolicy intervals must not be negative and MaximumInterval must be at least InitialInterval"
	case attrs.RetryPolicy.MaximumAttempts < 0:
		problem = "RetryPolicy.MaximumAttempts must not be negative"
	case !validTags(attrs.Tags):
		problem = fmt.Sprintf("Tags %q: each must be 3–255 letters, digits, '_' or '-' (River's tag format), starting and ending with a letter, digit or '_'", attrs.Tags)
	}
	if problem != "" {
		return nil, fmt.Errorf("%w: activity %q: %s", ErrInvalidActivityOpts, kind, problem)
	}
	return attrs, nil
}

// tagRE is River's tag format (river.InsertOpts.Tags).
var tagRE = regexp.MustCompile(`\A[\w][\w\-]+[\w]\z`)

func validTags(tags []string) bool {
	for _, tag := range tags {
		if len(tag) > 255 || !tagRE.MatchString(tag) {
			return false
		}
	}
	return true
}

// ExecuteActivity schedules the activity args.Kind() with args and returns a
// future of its result, of type R. Options come from opts, then the Context
// ([WithActivityOpts]), then the defaults.
//
// The activity runs as a River job of kind args.Kind(), retried per the
// retry policy outside the workflow; the future gets only the final outcome:
// the result, or an [*ActivityError] wrapping an [*ApplicationError], a
// [*TimeoutError] or [ErrCanceled]. When ctx is cancelled (see [WithCancel])
// before the outcome, the activity is cancelled and the future fails at once
// with ErrCanceled. Invalid options, args that can't be encoded or are too
// large ([*PayloadTooLargeError]) or a ctx already cancelled give a future
// that is ready at once with an error, and nothing is scheduled.
//
// When the worker has the activity registered, R must be able to hold its
// result: the activity's result type (or a pointer to it), an interface it
// implements, json.RawMessage or map[string]any. Otherwise the future is
// ready at once with an [*ActivityResultTypeError] naming both types, and
// nothing is scheduled. Workers of a run must agree on their activities'
// result types, as on the workflow's code.
func ExecuteActivity[R any](ctx Context, args ActivityArgs, opts *ActivityOpts) Future[R] {
	e := envOf(ctx)
	kind := ""
	if args != nil {
		kind = args.Kind()
	}
	if err := ctx.Err(); err != nil {
		return readyFuture[R](fmt.Errorf("activity %q not scheduled: %w", kind, err))
	}
	if err := checkResultType[R](e, kind); err != nil {
		return readyFuture[R](err)
	}
	// Activity args are River job args: always plain JSON, whatever the
	// payload codec, so any River worker of the kind can read them.
	encoded, err := json.Marshal(args)
	if err != nil {
		return readyFuture[R](fmt.Errorf("encoding args of activity %q: %w", kind, err))
	}
	if err := checkPayload(e.MaxPayloadBytes(), encoded, func() string { return fmt.Sprintf("args of activity %q", kind) }); err != nil {
		return readyFuture[R](err)
	}
	attrs, err := scheduledAttributes(kind, encoded, withInsertOpts(args, mergeActivityOpts(activityOptsOf(ctx), opts)))
	if err != nil {
		return readyFuture[R](err)
	}
	p := e.ScheduleActivity(attrs, ctx)
	return &promiseFuture[R]{promise: p, decode: activityOutcome[R]}
}

// activityOutcome decodes the outcome of an activity's promise into value.
func activityOutcome[R any](p *env.Promise, codec env.Codec, value *R) error {
	actErr := func(attempt int, cause error) error {
		return &ActivityError{Attempt: attempt, Cause: cause, Kind: p.Kind, ScheduledEventID: p.EventID}
	}
	switch outcome := p.Outcome().(type) {
	case *history.ActivityCompletedAttributes:
		if err := codec.Decode(outcome.Result, value); err != nil {
			return fmt.Errorf("decoding result of activity %s (event %d) as %T: %w", p.Kind, p.EventID, *value, err)
		}
		return nil
	case *history.ActivityFailedAttributes:
		return actErr(outcome.Attempt, errorFromFailure(&outcome.Failure))
	case *history.ActivityTimedOutAttributes:
		return actErr(outcome.Attempt, &TimeoutError{LastFailure: errorFromFailure(outcome.LastFailure), TimeoutType: outcome.TimeoutType})
	case *history.ActivityCanceledAttributes:
		return actErr(outcome.Attempt, ErrCanceled)
	default:
		return fmt.Errorf("activity %s (event %d): unexpected outcome %T", p.Kind, p.EventID, outcome)
	}
}

// checkResultType returns an *ActivityResultTypeError when the worker has
// the activity of kind registered and R cannot hold its result.
func checkResultType[R any](e env.Env, kind string) error {
	registered, ok := e.ActivityResultType(kind)
	if !ok {
		return nil // registered elsewhere, or a plain River worker
	}
	requested := reflect.TypeFor[R]()
	if resultFits(registered, requested) {
		return nil
	}
	return &ActivityResultTypeError{Kind: kind, Registered: registered.String(), Requested: requested.String()}
}

// resultFits reports whether a result of type registered decodes into
// requested without a type error: the same type up to pointers, an
// interface registered implements, raw JSON or a generic map.
func resultFits(registered, requested reflect.Type) bool {
	if requested == reflect.TypeFor[json.RawMessage]() || requested == reflect.TypeFor[map[string]any]() {
		return true // any JSON (object)
	}
	for registered.Kind() == reflect.Pointer {
		registered = registered.Elem()
	}
	for requested.Kind() == reflect.Pointer {
		requested = requested.Elem()
	}
	if requested.Kind() == reflect.Interface {
		return registered.Implements(requested) || reflect.PointerTo(registered).Implements(requested)
	}
	return registered == requested
}
