package worker

import "context"

// background is a goroutine of the worker's that runs until stopped.
type background struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// run starts fn in a goroutine, with a context that stop cancels.
func (b *background) run(fn func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel, b.done = cancel, make(chan struct{})
	go func() {
		defer close(b.done)
		fn(ctx)
	}()
}

// stop cancels the goroutine and waits for it to return; it does nothing
// if the goroutine never started.
func (b *background) stop() {
	if b.cancel != nil {
		b.cancel()
		<-b.done
	}
}
