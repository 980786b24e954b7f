package client_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
)

func TestRequestHash(t *testing.T) {
	t.Parallel()

	raw := func(doc string) client.RawArgs { return client.RawArgs{KindName: "order", JSON: json.RawMessage(doc)} }

	// conflicts starts with first, then with second under the same request
	// ID, and requires a *RequestConflictError naming the first run.
	conflicts := func(t *testing.T, first, second *client.StartOpts) {
		t.Helper()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		workflowID, requestID := "hash-"+uuid.NewString(), "req-"+uuid.NewString()
		first.WorkflowID, first.RequestID = workflowID, requestID
		second.WorkflowID, second.RequestID = workflowID, requestID
		run, err := b.client.Start(ctx, orderArgs{ID: "o", Cents: 1}, first)
		require.NoError(t, err)
		_, err = b.client.Start(ctx, orderArgs{ID: "o", Cents: 1}, second)
		conflict, ok := errors.AsType[*client.RequestConflictError](err)
		require.True(t, ok, "got %v", err)
		require.Equal(t, run.RunID, conflict.RunID)
	}

	t.Run("ExecutionTimeoutConflicts", func(t *testing.T) {
		t.Parallel()
		conflicts(t, &client.StartOpts{ExecutionTimeout: time.Hour}, &client.StartOpts{ExecutionTimeout: 2 * time.Hour})
	})

	t.Run("IDReusePolicyConflicts", func(t *testing.T) {
		t.Parallel()
		conflicts(t, &client.StartOpts{}, &client.StartOpts{IDReusePolicy: client.IDReuseRejectDuplicate})
	})

	t.Run("ReorderedKeysReplay", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		opts := &client.StartOpts{WorkflowID: "hash-" + uuid.NewString(), RequestID: "req-1"}
		run, err := b.client.Start(ctx, raw(`{"id": "o", "cents": 1, "tags": {"a": 1, "b": [2.50, 3]}}`), opts)
		require.NoError(t, err)

		again, err := b.client.Start(ctx, raw(`{"tags":{"b":[2.50,3],"a":1},"cents":1,"id":"o"}`), opts)
		require.NoError(t, err)
		require.Equal(t, run.RunID, again.RunID)
		require.False(t, again.Created)

		_, err = b.client.Start(ctx, raw(`{"tags":{"b":[2.50,4],"a":1},"cents":1,"id":"o"}`), opts)
		require.ErrorIs(t, err, client.ErrRequestConflict)
	})

	t.Run("RunTimeoutConflicts", func(t *testing.T) {
		t.Parallel()
		conflicts(t, &client.StartOpts{RunTimeout: time.Hour}, &client.StartOpts{RunTimeout: time.Minute})
	})

	t.Run("SameOptionsReplay", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		opts := &client.StartOpts{WorkflowID: "hash-" + uuid.NewString(), RequestID: "req-1", RunTimeout: time.Hour,
			IDReusePolicy: client.IDReuseRejectDuplicate}
		run, err := b.client.Start(ctx, orderArgs{ID: "o", Cents: 1}, opts)
		require.NoError(t, err)
		again, err := b.client.Start(ctx, orderArgs{ID: "o", Cents: 1}, opts)
		require.NoError(t, err)
		require.Equal(t, run.RunID, again.RunID)
	})
}
