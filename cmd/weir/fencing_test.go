package main

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

// TestFencingRecoverUnleased: the operator's command recovers a running
// job without a lease once its attempt is older than asked, after a dry run
// that changes nothing; it wants --older-than.
func TestFencingRecoverUnleased(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	table := pgx.Identifier{schema, "river_job"}.Sanitize()
	// Running since two hours, as a plain River process that died left it.
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+table+` (args, kind, max_attempts, state, attempt, attempted_at, attempted_by)
VALUES ('{}', 'left_behind', 25, 'running', 1, now() - interval '2 hours', '{old-process}') RETURNING id`).Scan(&id))
	state := func() (string, bool) {
		var (
			state  string
			leased bool
		)
		require.NoError(t, pool.QueryRow(ctx, "SELECT state::text, lease_expires_at IS NOT NULL FROM "+table+" WHERE id = $1", id).Scan(&state, &leased))
		return state, leased
	}
	st, leased := state()
	require.Equal(t, "running", st)
	require.False(t, leased)

	env := map[string]string{"DATABASE_URL": dbtest.URL(ctx, t), "WEIR_SCHEMA": schema}
	weir := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := runEnv(ctx, args, &stdout, &stderr, func(name string) string { return env[name] })
		return code, stdout.String(), stderr.String()
	}

	code, _, stderr := weir("fencing", "recover-unleased")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "--older-than")

	code, stdout, stderr := weir("fencing", "recover-unleased", "--older-than", "3h")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "recovered 0 jobs")
	require.Contains(t, stdout, "left 1 running jobs without a lease whose attempt started within 3h0m0s")

	code, stdout, stderr = weir("fencing", "recover-unleased", "--older-than", "1h", "--dry-run")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "would recover 1 jobs: 1 available, 0 discarded, 0 cancelled")
	st, _ = state()
	require.Equal(t, "running", st, "a dry run changes nothing")

	code, stdout, stderr = weir("fencing", "recover-unleased", "--older-than", "1h")
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "recovered 1 jobs: 1 available, 0 discarded, 0 cancelled")
	require.Contains(t, stdout, "job IDs: "+strconv.FormatInt(id, 10))
	st, _ = state()
	require.Equal(t, "available", st)
}
