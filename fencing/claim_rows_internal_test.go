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
	rows := []claimRow{{id: 7, token: "a"}, {id: 5, token: "b"}}

	row, err := claimRowOf(rows, 0, 7)
	require.NoError(t, err)
	require.Equal(t, "a", row.token, "at its place")

	row, err = claimRowOf(rows, 0, 5)
	require.NoError(t, err)
	require.Equal(t, "b", row.token, "out of order")

	row, err = claimRowOf(rows, 2, 7)
	require.NoError(t, err)
	require.Equal(t, "a", row.token, "past the rows")

	_, err = claimRowOf(rows, 1, 9)
	require.ErrorIs(t, err, pgx.ErrNoRows)
}
