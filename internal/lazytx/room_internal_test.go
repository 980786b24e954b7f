package lazytx

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/array"
	"github.com/weirhq/weir/internal/dbtest"
)

// arrays are the arguments of one statement, large enough to be sized,
// each batch's and statement's values its own (seed).
type arrays struct {
	ids    []uuid.UUID
	ints   []int64
	small  []int32
	texts  []string
	docs   [][]byte
	times  []time.Time
	scalar int64
}

func newArrays(seed, n int) arrays {
	var a arrays
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range n {
		a.ids = append(a.ids, uuid.New())
		a.ints = append(a.ints, int64(seed*1000+i))
		a.small = append(a.small, int32(seed+i))
		a.texts = append(a.texts, fmt.Sprintf("text %d of %d %s", i, seed, strings.Repeat("x", i%7)))
		a.docs = append(a.docs, fmt.Appendf(nil, `{"i": %d, "seed": %d}`, i, seed)) // as jsonb prints it
		a.times = append(a.times, base.Add(time.Duration(seed*n+i)*time.Microsecond))
	}
	a.scalar = int64(seed)
	return a
}

// queue queues a statement that returns its arguments, leading with the
// scalar or with the arrays, as plain slices or as package array's types
// (typed), and reads them into got.
func (a arrays) queue(b *pgx.Batch, scalarFirst, typed bool, mode pgx.QueryExecMode, got *arrays) {
	var ids, ints, texts, docs, times any = a.ids, a.ints, a.texts, a.docs, a.times
	if typed {
		ids, ints, texts, docs, times = array.UUIDs(a.ids), array.Int64s(a.ints), array.Texts(a.texts), array.JSON(a.docs), array.Times(a.times)
	}
	if !typed && (mode == pgx.QueryExecModeSimpleProtocol || mode == pgx.QueryExecModeExec) { // which send a [][]byte as bytea
		var texts []string
		for _, d := range a.docs {
			texts = append(texts, string(d))
		}
		docs = texts
	}
	read := func(row pgx.Row) error {
		var docs []string
		err := row.Scan(&got.scalar, &got.ids, &got.ints, &got.small, &got.texts, &docs, &got.times)
		for _, d := range docs {
			got.docs = append(got.docs, []byte(d))
		}
		return err
	}
	if scalarFirst {
		b.Queue("SELECT $1::bigint, $2::uuid[], $3::bigint[], $4::int[], $5::text[], $6::text[]::jsonb[]::text[], $7::timestamptz[]",
			a.scalar, ids, ints, a.small, texts, docs, times).QueryRow(read)
		return
	}
	b.Queue("SELECT $7::bigint, $1::uuid[], $2::bigint[], $3::int[], $4::text[], $5::text[]::jsonb[]::text[], $6::timestamptz[]",
		ids, ints, a.small, texts, docs, times, a.scalar).QueryRow(read)
}

func (a arrays) normalized() arrays {
	for i, t := range a.times {
		a.times[i] = t.UTC()
	}
	return a
}

// TestRoomKeepsValues: statements whose arguments make room for themselves
// (sized) and batches that make room for what they send (room) send the
// same values as without, each statement its own: in a transaction's first
// batch (with its BEGIN) and later ones, of every size, as plain slices and
// as package array's types, under each query exec mode (the simple protocol
// and exec mode wrap nothing). The connection's type map gets the wrapper
// once.
func TestRoomKeepsValues(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, mode := range dbtest.QueryExecModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := dbtest.ModePool(ctx, t, mode, 1)

			seed := 0
			wraps := mode != pgx.QueryExecModeExec && mode != pgx.QueryExecModeSimpleProtocol
			for _, n := range []int{1, 40, 3, 400, 2000, 40} { // 2,000: more than a connection keeps
				err := BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					for range 2 { // the first batch begins the transaction
						b := &pgx.Batch{}
						var sent []arrays
						got := make([]arrays, 4)
						for i := range got {
							seed++
							a := newArrays(seed, n+i)
							a.queue(b, i%2 == 0, i >= 2, mode, &got[i])
							sent = append(sent, a)
						}
						if err := tx.SendBatch(ctx, b).Close(); err != nil {
							return err
						}
						for i := range got {
							require.Equal(t, sent[i].normalized(), got[i].normalized(), "n %d, statement %d", n, i)
						}
					}
					return nil
				})
				require.NoError(t, err)
			}

			conn, err := pool.Acquire(ctx)
			require.NoError(t, err)
			defer conn.Release()
			ours := reflect.ValueOf((&kept{}).trySized).Pointer()
			wrappers := slices.DeleteFunc(slices.Clone(conn.Conn().TypeMap().TryWrapEncodePlanFuncs),
				func(f pgtype.TryWrapEncodePlanFunc) bool { return reflect.ValueOf(f).Pointer() != ours })
			require.Len(t, wrappers, map[bool]int{true: 1, false: 0}[wraps])
		})
	}
}

