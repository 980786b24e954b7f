package weirtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/weirhq/weir/workflow"
)

// ErrNoDatabase is returned by activity.CompleteTx in an activity that an
// Env runs: there is no database to commit to.
var ErrNoDatabase = errors.New("weirtest: no database in the test environment")

// ActivityCall records one attempt of an activity run by an Env, mocked or
// real.
type ActivityCall struct {
	// Args are the attempt's args, as JSON (activity args always are).
	Args json.RawMessage

	// Attempt is the attempt number, 1 for the first.
	Attempt int

	// Err is what the attempt returned (nil on success).
	Err error

	// Kind is the activity's kind.
	Kind string

	// Mocked reports that a mock answered the attempt, not a registered
	// activity.
	Mocked bool

	// ScheduledEventID is the activity's ActivityScheduled event: with
	// Attempt, which attempt of which activity this was.
	ScheduledEventID int64

	// Time is the simulated time of the attempt.
	Time time.Time
}

// ActivityCalls returns every activity attempt so far, in the order they
// ran.
func (env *Env) ActivityCalls() []ActivityCall {
	return append([]ActivityCall(nil), env.calls...)
}

// ActivityCallsOf returns the attempts of activities of kind A, in the order
// they ran, with their args decoded.
func ActivityCallsOf[A workflow.ActivityArgs](env *Env) []A {
	var zero A
	var out []A
	for _, c := range env.calls {
		if c.Kind != zero.Kind() {
			continue
		}
		var args A
		if err := json.Unmarshal(c.Args, &args); err != nil {
			env.fatal("decoding args of activity %s as %T: %v", c.Kind, args, err)
			return nil
		}
		out = append(out, args)
	}
	return out
}

// answer is the outcome of one attempt.
type answer struct {
	delay  time.Duration
	err    error
	result []byte
}

// mock is an ActivityMock with its type erased.
type mock interface {
	answer(ctx context.Context, args []byte) (answer, bool)
	kind() string
	unmet() string
}

// ActivityMock answers the attempts of activities of kind A in place of the
// real activity. Make one with [OnActivity] and set its answer with Return
// or ReturnFunc.
type ActivityMock[A workflow.ActivityArgs] struct {
	env *Env

	after  time.Duration
	calls  int
	err    error
	fn     func(ctx context.Context, args A) (any, error)
	match  *A
	result any
	set    bool
	times  int
}

// OnActivity mocks the activities of args' kind. A zero args matches every
// attempt of the kind; any other value only attempts whose args are equal
// (reflect.DeepEqual after decoding). When several mocks match an attempt,
// the first registered that still has calls left (see Times) answers it;
// when none does, the activity registered with RegisterActivity runs, and
// without one the activity fails, not retried.
//
//	weirtest.OnActivity(env, ChargeArgs{}).Return(Charge{ID: "ch_1"}, nil)
func OnActivity[A workflow.ActivityArgs](env *Env, args A) *ActivityMock[A] {
	m := &ActivityMock[A]{env: env}
	if !reflect.ValueOf(&args).Elem().IsZero() {
		m.match = &args
	}
	env.mocks = append(env.mocks, m)
	return m
}

// Return makes every matching attempt return result (encoded with the
// Env's codec, decoded by the workflow into its own type) and err. An error
// fails the attempt: it is retried under the activity's retry policy, on
// the simulated clock, unless it is non-retryable (a
// *workflow.ApplicationError with NonRetryable, or a type the policy lists).
// Return a *workflow.TimeoutError to simulate a timeout.
func (m *ActivityMock[A]) Return(result any, err error) *ActivityMock[A] {
	m.result, m.err, m.fn, m.set = result, err, nil, true
	return m
}

// ReturnFunc makes every matching attempt call fn. activity.GetInfo(ctx)
// gives the attempt number.
func (m *ActivityMock[A]) ReturnFunc(fn func(ctx context.Context, args A) (any, error)) *ActivityMock[A] {
	m.fn, m.set = fn, true
	return m
}

// Times limits the mock to n attempts; later ones go to the next matching
// mock (or the real activity). AssertExpectations then checks it answered
// exactly n. Without Times, a mock answers every attempt.
func (m *ActivityMock[A]) Times(n int) *ActivityMock[A] {
	if n <= 0 {
		m.env.fatal("ActivityMock.Times(%d): n must be positive", n)
	}
	m.times = n
	return m
}

// After makes each attempt take d of simulated time: its outcome (and any
// retry's backoff) comes d after it started. Defaults to 0: outcomes arrive
// in the next workflow task.
func (m *ActivityMock[A]) After(d time.Duration) *ActivityMock[A] {
	m.after = d
	return m
}

// Calls returns how many attempts the mock answered.
func (m *ActivityMock[A]) Calls() int { return m.calls }

func (m *ActivityMock[A]) kind() string {
	var zero A
	return zero.Kind()
}

func (m *ActivityMock[A]) answer(ctx context.Context, encoded []byte) (answer, bool) {
	if m.times > 0 && m.calls >= m.times {
		return answer{}, false
	}
	var args A
	if err := json.Unmarshal(encoded, &args); err != nil {
		return answer{err: &workflow.ApplicationError{
			Message: fmt.Sprintf("weirtest: decoding args of activity %s as %T: %v", m.kind(), args, err), NonRetryable: true, Type: "Payload",
		}}, true
	}
	if m.match != nil && !reflect.DeepEqual(*m.match, args) {
		return answer{}, false
	}
	m.calls++
	ans := answer{delay: m.after}
	var result any
	switch {
	case !m.set:
		ans.err = &workflow.ApplicationError{
			Message: fmt.Sprintf("weirtest: the mock of activity %s has no Return or ReturnFunc", m.kind()), NonRetryable: true, Type: "MockIncomplete",
		}
		return ans, true
	case m.fn != nil:
		result, ans.err = m.fn(ctx, args)
	default:
		result, ans.err = m.result, m.err
	}
	if ans.err == nil {
		ans.result, ans.err = m.env.encodeResult(m.kind(), result)
	}
	return ans, true
}

func (m *ActivityMock[A]) unmet() string {
	switch {
	case m.times > 0 && m.calls != m.times:
		return fmt.Sprintf("mock of activity %s answered %d attempts, want %d", m.kind(), m.calls, m.times)
	case m.times == 0 && m.calls == 0:
		return fmt.Sprintf("mock of activity %s was never called", m.kind())
	}
	return ""
}

// AssertExpectations fails the test (with Errorf, so every unmet
// expectation is reported) unless every mock was used as expected: exactly n
// attempts for one with Times(n), at least one for the others. It reports
// whether all were met.
func (env *Env) AssertExpectations() bool {
	ok := true
	for _, m := range env.mocks {
		if msg := m.unmet(); msg != "" {
			ok = false
			if env.tb == nil {
				panic("weirtest: " + msg)
			}
			env.tb.Helper()
			env.tb.Errorf("weirtest: %s", msg)
		}
	}
	return ok
}
