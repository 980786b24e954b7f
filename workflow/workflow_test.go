package workflow

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirhq/weir/internal/history"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestErrors(t *testing.T) {
	t.Parallel()

	t.Run("ActivityErrorUnwrapsToApplicationError", func(t *testing.T) {
		t.Parallel()
		app := &ApplicationError{Message: "declined", Type: "CardDeclined", Cause: errors.New("issuer")}
		err := fmt.Errorf("charging: %w", &ActivityError{Attempt: 2, Cause: app, Kind: "charge", ScheduledEventID: 3})
		var got *ApplicationError
		require.ErrorAs(t, err, &got)
		require.Equal(t, "CardDeclined", got.Type)
		require.EqualError(t, err, "charging: activity charge (event 3, attempt 2): declined: issuer")
	})
	t.Run("NonDeterminismErrorIs", func(t *testing.T) {
		t.Parallel()
		err := fmt.Errorf("task: %w", &NonDeterminismError{EventID: 5, Expected: "A", Got: "B"})
		require.ErrorIs(t, err, ErrNonDeterminism)
		require.EqualError(t, err, "task: workflow: non-deterministic code at event 5: history has A, code did B")
	})
	t.Run("PanicErrorIs", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, &PanicError{Value: "x"}, ErrPanic)
		require.EqualError(t, &PanicError{Value: "x"}, "workflow: panic: x")
	})
	t.Run("TimeoutErrorIs", func(t *testing.T) {
		t.Parallel()
		err := &TimeoutError{TimeoutType: "Heartbeat", LastFailure: errors.New("slow")}
		require.ErrorIs(t, err, ErrTimeout)
		require.EqualError(t, err, "activity timed out (Heartbeat), last failure: slow")
	})
	t.Run("ErrorFromFailure", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, errorFromFailure(nil))
		err := errorFromFailure(&history.Failure{Message: "outer", Type: "T", NonRetryable: true, Details: []byte(`1`), Cause: &history.Failure{Message: "inner"}})
		require.Equal(t, &ApplicationError{
			Message: "outer", Type: "T", NonRetryable: true, Details: []byte(`1`),
			Cause: &ApplicationError{Message: "inner"},
		}, err)
	})
}

func TestMergeActivityOpts(t *testing.T) {
	t.Parallel()

	base := &ActivityOpts{Queue: "q", Priority: 2, RetryPolicy: &RetryPolicy{MaximumAttempts: 3}, StartToCloseTimeout: time.Second}
	require.Same(t, base, mergeActivityOpts(base, nil))
	over := &ActivityOpts{Priority: 4}
	require.Same(t, over, mergeActivityOpts(nil, over))
	require.Equal(t, &ActivityOpts{Queue: "q", Priority: 4, RetryPolicy: &RetryPolicy{MaximumAttempts: 3}, StartToCloseTimeout: time.Second},
		mergeActivityOpts(base, over))
	retry := &RetryPolicy{InitialInterval: time.Minute}
	require.Same(t, retry, mergeActivityOpts(base, &ActivityOpts{RetryPolicy: retry}).RetryPolicy)
}

func TestScheduledAttributes(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		attrs, err := scheduledAttributes("k", []byte(`{}`), nil)
		require.NoError(t, err)
		require.Equal(t, &history.ActivityScheduledAttributes{
			Kind: "k", Args: []byte(`{}`), Queue: QueueDefault, Priority: PriorityDefault,
			StartToCloseTimeout:    history.Duration(StartToCloseTimeoutDefault),
			ScheduleToCloseTimeout: history.Duration(ScheduleToCloseTimeoutDefault),
			HeartbeatTimeout:       history.Duration(HeartbeatTimeoutDefault),
			RetryPolicy: &history.RetryPolicy{
				InitialInterval:    history.Duration(InitialIntervalDefault),
				BackoffCoefficient: BackoffCoefficientDefault,
				MaximumInterval:    history.Duration(MaximumIntervalDefault),
				MaximumAttempts:    MaximumAttemptsDefault,
			},
		}, attrs)
	})

	t.Run("OwnLists", func(t *testing.T) {
		t.Parallel()
		opts := &ActivityOpts{Tags: []string{"tag"}, RetryPolicy: &RetryPolicy{NonRetryableErrorTypes: []string{"E"}}}
		attrs, err := scheduledAttributes("k", []byte(`{}`), opts)
		require.NoError(t, err)
		opts.Tags[0], opts.RetryPolicy.NonRetryableErrorTypes[0] = "other", "F" // the code goes on with its opts
		require.Equal(t, []string{"tag"}, attrs.Tags)
		require.Equal(t, []string{"E"}, attrs.RetryPolicy.NonRetryableErrorTypes)
		require.True(t, attrs.RoundTrips(), "the worker schedules them as they are")
	})

	invalid := map[string]struct {
		kind string
		opts *ActivityOpts
	}{
		"BackoffBelowOne":         {kind: "k", opts: &ActivityOpts{RetryPolicy: &RetryPolicy{BackoffCoefficient: 0.5}}},
		"EmptyKind":               {kind: "", opts: nil},
		"MaxIntervalUnderInitial": {kind: "k", opts: &ActivityOpts{RetryPolicy: &RetryPolicy{InitialInterval: time.Hour}}},
		"NegativeAttempts":        {kind: "k", opts: &ActivityOpts{RetryPolicy: &RetryPolicy{MaximumAttempts: -1}}},
		"NegativeTimeout":         {kind: "k", opts: &ActivityOpts{HeartbeatTimeout: -time.Second}},
		"PriorityTooHigh":         {kind: "k", opts: &ActivityOpts{Priority: 5}},
		"PriorityTooLow":          {kind: "k", opts: &ActivityOpts{Priority: -1}},
	}
	for name, tt := range invalid {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := scheduledAttributes(tt.kind, nil, tt.opts)
			require.ErrorIs(t, err, ErrInvalidActivityOpts)
		})
	}
}

func TestSelectorReceiveCasesRepeat(t *testing.T) {
	t.Parallel()

	ready := readyFunc(func() bool { return true })
	s := (&Selector{}).AddReceive(ready, nil)
	require.True(t, s.HasPending())
	require.NotNil(t, s.pick())
	s.pick().selected = false
	require.True(t, s.HasPending())
}

func TestSelectorPick(t *testing.T) {
	t.Parallel()

	a := &settableFuture[int]{}
	b := &settableFuture[int]{}
	s := &Selector{}
	s.AddFuture(a, nil).AddFuture(b, nil)
	require.Nil(t, s.pick())
	seq := int64(0)
	next := func() int64 { seq++; return seq }
	b.seq, a.seq = next, next
	b.Set(1, nil)
	a.Set(2, nil)
	require.Same(t, b, s.pick().ready, "b became ready first")
	s.cases[1].selected = true
	require.Same(t, a, s.pick().ready)
	require.True(t, s.HasPending())
	s.cases[0].selected = true
	require.False(t, s.HasPending())
}
