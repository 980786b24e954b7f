package worker

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/fencingclaim"
	"github.com/weirhq/weir/internal/task"
)

type idleArgs struct{}

func (idleArgs) Kind() string { return "idle" }

type idleActivity struct {
	activity.Defaults[idleArgs, int]
}

func (idleActivity) Execute(context.Context, idleArgs) (int, error) { return 0, nil }

// TestHandBack: an activity claimed by a transaction that commits after the
// worker's eager pool stopped (a task or a start finishing while the worker
// stops) is given back to River at once: available, its attempt not
// counted, its lease revoked, its slot freed.
func TestHandBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	w, err := New(pool, &Config{Schema: schema})
	require.NoError(t, err)
	AddActivity(w, &idleActivity{})
	require.NoError(t, w.Start(ctx))

	require.True(t, w.eager.acquire())
	var claim *fencingclaim.Claim
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		claim, err = fencingclaim.For(w.driver).InsertClaimedTx(ctx, tx, &fencingclaim.Params{
			Args: []byte(`{}`), AttemptedBy: w.riverClient.ID(), Kind: idleArgs{}.Kind(), MaxAttempts: 1, Queue: task.QueueDefault, Schema: schema,
		})
		return err
	}))

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, w.Stop(stopCtx))
	w.launchEager([]claimedAttempt{{claim: claim, run: w.eagerRunners[idleArgs{}.Kind()]}})

	var (
		state    string
		attempt  int
		hasLease bool
	)
	require.NoError(t, pool.QueryRow(ctx, "SELECT state::text, attempt, lease_token IS NOT NULL FROM "+w.names.RiverJob+" WHERE id = $1", claim.ID).
		Scan(&state, &attempt, &hasLease))
	require.Equal(t, "available", state, "not discarded though it had one attempt: that attempt never ran")
	require.Equal(t, 0, attempt, "the attempt that never ran does not count")
	require.False(t, hasLease)
	require.Empty(t, w.eager.slots, "the slot was given back")
}
