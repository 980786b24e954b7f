package fencing

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestClaimRowOf: a claim finds its row at its own place or anywhere else
// among the statement's rows, and none when the statement returned none.
func TestClaimRowOf(t *testing.T) {
	t.Parallel()
	rows := []*claimAlloc{{}, {}}
	rows[0].claim.ID, rows[1].claim.ID = 7, 5
	rows[0].st.token, rows[1].st.token = "a", "b"

	row, err := claimRowOf(rows, 0, 7)
	require.NoError(t, err)
	require.Equal(t, "a", row.st.token, "at its place")

	row, err = claimRowOf(rows, 0, 5)
	require.NoError(t, err)
	require.Equal(t, "b", row.st.token, "out of order")

	row, err = claimRowOf(rows, 2, 7)
	require.NoError(t, err)
	require.Equal(t, "a", row.st.token, "past the rows")

	_, err = claimRowOf(rows, 1, 9)
	require.ErrorIs(t, err, pgx.ErrNoRows)
}
