package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestHello(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)

	var out bytes.Buffer
	require.NoError(t, run(ctx, pool, schema, &out, "Ada"))
	require.Equal(t, "started workflow hello-Ada (generation 1)\nHello, Ada!\n", out.String())

	// Running it again starts the next run of the same workflow ID.
	out.Reset()
	require.NoError(t, run(ctx, pool, schema, &out, "Ada"))
	require.Equal(t, "started workflow hello-Ada (generation 2)\nHello, Ada!\n", out.String())
}

func TestHelloActivityFailure(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)

	var out bytes.Buffer
	err := run(ctx, pool, schema, &out, "")
	require.ErrorIs(t, err, client.ErrWorkflowFailed)
	require.Contains(t, err.Error(), "name is required")
}
