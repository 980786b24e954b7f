package coroutine

import (
	"context"
	"time"

	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestScheduler(t *testing.T) {
	t.Parallel()

	t.Run("CloseUnwindsBlockedCoroutinesAndRunsDefers", func(t *testing.T) {
		t.Parallel()

		s := New(0, nil)
		var deferred []string
		s.Spawn(func() {
			defer func() { deferred = append(deferred, "a") }()
			s.Await(func() bool { return false })
		})
		s.Spawn(func() {
			defer func() {
				// Blocking again while unwinding ends the coroutine at once.
				s.Await(func() bool { return false })
				deferred = append(deferred, "never")
			}()
			defer func() { deferred = append(deferred, "b") }()
			s.Await(func() bool { return false })
		})
		require.NoError(t, s.Run(t.Context(), nil))
		require.Equal(t, 2, s.Live())

		s.Close()
		s.Close()
		require.Equal(t, []string{"a", "b"}, deferred)
		require.Equal(t, 0, s.Live())
		require.Error(t, s.Run(t.Context(), nil))
	})

	t.Run("CoroutinesRunOnTheGoroutinesStartStarts", func(t *testing.T) {
		t.Parallel()

		// start runs each coroutine on one goroutine of a pair it keeps,
		// as a pool of goroutines would: the function it is given returns
		// when a coroutine ended, and Close ends a blocked one.
		var returned, started int
		work := make(chan func())
		done := make(chan struct{})
		for range 2 {
			go func() {
				defer func() { done <- struct{}{} }()
				for fn := range work {
					fn()
					returned++ // only once the coroutine's turn is over
				}
			}()
		}
		s := New(0, func(fn func()) { started++; work <- fn })
		ran := 0
		s.Spawn(func() { ran++ })
		s.Spawn(func() { s.Await(func() bool { return false }) })
		require.NoError(t, s.Run(t.Context(), nil))
		require.Equal(t, 2, started)
		require.Equal(t, 1, ran)
		require.Equal(t, 1, s.Live())
		s.Close() // runtime.Goexit ends the blocked coroutine's goroutine
		close(work)
		<-done
		<-done
		require.Equal(t, 1, returned, "the coroutine that returned, returned")
	})

	t.Run("InterleavesInCreationOrder", func(t *testing.T) {
		t.Parallel()

		s := New(0, nil)
		defer s.Close()
		var trace []string
		turn := 0
		for _, name := range []string{"a", "b", "c"} {
			s.Spawn(func() {
				for i := range 2 {
					trace = append(trace, name)
					want := turn + 1
					turn++
					s.Await(func() bool { return turn >= want+2 || i == 1 })
				}
			})
		}
		require.NoError(t, s.Run(t.Context(), nil))
		require.Equal(t, []string{"a", "b", "c", "a", "b", "c"}, trace)
		require.Equal(t, 0, s.Live())
	})

	t.Run("PanicIsReportedWithStack", func(t *testing.T) {
		t.Parallel()

		s := New(0, nil)
		defer s.Close()
		s.Spawn(func() { s.Await(func() bool { return false }) })
		s.Spawn(func() { panicHere() })
		err := s.Run(t.Context(), nil)
		var panicErr *PanicError
		require.ErrorAs(t, err, &panicErr)
		require.Equal(t, "boom", panicErr.Value)
		require.Contains(t, panicErr.Stack, "panicHere")
	})

	t.Run("RunsUntilAllBlocked", func(t *testing.T) {
		t.Parallel()

		s := New(0, nil)
		defer s.Close()
		ready := false
		var got []int
		s.Spawn(func() {
			s.Await(func() bool { return ready })
			got = append(got, 1)
		})
		s.Spawn(func() {
			s.Spawn(func() { got = append(got, 3) })
			ready = true
			got = append(got, 2)
		})
		require.NoError(t, s.Run(t.Context(), nil))
		require.Equal(t, []int{2, 3, 1}, got)
		require.Equal(t, 0, s.Live())
	})

	t.Run("ResumesOnLaterRun", func(t *testing.T) {
		t.Parallel()

		s := New(0, nil)
		defer s.Close()
		ready := false
		done := false
		s.Spawn(func() {
			s.Await(func() bool { return ready })
			done = true
		})
		require.NoError(t, s.Run(t.Context(), nil))
		require.False(t, done)
		ready = true
		require.NoError(t, s.Run(t.Context(), nil))
		require.True(t, done)
	})

	t.Run("AwaitOutsideCoroutinePanics", func(t *testing.T) {
		t.Parallel()

		require.PanicsWithValue(t, ErrNotInCoroutine, func() { New(0, nil).Await(func() bool { return true }) })
	})
}

func panicHere() { panic("boom") }

func TestSchedulerStop(t *testing.T) {
	t.Parallel()

	s := New(0, nil)
	var ran []string
	first := false
	s.Spawn(func() { first = true; ran = append(ran, "first") })
	s.Spawn(func() { ran = append(ran, "never started") })
	require.NoError(t, s.Run(t.Context(), func() bool { return first }))
	require.Equal(t, []string{"first"}, ran)
	s.Close()
	require.Equal(t, []string{"first"}, ran)
}

func TestSchedulerAbandonsStuckCoroutine(t *testing.T) {
	t.Parallel()

	t.Run("DeadlockTimeout", func(t *testing.T) {
		t.Parallel()

		s := New(100*time.Millisecond, nil) // generous: the parked coroutine must yield within it
		release := make(chan struct{})
		unwound := make(chan struct{})
		s.Spawn(func() { s.Await(func() bool { return false }) }) // parked: unwound by Close
		s.Spawn(func() {
			defer close(unwound)
			blockedOnAChannel(release) // not the scheduler: a deadlock
			s.Await(func() bool { return true })
			t.Error("an abandoned coroutine must not run on")
		})
		err := s.Run(t.Context(), nil)
		require.ErrorIs(t, err, ErrDeadlock)
		var deadlockErr *DeadlockError
		require.ErrorAs(t, err, &deadlockErr)
		require.Equal(t, 100*time.Millisecond, deadlockErr.Timeout)
		require.Contains(t, deadlockErr.Stack, "blockedOnAChannel")
		require.Error(t, s.Run(t.Context(), nil))

		s.Close()
		close(release)
		<-unwound
	})

	t.Run("ContextDone", func(t *testing.T) {
		t.Parallel()

		s := New(0, nil)
		ctx, cancel := context.WithCancel(t.Context())
		release := make(chan struct{})
		unwound := make(chan struct{})
		s.Spawn(func() {
			defer close(unwound)
			cancel()
			<-release
			s.Spawn(func() { t.Error("an abandoned coroutine must not spawn") })
		})
		err := s.Run(ctx, nil)
		require.ErrorIs(t, err, context.Canceled)
		s.Close()
		close(release)
		<-unwound
	})
}

func blockedOnAChannel(c chan struct{}) { <-c }

// TestSchedulerDeadlineBetweenRuns: a Run gives back the timer of its
// deadline, stopped; a scheduler between runs holds none.
func TestSchedulerDeadlineBetweenRuns(t *testing.T) {
	t.Parallel()

	s := New(time.Minute, nil)
	ready := false
	s.Spawn(func() { s.Await(func() bool { return ready }) })
	require.NoError(t, s.Run(t.Context(), nil))
	require.Nil(t, s.deadline)
	ready = true
	require.NoError(t, s.Run(t.Context(), nil))
	require.Nil(t, s.deadline)
	require.Zero(t, s.Live())
	s.Close()
}
