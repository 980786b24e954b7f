package gopool

import (
	"bytes"
	"context"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// goid names the calling goroutine.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	for i, c := range buf {
		if c == '[' {
			return string(buf[:i])
		}
	}
	return string(buf)
}

func TestPool(t *testing.T) {
	t.Run("ReusesAGoroutineThatFinished", func(t *testing.T) {
		p := New(time.Minute)
		defer p.Close()
		ran := make(chan string)
		p.Go(func() { ran <- goid() })
		first := <-ran
		var second string
		// The first goroutine returns to wait once fn returned: give it the
		// time to get there.
		require.Eventually(t, func() bool {
			p.Go(func() { ran <- goid() })
			second = <-ran
			return second == first
		}, 5*time.Second, time.Millisecond)
		require.Equal(t, first, second)
	})

	t.Run("StartsAGoroutineWhenNoneWaits", func(t *testing.T) {
		p := New(time.Minute)
		defer p.Close()
		release := make(chan struct{})
		var running sync.WaitGroup
		ids := make(chan string, 3)
		for range 3 {
			running.Add(1)
			p.Go(func() {
				ids <- goid()
				running.Done()
				<-release
			})
		}
		running.Wait() // all three run at once: three goroutines
		close(release)
		seen := map[string]bool{}
		for range 3 {
			seen[<-ids] = true
		}
		require.Len(t, seen, 3)
	})

	t.Run("IdleGoroutinesReturn", func(t *testing.T) {
		p := New(10 * time.Millisecond)
		var ran atomic.Int32
		for range 4 {
			p.Go(func() { ran.Add(1) })
		}
		require.Eventually(t, func() bool { return ran.Load() == 4 }, 5*time.Second, time.Millisecond)
		require.Eventually(t, func() bool { return p.live.Load() == 0 }, 10*time.Second, time.Millisecond,
			"the idle time alone ends them")
	})

	t.Run("CloseEndsWaitingGoroutinesAndRunningOnesOnceDone", func(t *testing.T) {
		p := New(time.Hour)
		release := make(chan struct{})
		p.Go(func() { <-release })
		ran := make(chan struct{})
		p.Go(func() { close(ran) }) // another goroutine, then waiting for an hour
		<-ran
		p.Close()
		require.Eventually(t, func() bool { return p.live.Load() == 1 }, 10*time.Second, time.Millisecond,
			"the waiting one returns at once")
		close(release)
		require.Eventually(t, func() bool { return p.live.Load() == 0 }, 10*time.Second, time.Millisecond,
			"the running one returns once its function did")

		// After Close, functions still run.
		again := make(chan struct{})
		p.Go(func() { close(again) })
		<-again
	})

	t.Run("FunctionsStartWithoutTheLabelsOfTheLast", func(t *testing.T) {
		p := New(time.Minute)
		defer p.Close()
		labelled := make(chan struct{})
		p.live.Add(1)
		go p.loop(func() {
			pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("gopool_test", "leaked")))
			close(labelled)
		})
		<-labelled
		running, release := make(chan struct{}), make(chan struct{})
		p.work <- func() { close(running); <-release } // the same goroutine, next
		<-running
		var profile bytes.Buffer
		require.NoError(t, pprof.Lookup("goroutine").WriteTo(&profile, 1))
		close(release)
		require.Contains(t, profile.String(), "gopool.TestPool")
		require.NotContains(t, profile.String(), "gopool_test", "the first function's labels reached the second")
	})
}
