package array_test

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/array"
	"github.com/weirhq/weir/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// arrayCase is an array of one of the package's types and the same values
// as the plain slice weir passed pgx before (and scans them back into).
type arrayCase struct {
	name    string
	sqlType string // the element's
	oid     uint32 // the array's
	value   any
	plain   any
}

// cases are arrays of every type of n elements, every third one NULL where
// the type allows it; n < 0 is a nil slice (NULL).
func cases(n int) []arrayCase {
	var (
		ids         []uuid.UUID
		pgIDs       []pgtype.UUID
		ints, small []int64
		nullInts    []*int64
		texts       []string
		docs, blobs [][]byte
		docTexts    []*string
		times       []time.Time
		nullTimes   []*time.Time
		base        = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.Local)
		null        = func(i int) bool { return i%3 == 1 }
		ptr         = func(i int64) *int64 { return &i }
	)
	if n >= 0 {
		ids, pgIDs, ints, small, nullInts = []uuid.UUID{}, []pgtype.UUID{}, []int64{}, []int64{}, []*int64{}
		texts, docs, blobs, docTexts, times, nullTimes = []string{}, [][]byte{}, [][]byte{}, []*string{}, []time.Time{}, []*time.Time{}
	}
	for i := range n {
		id := uuid.New()
		ids, pgIDs = append(ids, id), append(pgIDs, pgtype.UUID{Bytes: id, Valid: true})
		ints, small = append(ints, math.MaxInt64-int64(i)*1e15), append(small, int64(i)-math.MaxInt32/2)
		nullInts = append(nullInts, map[bool]*int64{false: ptr(int64(i) * -7), true: nil}[null(i)])
		text := fmt.Sprintf("é%d,\"{x}\" %d", i, i*i) // a comma, quotes and braces, as array text quotes them
		texts = append(texts, text)
		doc := fmt.Appendf(nil, `{"i": %d}`, i)
		docText := string(doc)
		switch {
		case null(i):
			docs, docTexts = append(docs, nil), append(docTexts, nil)
		case i%3 == 2:
			docs, docTexts = append(docs, []byte{}), append(docTexts, new(string)) // empty, not NULL
		default:
			docs, docTexts = append(docs, doc), append(docTexts, &docText)
		}
		blobs = append(blobs, map[bool][]byte{false: {byte(i), 0, 0xff}, true: nil}[null(i)])
		at := base.Add(time.Duration(i) * time.Hour)
		times = append(times, at)
		nullTimes = append(nullTimes, map[bool]*time.Time{false: &at, true: nil}[null(i)])
	}
	return []arrayCase{
		{"UUIDs", "uuid", pgtype.UUIDArrayOID, array.UUIDs(ids), pgIDs},
		{"Int64s", "bigint", pgtype.Int8ArrayOID, array.Int64s(ints), ints},
		{"Int64s as int", "int", pgtype.Int4ArrayOID, array.Int64s(small), small},
		{"NullInt64s", "bigint", pgtype.Int8ArrayOID, array.NullInt64s(nullInts), nullInts},
		{"Texts", "text", pgtype.TextArrayOID, array.Texts(texts), texts},
		{"JSON", "text", pgtype.TextArrayOID, array.JSON(docs), docTexts},
		{"Bytes", "bytea", pgtype.ByteaArrayOID, array.Bytes(blobs), blobs},
		{"Times", "timestamptz", pgtype.TimestamptzArrayOID, array.Times(times), times},
		{"NullTimes", "timestamptz", pgtype.TimestamptzArrayOID, array.NullTimes(nullTimes), nullTimes},
	}
}

var sizes = []int{-1, 0, 1, 5, 10_000}

// TestSameBytes: each type encodes to the bytes pgx encodes the plain
// slice to, in the binary format pgx chooses for arrays.
func TestSameBytes(t *testing.T) {
	t.Parallel()
	m := pgtype.NewMap()
	for _, n := range sizes {
		for _, c := range cases(n) {
			want, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.plain, nil)
			require.NoError(t, err, "%s of %d", c.name, n)
			got, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.value, nil)
			require.NoError(t, err, "%s of %d", c.name, n)
			require.Equal(t, want, got, "%s of %d", c.name, n)
			require.Equal(t, n < 0, got == nil, "%s of %d: NULL if and only if nil", c.name, n)
		}
	}
}

// TestRoundTrip: Postgres reads each type as the values it holds (NULL
// elements, an empty array, a nil slice as NULL), in every exec mode that
// describes statements and, through their driver.Value, in the others.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	for _, mode := range dbtest.QueryExecModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := dbtest.ModePool(ctx, t, mode, 2)
			for _, n := range sizes {
				for _, c := range cases(n) {
					got := reflect.New(reflect.TypeOf(c.plain))
					var null, same bool
					var count int
					err := pool.QueryRow(ctx, fmt.Sprintf("SELECT $1::%[1]s[], $1::%[1]s[] IS NULL, coalesce(cardinality($1::%[1]s[]), -1),"+
						" $1::%[1]s[] IS NOT DISTINCT FROM $2::%[1]s[]", c.sqlType), c.value, c.plain).
						Scan(got.Interface(), &null, &count, &same)
					require.NoError(t, err, "%s of %d", c.name, n)
					require.Equal(t, c.plain, got.Elem().Interface(), "%s of %d", c.name, n)
					require.Equal(t, n < 0, null, "%s of %d: NULL if and only if nil", c.name, n)
					require.Equal(t, max(n, -1), count, "%s of %d", c.name, n)
					require.True(t, same, "%s of %d: equal to the plain slice", c.name, n)
				}
			}
		})
	}
}

// TestNoAllocationPerElement: pgx encodes each type with as many
// allocations for 1,000 elements as for one.
func TestNoAllocationPerElement(t *testing.T) {
	m := pgtype.NewMap()
	buf := make([]byte, 0, 1<<20)
	for i, one := range cases(1) {
		many := cases(1000)[i]
		allocs := func(c arrayCase) float64 {
			return testing.AllocsPerRun(20, func() {
				if _, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.value, buf); err != nil {
					t.Fatal(err)
				}
			})
		}
		require.Equal(t, allocs(one), allocs(many), "%s", one.name)
	}
}

// TestIntRange: an Int64s element out of an int's range fails the
// encoding, as a plain []int64's does.
func TestIntRange(t *testing.T) {
	m := pgtype.NewMap()
	_, err := m.Encode(pgtype.Int4ArrayOID, pgtype.BinaryFormatCode, array.Int64s{1, math.MaxInt32 + 1}, nil)
	require.Error(t, err)
}

// BenchmarkEncode compares the encoding of each type with the plain
// slice's, 100 elements.
func BenchmarkEncode(b *testing.B) {
	m := pgtype.NewMap()
	buf := make([]byte, 0, 1<<20)
	for _, c := range cases(100) {
		for _, v := range []struct {
			name  string
			value any
		}{{"plain", c.plain}, {"array", c.value}} {
			b.Run(c.name+"/"+v.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := m.Encode(c.oid, pgtype.BinaryFormatCode, v.value, buf); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
