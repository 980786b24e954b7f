package fencing

import (
	"database/sql/driver"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weirhq/weir/internal/array"
	"github.com/weirhq/weir/internal/fencingclaim"
)

// column is an array parameter of a statement over many claims or
// completions (rows), read in place: pgx encodes it when the batch is sent,
// until when the caller leaves rows as they are (QueueClaims,
// QueueCompletions). Element i is row i as E, whose method is the valuer
// its element type's codec asks for (pgtype.Int64Valuer, TextValuer or
// TimestamptzValuer): nothing is copied or boxed per element, as for
// internal/array's types. Each column has an element type of its own.
type column[R any, E columnElem[R]] []R

// columnElem is a column's element type: a pointer to a type defined on
// the rows' type, which of converts a row's pointer to (on a nil E).
type columnElem[R any] interface{ of(row *R) any }

func (c column[R, E]) Dimensions() []pgtype.ArrayDimension {
	return []pgtype.ArrayDimension{{Length: int32(len(c)), LowerBound: 1}} //nolint:gosec // a parameter holds less than 2^31 elements
}
func (c column[R, E]) Index(i int) any { return (*new(E)).of(&c[i]) }
func (column[R, E]) IndexType() any    { return *new(E) }

// EncodedSize is what the column takes in pgx's binary format, for the
// room a worker's transaction makes for its statement (lazytx).
func (c column[R, E]) EncodedSize() int {
	n := 24
	for i := range c {
		size := 8 // an int8's or a timestamptz's
		if e, ok := c.Index(i).(pgtype.TextValuer); ok {
			v, _ := e.TextValue() // never fails
			size = len(v.String)
		}
		n += 4 + size
	}
	return n
}

// Value is the column as a slice pgx knows, for where it is given no
// parameter types (the simple protocol, QueryExecModeExec): of int64s, of
// times, or of texts (nil: NULL).
func (c column[R, E]) Value() (driver.Value, error) {
	switch c.IndexType().(type) {
	case pgtype.Int64Valuer:
		return plainOf(c, func(e pgtype.Int64Valuer) (int64, error) { v, err := e.Int64Value(); return v.Int64, err })
	case pgtype.TimestamptzValuer:
		return plainOf(c, func(e pgtype.TimestamptzValuer) (time.Time, error) {
			v, err := e.TimestamptzValue()
			return v.Time, err
		})
	}
	return plainOf(c, func(e pgtype.TextValuer) (*string, error) {
		v, err := e.TextValue()
		if !v.Valid {
			return nil, err
		}
		return new(strings.Clone(v.String)), err
	})
}

