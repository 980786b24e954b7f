package fencing

import "sync"

// shardCount is how many locks the per-job maps of a process are split
// over. River starts up to MaxWorkers attempts at once after a fetch, and
// each takes its fetch record and registers with the lease keeper: one lock
// per map made them queue behind each other (and behind a fetch recording a
// whole batch).
const shardCount = 64

// shardedMap is a map by job ID split over shardCount locks.
type shardedMap[V any] struct{ shards [shardCount]shard[V] }

type shard[V any] struct {
	mu sync.Mutex
	m  map[int64]V
}

func newShardedMap[V any]() *shardedMap[V] {
	s := &shardedMap[V]{}
	for i := range s.shards {
		s.shards[i].m = make(map[int64]V)
	}
	return s
}

func (s *shardedMap[V]) shard(id int64) *shard[V] {
	return &s.shards[uint64(id)%shardCount] //nolint:gosec // any spread will do
}

// update runs f on the map of id's shard under its lock.
func (s *shardedMap[V]) update(id int64, f func(m map[int64]V)) {
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	f(sh.m)
}

// load returns id's value.
func (s *shardedMap[V]) load(id int64) (V, bool) {
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	v, ok := sh.m[id]
	return v, ok
}

// each calls f on every value, one shard locked at a time.
func (s *shardedMap[V]) each(f func(id int64, v V)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for id, v := range sh.m {
			f(id, v)
		}
		sh.mu.Unlock()
	}
}
