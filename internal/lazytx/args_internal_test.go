package lazytx

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

func TestPgArgs(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	args := []any{id, []uuid.UUID{id}, []uuid.UUID(nil), "x", 1}
	got := pgArgs(args)
	require.Equal(t, []any{
		pgtype.UUID{Bytes: id, Valid: true}, []pgtype.UUID{{Bytes: id, Valid: true}}, []pgtype.UUID(nil), "x", 1,
	}, got)
	require.Equal(t, id, args[0], "the caller's arguments are left alone")

	plain := []any{"x", 1}
	require.Same(t, &plain[0], &pgArgs(plain)[0], "arguments without a UUID are passed as they are")

	// A batch's statements are copied where they change, with their
	// callbacks; the caller's keep their arguments.
	b := &pgx.Batch{}
	b.Queue("SELECT $1", id).Exec(func(pgconn.CommandTag) error { return nil })
	b.Queue("SELECT 1")
	out := pgBatch(b)
	require.Len(t, out.QueuedQueries, 2)
	require.Equal(t, []any{pgtype.UUID{Bytes: id, Valid: true}}, out.QueuedQueries[0].Arguments)
	require.NotNil(t, out.QueuedQueries[0].Fn)
	require.Equal(t, []any{id}, b.QueuedQueries[0].Arguments)
	require.Same(t, b.QueuedQueries[1], out.QueuedQueries[1])

	plainBatch := &pgx.Batch{}
	plainBatch.Queue("SELECT $1", "x")
	require.Same(t, plainBatch, pgBatch(plainBatch), "a batch without a UUID is sent as it is")
}

func BenchmarkUUIDArgument(b *testing.B) {
	m := pgtype.NewMap()
	ids := make([]uuid.UUID, 16)
	for i := range ids {
		ids[i] = uuid.New()
	}
	for _, bc := range []struct {
		name string
		arg  any
	}{{"uuid.UUID", ids[0]}, {"pgArgs", nil}, {"[]uuid.UUID", ids}, {"pgArgs[]", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			oid := uint32(pgtype.UUIDOID)
			raw := bc.arg
			if bc.name == "pgArgs[]" || bc.name == "[]uuid.UUID" {
				oid = pgtype.UUIDArrayOID
			}
			for b.Loop() {
				arg := raw
				switch bc.name {
				case "pgArgs":
					arg = pgArgs([]any{ids[0]})[0]
				case "pgArgs[]":
					arg = pgArgs([]any{ids})[0]
				}
				if _, err := m.Encode(oid, pgtype.BinaryFormatCode, arg, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
