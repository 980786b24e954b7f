package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestRiverChannel: River's insert channel is the configured schema's
// (no statement needed) or, for the search_path's, the schema it resolves
// to (none: the bare topic), as River's listener resolves it.
func TestRiverChannel(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	channel, err := New(dbschema.New("s")).RiverChannel(ctx, nil, RiverInsertTopic)
	require.NoError(t, err)
	require.Equal(t, "s.river_insert", channel)

	conn, err := dbtest.Pool(ctx, t).Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	schema := dbtest.TestSchema(ctx, t)
	_, err = conn.Exec(ctx, "SET search_path TO "+schema)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, "RESET search_path") }()
	channel, err = New(dbschema.New("")).RiverChannel(ctx, conn, RiverInsertTopic)
	require.NoError(t, err)
	require.Equal(t, schema+".river_insert", channel)

	// No schema on the search_path: River's listener listens on the bare topic.
	_, err = conn.Exec(ctx, "SET search_path TO ''")
	require.NoError(t, err)
	channel, err = New(dbschema.New("")).RiverChannel(ctx, conn, RiverInsertTopic)
	require.NoError(t, err)
	require.Equal(t, "river_insert", channel)
}
