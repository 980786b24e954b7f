package client_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
)

func TestCreateBackfill(t *testing.T) {
	t.Parallel()

	t.Run("Bound", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)

		s, err := b.client.CreateSchedule(ctx, &client.ScheduleParams{ID: "every", Every: time.Second, Paused: true, Workflow: orderArgs{}})
		require.NoError(t, err)
		// Exactly BackfillMax due times: accepted and counted.
		end := s.Anchor.Add(client.BackfillMax*time.Second + time.Microsecond)
		bf, err := b.client.CreateBackfill(ctx, "every", s.Anchor, end)
		require.NoError(t, err)
		require.EqualValues(t, client.BackfillMax, bf.Total)
		require.Equal(t, client.BackfillRunning, bf.State)

		// One more, and ranges whose span overflows a time.Duration: refused,
		// typed, nothing stored.
		_, err = b.client.CreateSchedule(ctx, &client.ScheduleParams{ID: "minutely", Cron: "* * * * *", Paused: true, Workflow: orderArgs{}})
		require.NoError(t, err)
		year1, year2100 := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, tc := range []struct {
			id       string
			from, to time.Time
		}{
			{"every", s.Anchor, end.Add(time.Second)},
			{"every", year1, year2100},
			{"minutely", year1, year2100},
			{"minutely", s.Anchor, s.Anchor.Add(2 * 366 * 24 * time.Hour)},
		} {
			_, err := b.client.CreateBackfill(ctx, tc.id, tc.from, tc.to)
			var tooLarge *client.BackfillTooLargeError
			require.ErrorAs(t, err, &tooLarge, "%s from %s to %s", tc.id, tc.from, tc.to)
			require.ErrorIs(t, err, client.ErrBackfillTooLarge)
			require.EqualValues(t, client.BackfillMax, tooLarge.Max)
			require.Equal(t, tc.id, tooLarge.ScheduleID)
		}
		list, err := b.client.ListBackfills(ctx, "minutely")
		require.NoError(t, err)
		require.Empty(t, list)
	})

	t.Run("EmptyRangeAndMissingSchedule", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)

		s, err := b.client.CreateSchedule(ctx, &client.ScheduleParams{ID: "every", Every: time.Hour, Paused: true, Workflow: orderArgs{}})
		require.NoError(t, err)
		bf, err := b.client.CreateBackfill(ctx, "every", s.Anchor.Add(-time.Hour), s.Anchor.Add(time.Minute))
		require.NoError(t, err)
		require.Equal(t, client.BackfillCompleted, bf.State, "no due time: nothing to do")
		require.Zero(t, bf.Total)
		require.Nil(t, bf.NextDueAt)

		_, err = b.client.CreateBackfill(ctx, "nope", s.Anchor, s.Anchor.Add(time.Hour))
		require.ErrorIs(t, err, client.ErrScheduleNotFound)
		_, err = b.client.DescribeBackfill(ctx, uuid.New())
		require.ErrorIs(t, err, client.ErrBackfillNotFound)
		_, err = b.client.CreateBackfill(ctx, "every", s.Anchor, s.Anchor)
		require.Error(t, err)
	})
}
