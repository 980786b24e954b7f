package replay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
)

// BenchmarkExecute measures the last workflow task of a run of n sequential
// activities (3 events each): the whole history is replayed, then the
// workflow completes.
func BenchmarkExecute(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("SequentialActivities=%d", n), func(b *testing.B) {
			starts := 0
			def := sequentialDefinition(n, &starts, nil)
			r := newRun(b, def, OrderArgs{ID: "o-1"})
			out := r.task()
			for range n - 1 {
				out = r.task(completed(b, out.Activities[0].EventID, 1))
			}
			params := &replay.ExecuteParams{
				History: r.history,
				Inputs:  []history.Event{completed(b, out.Activities[0].EventID, 1)},
				Now:     taskTime(n + 1),
			}
			b.ReportAllocs()
			for b.Loop() {
				out, err := replay.Execute(context.Background(), def, params)
				require.NoError(b, err)
				require.True(b, out.Completed)
			}
		})
	}
}
