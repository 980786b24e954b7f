package store

import (
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/weirhq/weir/internal/engine"
)

// Arrays are room for the arrays a group's statements carry (QueueSteps),
// which the group's caller keeps from one group to the next: the statements
// queued read them until their batch is sent, and Reset, once it was,
// empties them, keeping their room; they hold nothing after.
type Arrays struct {
	uuids      kept[uuid.UUID]
	int64s     kept[int64]
	nullInt64s kept[*int64]
	texts      kept[string]
	bytes      kept[[]byte]
	times      kept[time.Time]
	nullTimes  kept[*time.Time]
	steps      kept[*engine.StepWrites]
}

// Reset empties a once the batch its statements were queued in was sent
// (or dropped).
func (a *Arrays) Reset() {
	a.uuids.reset()
	a.int64s.reset()
	a.nullInt64s.reset()
	a.texts.reset()
	a.bytes.reset()
	a.times.reset()
	a.nullTimes.reset()
	a.steps.reset()
}

// kept are lists of one type, lent in turn (take) until reset.
type kept[T any] struct {
	lists [][]T
	lent  int
}

// take lends an empty list with room for n, which may be appended to up to
// n until reset.
func (k *kept[T]) take(n int) []T {
	if k.lent == len(k.lists) {
		k.lists = append(k.lists, nil)
	}
	l := slices.Grow(k.lists[k.lent][:0], n)
	k.lists[k.lent] = l
	k.lent++
	return l
}

// reset clears what was appended to the lists lent, keeping their room.
func (k *kept[T]) reset() {
	for _, l := range k.lists[:k.lent] {
		clear(l[:cap(l)])
	}
	k.lent = 0
}
