package schedule

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSpec(t *testing.T) {
	t.Parallel()
	anchor := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

	every := &Spec{Every: 15 * time.Minute}
	require.NoError(t, every.Validate())
	next, err := every.Next(anchor, anchor.Add(20*time.Minute))
	require.NoError(t, err)
	require.Equal(t, anchor.Add(30*time.Minute), next, "intervals count from the anchor, no drift")
	next, err = every.Next(anchor, anchor.Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, anchor.Add(15*time.Minute), next, "the anchor itself is never due")

	daily := &Spec{Cron: "30 9 * * *", TimeZone: "Europe/Paris"}
	require.NoError(t, daily.Validate())
	next, err = daily.Next(anchor, anchor)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 12, 1, 8, 30, 0, 0, time.UTC), next, "09:30 in Paris (UTC+1 in winter)")

	jittery := &Spec{Every: time.Hour, Jitter: time.Minute}
	j1, j2 := jittery.JitterFor("s", anchor), jittery.JitterFor("s", anchor)
	require.Equal(t, j1, j2, "deterministic")
	require.Less(t, j1, time.Minute)

	for _, bad := range []*Spec{{}, {Cron: "* * *"}, {Cron: "@daily", Every: time.Hour}, {Every: time.Hour, Jitter: -1}, {Every: time.Hour, TimeZone: "Mars/Base"}} {
		require.Error(t, bad.Validate(), "%+v", bad)
	}

	// February 30th never comes: an error, not a zero due time (which a
	// backfill would have started runs at).
	never := &Spec{Cron: "0 0 30 2 *"}
	require.ErrorIs(t, never.Validate(), ErrNeverDue)
	_, err = never.Next(anchor, anchor)
	require.ErrorIs(t, err, ErrNeverDue)
}
