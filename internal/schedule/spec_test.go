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

func TestCount(t *testing.T) {
	t.Parallel()
	anchor := time.Date(2026, 11, 30, 10, 0, 0, 123_000, time.UTC)

	// Count agrees with walking Next over ranges around the anchor.
	walk := func(s *Spec, from, to time.Time) int64 {
		var n int64
		due, err := s.Next(anchor, from.Add(-time.Nanosecond))
		for ; err == nil && due.Before(to); due, err = s.Next(anchor, due) {
			n++
		}
		return n
	}
	for _, s := range []*Spec{{Every: 7 * time.Second}, {Every: time.Hour}, {Cron: "*/5 * * * *"}, {Cron: "30 9 * * *", TimeZone: "Europe/Paris"}} {
		for _, from := range []time.Time{anchor.Add(-time.Hour), anchor, anchor.Add(time.Nanosecond), anchor.Add(7 * time.Second), anchor.Add(13 * time.Minute)} {
			for _, span := range []time.Duration{time.Nanosecond, 7 * time.Second, 7*time.Second + 1, time.Hour, 50 * time.Hour} {
				n, err := s.Count(anchor, from, from.Add(span), 1_000_000)
				require.NoError(t, err)
				require.Equal(t, walk(s, from, from.Add(span)), n, "%+v from %s for %s", s, from, span)
			}
		}
	}

	// Past the limit: limit+1, however long the range; an empty range is 0.
	year1, year2100 := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, s := range []*Spec{{Every: time.Second}, {Every: time.Nanosecond}, {Cron: "* * * * *"}} {
		n, err := s.Count(anchor, year1, year2100, 1000)
		require.NoError(t, err)
		require.EqualValues(t, 1001, n, "%+v", s)
	}
	n, err := (&Spec{Every: 100 * 365 * 24 * time.Hour}).Count(anchor, year1, time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC), 1000)
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "a range past 292 years counts exactly")
	n, err = (&Spec{Every: time.Second}).Count(anchor, anchor, anchor, 1000)
	require.NoError(t, err)
	require.Zero(t, n)
}