// TestLend: a connection's buffer is lent again once large enough, holding
// what was in the buffer pgx passed (even when that is the buffer itself),
// with room for what is asked; past keptMax it is left alone.
func TestLend(t *testing.T) {
	var buf []byte
	got := lend(&buf, []byte("abc"), 1000)
	require.Equal(t, "abc", string(got))
	require.GreaterOrEqual(t, cap(got), 1003)
	require.Same(t, &buf[:1][0], &got[:1][0])

	again := lend(&buf, append(got[:0], "xy"...), 500) // pgx kept it, and wrote into it
	require.Equal(t, "xy", string(again))
	require.Same(t, &buf[:1][0], &again[:1][0])

	allocs := testing.AllocsPerRun(100, func() { _ = lend(&buf, []byte{}, 900) })
	require.Zero(t, allocs, "a kept buffer large enough is lent without allocating")

	big := lend(&buf, []byte("z"), keptMax)
	require.Equal(t, "z", string(big))
	require.NotSame(t, &buf[:1][0], &big[:1][0], "past keptMax the connection keeps its smaller buffer")
	require.Less(t, cap(buf), keptMax)
}

// TestArgSize: the estimate of every array type weir's statements pass
// holds its encoding, and not twice over; each type of package array but
// the nullable ones (a statement carries them after others) is sized.
func TestArgSize(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	one, text := int64(7), "text of some length"
	m := pgtype.NewMap()
	for _, n := range []int{0, 1, 100} {
		for _, c := range []struct {
			oid   uint32
			value any
			sized bool
		}{
			{pgtype.UUIDArrayOID, array.UUIDs(make([]uuid.UUID, n)), true},
			{pgtype.Int8ArrayOID, array.Int64s(slices.Repeat([]int64{one}, n)), true},
			{pgtype.Int8ArrayOID, array.NullInt64s(slices.Repeat([]*int64{&one, nil}, n)), false},
			{pgtype.TextArrayOID, array.Texts(slices.Repeat([]string{text}, n)), true},
			{pgtype.TextArrayOID, array.JSON(slices.Repeat([][]byte{[]byte(text), nil}, n)), true},
			{pgtype.ByteaArrayOID, array.Bytes(slices.Repeat([][]byte{[]byte(text), nil}, n)), true},
			{pgtype.TimestamptzArrayOID, array.Times(slices.Repeat([]time.Time{at}, n)), true},
			{pgtype.TimestamptzArrayOID, array.NullTimes(slices.Repeat([]*time.Time{&at, nil}, n)), false},
			{pgtype.UUIDArrayOID, slices.Repeat([]pgtype.UUID{{Valid: true}}, n), true},
			{pgtype.Int8ArrayOID, slices.Repeat([]int64{one}, n), true},
			{pgtype.Int4ArrayOID, slices.Repeat([]int32{1}, n), true},
			{pgtype.TextArrayOID, slices.Repeat([]string{text}, n), true},
			{pgtype.TextArrayOID, slices.Repeat([][]byte{[]byte(text), nil}, n), true},
			{pgtype.TextArrayOID, slices.Repeat([]*string{&text, nil}, n), false},
			{pgtype.TimestamptzArrayOID, slices.Repeat([]time.Time{at}, n), true},
		} {
			encoded, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.value, nil)
			require.NoError(t, err)
			size := argSize(c.value)
			require.GreaterOrEqual(t, size, len(encoded), "%T of %d", c.value, n)
			require.LessOrEqual(t, size, 2*len(encoded), "%T of %d", c.value, n)
			wrapped, ok := sizedArg(c.value, size)
			require.Equal(t, c.sized, ok, "%T", c.value)
			if ok {
				require.NotEqual(t, reflect.TypeOf(c.value), reflect.TypeOf(wrapped))
			}
		}
	}
}
