package gopool

// StackReserve is the stack Reserve makes room for: what weir's deepest
// paths (a step's replay, its statements' encoding in pgx, a claimed
// attempt's fenced completion) use below the function that calls it, so
// that a goroutine that reserved it grows no more on them
// (docs/decisions/0061-deep-paths-reserve-their-stack.md).
const StackReserve = 12 << 10

// Reserve makes room for StackReserve bytes of stack below its caller,
// growing the calling goroutine's stack now if it has less. A goroutine's
// stack grows by doubling, each time copying every frame on it: growing
// once while it is shallow, ahead of a deep path, costs less than growing
// two or three times deep in that path. A goroutine whose stack already has
// the room pays a call and the zeroing of StackReserve bytes. The runtime
// may shrink the stack again at a garbage collection, if it is mostly
// unused then.
//
//go:noinline
func Reserve() {
	var room [StackReserve]byte
	keep(room[:])
}

// keep is what Reserve hands its frame to, so that the compiler keeps it.
//
//go:noinline
func keep([]byte) {}
