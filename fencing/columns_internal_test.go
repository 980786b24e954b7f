package fencing

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/fencingclaim"
)

// TestColumnsUnderEveryExecMode: the arrays of the claim and completion
// statements over many, read in place from their claims and completions,
// reach Postgres as their fields, NULL where a completion merges no
// metadata and a NULL array where none does, whatever the pool's query exec
// mode (the simple protocol gets no parameter types).
func TestColumnsUnderEveryExecMode(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	claims := []fencingclaim.Request{
		{Params: fencingclaim.Params{Args: []byte(`{"a": 1}`), ID: 7, AttemptedBy: "w1", Kind: "k1", MaxAttempts: 3, Queue: "q1"}},
		{Params: fencingclaim.Params{Args: []byte(`{}`), ID: 8, AttemptedBy: "w2", Kind: "k,2", MaxAttempts: 5,
			Metadata: []byte(`{"m": "x"}`), Priority: 4, Queue: "q2"}},
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	completions := []fencingclaim.Completion{
		{JobID: 7, FinalizedAt: at, Attempt: 1, Token: "t1"},
		{JobID: 8, FinalizedAt: at.Add(time.Second), Attempt: 2, Token: "t2", Metadata: []byte(`{"n": 1}`)},
	}
	str := func(s string) *string { return &s }
	for _, mode := range dbtest.QueryExecModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := dbtest.ModePool(ctx, t, mode, 1)

			var ids, maxAttempts, priorities []int64
			var args, attemptedBy, kinds, metadata, queues []*string
			var ttl time.Duration
			var tokens int
			require.NoError(t, pool.QueryRow(ctx, "SELECT $1::interval, $3::bigint[], $4::text[], $5::text[], $6::text[], $7::int[], $8::text[],"+
				" $9::int[], $10::text[], cardinality($2::uuid[])", claimManyArgs("1 second", claims)...).
				Scan(&ttl, &ids, &args, &attemptedBy, &kinds, &maxAttempts, &metadata, &priorities, &queues, &tokens))
			require.Equal(t, time.Second, ttl)
			require.Equal(t, 2, tokens)
			require.Equal(t, []int64{7, 8}, ids)
			require.Equal(t, []*string{str(`{"a": 1}`), str(`{}`)}, args)
			require.Equal(t, []*string{str("w1"), str("w2")}, attemptedBy)
			require.Equal(t, []*string{str("k1"), str("k,2")}, kinds)
			require.Equal(t, []int64{3, 5}, maxAttempts)
			require.Equal(t, []*string{str(`{}`), str(`{"m": "x"}`)}, metadata, "none: {}")
			require.Equal(t, []int64{1, 4}, priorities, "none: 1")
			require.Equal(t, []*string{str("q1"), str("q2")}, queues)

			const completed = "SELECT $2::bigint[], $3::text[], $4::int[], $5::timestamptz[], $6::text[], $1::int"
			var attempts []int64
			var tokenTexts []*string
			var finalized []time.Time
			var n int
			require.NoError(t, pool.QueryRow(ctx, completed, completeClaimedManyArgs(completions)...).
				Scan(&ids, &tokenTexts, &attempts, &finalized, &metadata, &n))
			require.Equal(t, []int64{7, 8}, ids)
			require.Equal(t, []*string{str("t1"), str("t2")}, tokenTexts)
			require.Equal(t, []int64{1, 2}, attempts)
			require.Len(t, finalized, 2)
			require.True(t, finalized[0].Equal(at) && finalized[1].Equal(at.Add(time.Second)), "%v", finalized)
			require.Equal(t, []*string{nil, str(`{"n": 1}`)}, metadata, "NULL: nothing to merge")
			require.Equal(t, 2, n)

			require.NoError(t, pool.QueryRow(ctx, completed, completeClaimedManyArgs(completions[:1])...).
				Scan(&ids, &tokenTexts, &attempts, &finalized, &metadata, &n))
			require.Nil(t, metadata, "a NULL array while none merges any")
		})
	}
}

// TestColumnsEncodedSize: what a column tells of its size, for the room a
// worker's transaction makes, covers its binary encoding, and not twice
// over.
func TestColumnsEncodedSize(t *testing.T) {
	t.Parallel()
	m := pgtype.NewMap()
	for _, n := range []int{0, 1, 100} {
		claims := slices.Repeat([]fencingclaim.Request{{Params: fencingclaim.Params{
			Args: []byte(`{"order": "a-1234"}`), AttemptedBy: "worker-1", Kind: "activity", Queue: "default",
		}}}, n)
		completions := slices.Repeat([]fencingclaim.Completion{{JobID: 1, Token: uuid.NewString(), Metadata: []byte(`{"a": 1}`)}, {}}, n)
		args := append(claimManyArgs("", claims)[2:], completeClaimedManyArgs(completions)[1:]...)
		oids := []uint32{pgtype.Int8ArrayOID, pgtype.TextArrayOID, pgtype.TextArrayOID, pgtype.TextArrayOID, pgtype.Int4ArrayOID,
			pgtype.TextArrayOID, pgtype.Int4ArrayOID, pgtype.TextArrayOID,
			pgtype.Int8ArrayOID, pgtype.TextArrayOID, pgtype.Int4ArrayOID, pgtype.TimestamptzArrayOID, pgtype.TextArrayOID}
		require.Len(t, args, len(oids))
		for i, a := range args {
			sized, ok := a.(interface{ EncodedSize() int })
			if !ok {
				continue // the NULL array of no metadata
			}
			encoded, err := m.Encode(oids[i], pgtype.BinaryFormatCode, a, nil)
			require.NoError(t, err)
			size := sized.EncodedSize()
			require.GreaterOrEqual(t, size, len(encoded), "%T of %d", a, n)
			require.LessOrEqual(t, size, 2*len(encoded), "%T of %d", a, n)
		}
	}
}
