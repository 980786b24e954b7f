package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDBClockIgnoresLateReadings: a reading of now() taken by a transaction
// that waited (a lock, say) is late; the estimate keeps the largest offset
// seen lately, so that one late reading does not date later steps early.
func TestDBClockIgnoresLateReadings(t *testing.T) {
	t.Parallel()
	var c dbClock
	_, ok := c.now()
	require.False(t, ok, "no estimate before a reading")

	ahead := 3 * time.Second // the database's clock runs 3 s ahead of ours
	c.observe(time.Now().Add(ahead))
	c.observe(time.Now().Add(ahead - 800*time.Millisecond)) // read after an 800 ms lock wait
	got, ok := c.now()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(ahead), got, 200*time.Millisecond, "the late reading did not pull the estimate back")
	require.Equal(t, got, time.UnixMicro(got.UnixMicro()), "microseconds, as the database's")
}
