package fencing

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

// TestFetchTakesTheTokensItBrings (F3): the inline fetch gives the jobs it
// locks the tokens it was given ($8), one each, and has Postgres mint
// tokens only for the jobs past them.
func TestFetchTakesTheTokensItBrings(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	table := tableName(schema, "river_job")
	_, err := pool.Exec(ctx, `INSERT INTO `+table+` (args, kind, max_attempts, queue, state)
		SELECT '{}', 'tokens', 5, 'default', 'available' FROM generate_series(1, 5)`)
	require.NoError(t, err)

	brought := mintLeaseTokens(3)
	want := map[string]bool{}
	for _, token := range brought {
		want[token.String()] = true
	}
	require.Len(t, want, 3)

	rows, err := pool.Query(ctx, fetchInlineSQL(schema),
		nil, int32(100), "tokens-client", "default", nil, int32(5), 30*time.Second, brought)
	require.NoError(t, err)
	res, leases, err := scanInlineFetch(rows)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 5)

	taken, minted := 0, map[string]bool{}
	require.Len(t, leases, len(res.Jobs))
	for i, job := range res.Jobs {
		token := leases[i].token
		var stored string
		require.NoError(t, pool.QueryRow(ctx, "SELECT lease_token::text FROM "+table+" WHERE id = $1", job.ID).Scan(&stored))
		require.Equal(t, stored, token, "job %d: the token returned is the row's", job.ID)
		if want[token] {
			delete(want, token)
			taken++
		} else {
			minted[token] = true
		}
	}
	require.Equal(t, 3, taken, "each token brought went to one job")
	require.Len(t, minted, 2, "Postgres minted distinct tokens for the other two")
	require.Empty(t, want)
}

// TestMintLeaseTokens: version 4 UUIDs, as many as asked (a claim
// statement's, past what a fetch brings), all different.
func TestMintLeaseTokens(t *testing.T) {
	t.Parallel()
	require.Empty(t, mintLeaseTokens(0))
	require.Empty(t, mintLeaseTokens(-1))
	tokens := mintLeaseTokens(mintedTokensMax + 10)
	require.Len(t, tokens, mintedTokensMax+10)
	seen := map[[16]byte]bool{}
	for _, token := range append(tokens, mintLeaseTokens(1)...) {
		require.Equal(t, byte(0x40), token[6]&0xf0, "version 4")
		require.Equal(t, byte(0x80), token[8]&0xc0, "RFC 9562 variant")
		require.False(t, seen[token])
		seen[token] = true
	}
}
