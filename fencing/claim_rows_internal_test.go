package fencing

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/fencingclaim"
)

// TestClaimRowOf: a claim finds its row at its own place or anywhere else
// among the statement's rows, and none when the statement returned none.
func TestClaimRowOf(t *testing.T) {
	t.Parallel()
	rows := []*claimAlloc{{job: rivertype.JobRow{ID: 7}, claim: fencingclaim.Claim{Token: "a"}}, {job: rivertype.JobRow{ID: 5}, claim: fencingclaim.Claim{Token: "b"}}}

	row, err := claimRowOf(rows, 0, 7)
	require.NoError(t, err)
	require.Equal(t, "a", row.claim.Token, "at its place")

	row, err = claimRowOf(rows, 0, 5)
	require.NoError(t, err)
	require.Equal(t, "b", row.claim.Token, "out of order")

	row, err = claimRowOf(rows, 2, 7)
	require.NoError(t, err)
	require.Equal(t, "a", row.claim.Token, "past the rows")

	_, err = claimRowOf(rows, 1, 9)
	require.ErrorIs(t, err, pgx.ErrNoRows)
}
