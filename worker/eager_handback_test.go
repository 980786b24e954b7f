package worker

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/handoff"
	"github.com/weirhq/weir/internal/task"
	"github.com/weirhq/weir/workflow"
)

type idleArgs struct{}

func (idleArgs) Kind() string { return "idle" }

type idleWorkflow struct {
	workflow.Defaults[idleArgs, int]
}

func (idleWorkflow) Run(workflow.Context, idleArgs) (int, error) { return 0, nil }

// TestHandBack: a first task handed to a worker whose eager pool stopped
// after the claim (a start committing while the worker stops) is given back
// to River at once: available, its attempt not counted, its lease revoked.
func TestHandBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	w, err := New(pool, &Config{Schema: schema})
	require.NoError(t, err)
	AddWorkflow(w, &idleWorkflow{})
	require.NoError(t, w.Start(ctx))

	key := handoff.Key{Pool: pool, Schema: w.names.Schema, Queue: "default", Kind: task.Kind("default", "idle")}
	takers := handoff.Lookup(key)
	require.Len(t, takers, 1)
	args, err := json.Marshal(task.NewArgs("default", "idle", uuid.New(), "w"))
	require.NoError(t, err)
	batch := &pgx.Batch{}
	done, ok, err := takers[0].Claim(batch, key, &handoff.Task{Args: args, MaxAttempts: task.MaxAttempts})
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, batch).Close() }))

	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, w.Stop(stopCtx))
	require.Empty(t, handoff.Lookup(key), "a stopped worker takes no more first tasks")
	done(true)

	var (
		state    string
		attempt  int
		hasLease bool
	)
	require.NoError(t, pool.QueryRow(ctx, "SELECT state::text, attempt, lease_token IS NOT NULL FROM "+w.names.RiverJob+" WHERE kind = $1", key.Kind).
		Scan(&state, &attempt, &hasLease))
	require.Equal(t, "available", state)
	require.Equal(t, 0, attempt, "the attempt that never ran does not count")
	require.False(t, hasLease)
	require.Empty(t, w.eager.slots, "the slot was given back")
}
