package coroutine

import (
	"context"
	"testing"
	"time"
)

// BenchmarkLifetime measures a coroutine's whole life: spawned, run, parked
// and resumed three times, then returned.
func BenchmarkLifetime(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		s := New(time.Second, nil)
		n := 0
		s.Spawn(func() {
			for want := 1; want <= 3; want++ {
				s.Await(func() bool { return n >= want })
			}
		})
		for range 4 {
			if err := s.Run(context.Background(), nil); err != nil {
				b.Fatal(err)
			}
			n++
		}
		s.Close()
	}
}
