package fencing

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLeaseKeeperAttempts: the keeper lists every attempt registered for a
// job, however many of one job run here at once, until each is removed, in
// any order.
func TestLeaseKeeperAttempts(t *testing.T) {
	t.Parallel()
	listed := func(k *leaseKeeper) []int {
		var out []int
		k.attempts.each(func(_ int64, head *attemptState) {
			for st := head; st != nil; st = st.sameJob {
				out = append(out, st.attempt)
			}
		})
		slices.Sort(out)
		return out
	}
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 0, 2}, {1, 2, 0}} {
		k := newLeaseKeeper(nil)
		attempts := []*attemptState{{jobID: 7, attempt: 1}, {jobID: 7, attempt: 2}, {jobID: 7, attempt: 3}}
		other := &attemptState{jobID: 7 + shardCount, attempt: 9} // same shard, another job
		for _, st := range attempts {
			k.add(st)
		}
		k.add(other)
		want := []int{1, 2, 3, 9}
		require.Equal(t, want, listed(k))
		for _, i := range order {
			k.remove(attempts[i])
			want = slices.DeleteFunc(want, func(a int) bool { return a == attempts[i].attempt })
			require.Equal(t, want, listed(k), "order %v, removed attempt %d", order, attempts[i].attempt)
		}
		k.remove(other)
		require.Empty(t, listed(k))
		require.Empty(t, k.attempts.shard(7).m, "no entry is left for a job without attempts")
	}
}