// plainOf is the slice of what value reads of c's elements (V).
func plainOf[R any, E columnElem[R], V, T any](c column[R, E], value func(V) (T, error)) (driver.Value, error) {
	out := make([]T, len(c))
	for i := range c {
		var err error
		if out[i], err = value(c.Index(i).(V)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func int8Of(n int64) (pgtype.Int8, error)  { return pgtype.Int8{Int64: n, Valid: true}, nil }
func textOf(s string) (pgtype.Text, error) { return pgtype.Text{String: s, Valid: true}, nil }

// jsonOf is JSON (or any text) as its bytes, which the statements cast; nil
// is NULL. It reads the bytes without copying them: pgx appends the string
// to its buffer within the call that asked for it and keeps nothing of it,
// and nothing writes the bytes meanwhile.
func jsonOf(b []byte) (pgtype.Text, error) {
	return pgtype.Text{String: unsafe.String(unsafe.SliceData(b), len(b)), Valid: b != nil}, nil
}

// claimManySQL's columns, each a field of its claims' params.
type (
	claimID          fencingclaim.Request
	claimArgs        fencingclaim.Request
	claimAttemptedBy fencingclaim.Request
	claimKind        fencingclaim.Request
	claimMaxAttempts fencingclaim.Request
	claimMetadataOf  fencingclaim.Request
	claimPriority    fencingclaim.Request
	claimQueue       fencingclaim.Request
)

func (*claimID) of(r *fencingclaim.Request) any          { return (*claimID)(r) }
func (*claimArgs) of(r *fencingclaim.Request) any        { return (*claimArgs)(r) }
func (*claimAttemptedBy) of(r *fencingclaim.Request) any { return (*claimAttemptedBy)(r) }
func (*claimKind) of(r *fencingclaim.Request) any        { return (*claimKind)(r) }
func (*claimMaxAttempts) of(r *fencingclaim.Request) any { return (*claimMaxAttempts)(r) }
func (*claimMetadataOf) of(r *fencingclaim.Request) any  { return (*claimMetadataOf)(r) }
func (*claimPriority) of(r *fencingclaim.Request) any    { return (*claimPriority)(r) }
func (*claimQueue) of(r *fencingclaim.Request) any       { return (*claimQueue)(r) }

func (c *claimID) Int64Value() (pgtype.Int8, error)         { return int8Of(c.Params.ID) }
func (c *claimArgs) TextValue() (pgtype.Text, error)        { return jsonOf(c.Params.Args) }
func (c *claimAttemptedBy) TextValue() (pgtype.Text, error) { return textOf(c.Params.AttemptedBy) }
func (c *claimKind) TextValue() (pgtype.Text, error)        { return textOf(c.Params.Kind) }
func (c *claimMaxAttempts) Int64Value() (pgtype.Int8, error) {
	return int8Of(int64(c.Params.MaxAttempts))
}
func (c *claimMetadataOf) TextValue() (pgtype.Text, error) { return jsonOf(claimMetadata(&c.Params)) }
func (c *claimPriority) Int64Value() (pgtype.Int8, error) {
	return int8Of(int64(max(c.Params.Priority, 1)))
}
func (c *claimQueue) TextValue() (pgtype.Text, error) { return textOf(c.Params.Queue) }

// claimManyArgs are claimManySQL's arguments for claims: the lease's TTL,
// fresh lease tokens, and the claims' columns. The tokens come first: a
// worker's transaction makes room for all of a statement's arguments when
// it encodes the first of a type it sizes (lazytx).
func claimManyArgs(ttl string, claims []fencingclaim.Request) []any {
	type r = fencingclaim.Request
	return []any{ttl, mintLeaseTokens(len(claims)), column[r, *claimID](claims), column[r, *claimArgs](claims),
		column[r, *claimAttemptedBy](claims), column[r, *claimKind](claims), column[r, *claimMaxAttempts](claims),
		column[r, *claimMetadataOf](claims), column[r, *claimPriority](claims), column[r, *claimQueue](claims)}
}

// completeClaimedManySQL's columns, each a field of its completions.
type (
	completionJobID       fencingclaim.Completion
	completionToken       fencingclaim.Completion
	completionAttempt     fencingclaim.Completion
	completionFinalizedAt fencingclaim.Completion
	completionMetadata    fencingclaim.Completion
)

func (*completionJobID) of(c *fencingclaim.Completion) any       { return (*completionJobID)(c) }
func (*completionToken) of(c *fencingclaim.Completion) any       { return (*completionToken)(c) }
func (*completionAttempt) of(c *fencingclaim.Completion) any     { return (*completionAttempt)(c) }
func (*completionFinalizedAt) of(c *fencingclaim.Completion) any { return (*completionFinalizedAt)(c) }
func (*completionMetadata) of(c *fencingclaim.Completion) any    { return (*completionMetadata)(c) }

func (c *completionJobID) Int64Value() (pgtype.Int8, error)   { return int8Of(c.JobID) }
func (c *completionToken) TextValue() (pgtype.Text, error)    { return textOf(c.Token) }
func (c *completionAttempt) Int64Value() (pgtype.Int8, error) { return int8Of(int64(c.Attempt)) }
func (c *completionMetadata) TextValue() (pgtype.Text, error) { return jsonOf(c.Metadata) }
func (c *completionFinalizedAt) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: c.FinalizedAt, Valid: true}, nil
}

// completeClaimedManyArgs are completeClaimedManySQL's arguments for
// completions: their count, first as claimManyArgs's tokens are, and their
// columns (metadata a NULL array while none merges any).
func completeClaimedManyArgs(completions []fencingclaim.Completion) []any {
	type c = fencingclaim.Completion
	var metadata any = array.JSON(nil)
	if slices.ContainsFunc(completions, func(c c) bool { return c.Metadata != nil }) {
		metadata = column[c, *completionMetadata](completions)
	}
	return []any{int64(len(completions)), column[c, *completionJobID](completions), column[c, *completionToken](completions),
		column[c, *completionAttempt](completions), column[c, *completionFinalizedAt](completions), metadata}
}
