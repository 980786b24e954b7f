package workflow

// Channel passes values between the coroutines of a workflow, in order, like
// a Go channel with an unbounded buffer: Send never blocks, Receive blocks
// until a value is there or the channel is closed. It is deterministic (the
// scheduler runs one coroutine at a time) and lives only in memory: replay
// rebuilds it. Use it instead of a Go channel in workflow code.
type Channel[T any] struct {
	closed bool
	seq    func() int64
	values []channelValue[T]
}

type channelValue[T any] struct {
	seq   int64
	value T
}

// NewChannel returns an empty Channel.
func NewChannel[T any](ctx Context) *Channel[T] {
	return &Channel[T]{seq: envOf(ctx).NextSeq}
}

// Send appends v. It panics if the channel is closed, like a Go channel.
func (c *Channel[T]) Send(v T) {
	if c.closed {
		panic("workflow: send on closed Channel")
	}
	c.values = append(c.values, channelValue[T]{seq: c.seq(), value: v})
}

// Close marks the channel closed: receivers get the values still buffered,
// then ok == false.
func (c *Channel[T]) Close() { c.closed = true }

// Receive blocks until a value is available and returns it with ok true,
// or until the channel is closed and drained, returning ok false.
func (c *Channel[T]) Receive(ctx Context) (value T, ok bool) {
	envOf(ctx).Await(c.IsReady)
	return c.TryReceive()
}

// TryReceive returns the oldest value if there is one, without blocking.
func (c *Channel[T]) TryReceive() (value T, ok bool) {
	if len(c.values) == 0 {
		return value, false
	}
	value = c.values[0].value
	c.values[0] = channelValue[T]{}
	c.values = c.values[1:]
	return value, true
}

// Len returns how many values are buffered.
func (c *Channel[T]) Len() int { return len(c.values) }

// IsReady reports whether Receive would return at once: a value is buffered
// or the channel is closed. With it a [Selector] can wait on the channel
// ([Selector.AddReceive]).
func (c *Channel[T]) IsReady() bool { return len(c.values) > 0 || c.closed }

func (c *Channel[T]) readySeq() int64 {
	if len(c.values) > 0 {
		return c.values[0].seq
	}
	return 0
}
