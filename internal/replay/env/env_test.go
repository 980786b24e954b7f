package env

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/weirhq/weir/internal/history"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSignalQueue(t *testing.T) {
	t.Parallel()

	var q SignalQueue
	_, ok := q.Pop()
	require.False(t, ok)
	q.Push(Signal{Args: []byte(`1`), Seq: 1})
	q.Push(Signal{Args: []byte(`2`), Seq: 2})
	require.Equal(t, 2, q.Len())
	s, ok := q.Peek()
	require.True(t, ok)
	require.Equal(t, int64(1), s.Seq)
	s, _ = q.Pop()
	require.Equal(t, []byte(`1`), s.Args)
	s, _ = q.Pop()
	require.Equal(t, []byte(`2`), s.Args)
	require.Equal(t, 0, q.Len())
}

func TestPromise(t *testing.T) {
	t.Parallel()

	p := &Promise{EventID: 3, Kind: "charge"}
	require.False(t, p.Ready())
	require.Nil(t, p.Outcome())
	outcome := &history.ActivityCompletedAttributes{ScheduledEventID: 3}
	p.Resolve(outcome, 7)
	require.True(t, p.Ready())
	require.Equal(t, int64(7), p.Seq())
	require.Same(t, outcome, p.Outcome())
}

func TestJSONCodec(t *testing.T) {
	t.Parallel()

	var c JSONCodec
	data, err := c.Encode(map[string]int{"b": 2, "a": 1})
	require.NoError(t, err)
	require.Equal(t, `{"a":1,"b":2}`, string(data))
	v := 5
	require.NoError(t, c.Decode(nil, &v), "empty data decodes as null")
	require.Equal(t, 5, v)
	require.Error(t, c.Decode([]byte(`{`), &v))
}
