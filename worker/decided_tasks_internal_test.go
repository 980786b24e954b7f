package worker

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
)

// TestDecidedTasks: a decision kept for a rerun is taken only by a task at
// the same append point with the same inputs, once; any other closes its
// session, and so does a stopped worker.
func TestDecidedTasks(t *testing.T) {
	t.Parallel()

	inputs := []history.Event{{Type: history.EventActivityCompleted, Attributes: []byte(`{"scheduled_event_id":3}`)}}
	other := []history.Event{{Type: history.EventActivityCompleted, Attributes: []byte(`{"scheduled_event_id":3,"result":1}`)}}
	k := newDecidedTasks()
	run := uuid.New()
	keep := func() (*decidedTask, chan struct{}) {
		session, _, unwound := newTestSession(t)
		d := &decidedTask{inputs: inputs, next: 4, outcome: &replay.Outcome{}, session: session}
		k.put(run, d)
		return d, unwound
	}

	d, unwound := keep()
	require.Same(t, d, k.take(run, 4, inputs))
	require.Nil(t, k.take(run, 4, inputs), "taken once")
	requireLive(t, unwound)

	for _, c := range []struct {
		next   int64
		inputs []history.Event
	}{{5, inputs}, {4, other}, {4, nil}} {
		_, unwound = keep()
		require.Nil(t, k.take(run, c.next, c.inputs))
		requireUnwound(t, unwound)
	}

	_, unwound = keep()
	k.drop(run) // its rerun never looked for it
	requireUnwound(t, unwound)
	require.Nil(t, k.take(run, 4, inputs))
	k.drop(run) // nothing kept: nothing to do

	_, first := keep()
	_, second := keep() // replaces the first
	requireUnwound(t, first)
	k.stop()
	requireUnwound(t, second)
	_, late := keep()
	requireUnwound(t, late)
	require.Nil(t, k.take(run, 4, inputs))
}
