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
	"unsafe"

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

// TestReserve sends a fresh goroutine down frames that need most of
// StackReserve, with and without Reserve first, and tells by the address
// of one of its locals whether its stack moved (grew) on the way.
func TestReserve(t *testing.T) {
	moved := func(reserve bool) bool {
		result := make(chan bool)
		go func() {
			if reserve {
				Reserve()
			}
			var here byte
			before := uintptr(unsafe.Pointer(&here))
			deep(reserveDepth)
			result <- uintptr(unsafe.Pointer(&here)) != before
		}()
		return <-result
	}
	require.True(t, moved(false), "a fresh goroutine's stack did not grow down the frames: they prove nothing")
	require.False(t, moved(true), "the stack grew down the frames after Reserve")
}

// reserveDepth is how deep TestReserve goes: frames of deep that need
// about two thirds of StackReserve.
const reserveDepth = StackReserve * 2 / 3 / 256

// BenchmarkDeepGoroutine runs a fresh goroutine down a path of deep
// frames, as a claimed attempt's does, with and without Reserve first.
func BenchmarkDeepGoroutine(b *testing.B) {
	for _, reserve := range []bool{false, true} {
		name := map[bool]string{false: "Grown", true: "Reserved"}[reserve]
		b.Run(name, func(b *testing.B) {
			done := make(chan struct{})
			for b.Loop() {
				go func() {
					if reserve {
						Reserve()
					}
					deep(24)
					done <- struct{}{}
				}()
				<-done
			}
		})
	}
}

// deep calls itself depth times, each frame holding 256 bytes.
//
//go:noinline
func deep(depth int) byte {
	var frame [256]byte
	frame[depth%len(frame)] = byte(depth)
	if depth == 0 {
		return frame[0]
	}
	return deep(depth-1) + frame[depth%len(frame)]
}
