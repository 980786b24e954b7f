package client

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func FuzzDecodeCursor(f *testing.F) {
	f.Add(listCursor{CreatedAt: time.Date(2026, 11, 30, 1, 2, 3, 456000, time.UTC), RunID: uuid.New()}.encode())
	f.Add("")
	f.Add("e30")
	f.Add("not base64!")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeCursor(s)
		if err != nil {
			require.True(t, errors.Is(err, ErrInvalidCursor), "every bad cursor is ErrInvalidCursor: %v", err)
			return
		}
		require.False(t, c.CreatedAt.IsZero())
		require.NotEqual(t, uuid.Nil, c.RunID)
		again, err := decodeCursor(c.encode())
		require.NoError(t, err)
		require.True(t, again.CreatedAt.Equal(c.CreatedAt))
		require.Equal(t, c.RunID, again.RunID)
	})
}
