// Package array holds the slices that weir's statements pass Postgres as
// array parameters (a group's rows, column by column).
//
// pgx encodes an array parameter element by element, each through
// pgtype.ArrayGetter.Index, whose result is an any: a slice of values
// (pgtype.FlatArray, or a slice pgx reads by reflection) boxes every
// element on the heap, and a time.Time once more on its way to the
// timestamptz codec. Each type here returns instead a pointer to its
// element, of a type whose method is the valuer interface the element
// type's codec asks for (pgtype.UUIDValuer, Int64Valuer, TextValuer,
// BytesValuer, TimestamptzValuer), so pgx encodes the array without
// allocating per element, to the bytes it encodes a plain slice to.
//
// A nil slice is NULL; an empty one, an empty array. The types whose
// elements may be NULL (a nil pointer or slice) say so. Where pgx is given
// no parameter types (the simple protocol, QueryExecModeExec) it finds no
// codec for these types and takes their driver.Value: the plain slice pgx
// knows (a copy, for UUIDs and JSON: []pgtype.UUID, []*string).
package array

import (
	"database/sql/driver"
	"time"
	"unsafe"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// dimensions are the dimensions of an array of n elements, nil (NULL) when
// the slice is nil.
func dimensions(n int, null bool) []pgtype.ArrayDimension {
	if null {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}} //nolint:gosec // a parameter holds less than 2^31 elements
}

// value is v as the driver.Value of a slice of this package: nil when
// the slice is nil (NULL).
func value(v any, null bool) (driver.Value, error) {
	if null {
		return nil, nil
	}
	return v, nil
}

// UUIDs is a uuid[].
type UUIDs []uuid.UUID

func (a UUIDs) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a), a == nil) }
func (a UUIDs) Index(i int) any                     { return (*uuidElem)(&a[i]) }
func (UUIDs) IndexType() any                        { return (*uuidElem)(nil) }

func (a UUIDs) Value() (driver.Value, error) {
	ids := make([]pgtype.UUID, len(a))
	for i, id := range a {
		ids[i] = pgtype.UUID{Bytes: id, Valid: true}
	}
	return value(ids, a == nil)
}

type uuidElem uuid.UUID

func (e *uuidElem) UUIDValue() (pgtype.UUID, error) { return pgtype.UUID{Bytes: *e, Valid: true}, nil }

// Int64s is a bigint[], or an int[] or smallint[] of values in their range
// (pgx refuses any other).
type Int64s []int64

func (a Int64s) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a), a == nil) }
func (a Int64s) Index(i int) any                     { return (*int64Elem)(&a[i]) }
func (Int64s) IndexType() any                        { return (*int64Elem)(nil) }
func (a Int64s) Value() (driver.Value, error)        { return value([]int64(a), a == nil) }

type int64Elem int64

func (e *int64Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

// NullInt64s is an Int64s whose nil elements are NULL.
type NullInt64s []*int64

func (a NullInt64s) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a), a == nil) }
func (a NullInt64s) Index(i int) any                     { return (*int64Elem)(a[i]) }
func (NullInt64s) IndexType() any                        { return (*int64Elem)(nil) }
func (a NullInt64s) Value() (driver.Value, error)        { return value([]*int64(a), a == nil) }

// Texts is a text[].
type Texts []string

func (a Texts) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a), a == nil) }
func (a Texts) Index(i int) any                     { return (*textElem)(&a[i]) }
func (Texts) IndexType() any                        { return (*textElem)(nil) }
func (a Texts) Value() (driver.Value, error)        { return value([]string(a), a == nil) }

type textElem string

func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

// Bytes is a bytea[]; its nil elements are NULL.
type Bytes [][]byte

func (a Bytes) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a), a == nil) }
func (a Bytes) Index(i int) any                     { return (*bytesElem)(&a[i]) }
func (Bytes) IndexType() any                        { return (*bytesElem)(nil) }
func (a Bytes) Value() (driver.Value, error)        { return value([][]byte(a), a == nil) }

type bytesElem []byte

func (e *bytesElem) BytesValue() ([]byte, error) { return *e, nil }

// JSON is a text[] of JSON documents (or any text) as their bytes, which
// statements cast to jsonb; its nil elements are NULL.
type JSON [][]byte

func (a JSON) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a), a == nil) }
func (a JSON) Index(i int) any                     { return (*jsonElem)(&a[i]) }
func (JSON) IndexType() any                        { return (*jsonElem)(nil) }

func (a JSON) Value() (driver.Value, error) {
	texts := make([]*string, len(a))
	for i, doc := range a {
		if doc != nil {
			text := string(doc)
			texts[i] = &text
		}
	}
	return value(texts, a == nil)
}

type jsonElem []byte

// TextValue reads the bytes as a string without copying them: pgx appends
// the string to its buffer within the call that asked for it and keeps
// nothing of it, and nothing writes the bytes meanwhile.
func (e *jsonElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: unsafe.String(unsafe.SliceData(*e), len(*e)), Valid: *e != nil}, nil
}

// Times is a timestamptz[].
type Times []time.Time

func (a Times) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a), a == nil) }
func (a Times) Index(i int) any                     { return (*timeElem)(&a[i]) }
func (Times) IndexType() any                        { return (*timeElem)(nil) }
func (a Times) Value() (driver.Value, error)        { return value([]time.Time(a), a == nil) }

type timeElem time.Time

func (e *timeElem) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*e), Valid: true}, nil
}

// NullTimes is a Times whose nil elements are NULL.
type NullTimes []*time.Time

func (a NullTimes) Dimensions() []pgtype.ArrayDimension { return dimensions(len(a), a == nil) }
func (a NullTimes) Index(i int) any                     { return (*timeElem)(a[i]) }
func (NullTimes) IndexType() any                        { return (*timeElem)(nil) }
func (a NullTimes) Value() (driver.Value, error)        { return value([]*time.Time(a), a == nil) }
