package lazytx

import (
	"errors"
	"reflect"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weirhq/weir/internal/array"
)

// Room for what a batch sends, made before pgx encodes it. pgx encodes a
// statement's arguments into a buffer of its connection that it shrinks
// back to 256 bytes for every statement, and a batch's messages into a
// write buffer that it shrinks back to 1 KiB after every batch; both grow
// as values are appended to them, each step a copy of all before it. A
// group's statements carry arrays of tens of kilobytes, which cost several
// times their size in allocations so (docs/decisions/0028). So a batch's
// statements that carry more than pgx keeps have an argument wrapped
// (sized: the first of a type it wraps) that makes room for all of the
// statement's arguments at once, and the write buffer grows once by the
// batch's size (room). Either is only capacity: what is sent is pgx's
// encoding of the same values.
//
// sized needs a wrapper in the connection's type map (sizing adds it): it
// matches only sized arguments, and leaves every other value to the
// wrappers after it.
//
// A batch whose statements are new to the connection is sent after pgx
// prepared them, in a round trip of its own whose write buffer pgx drops
// once sent (Frontend.Flush), room and all; a sized argument is encoded
// after that, before its statement's Bind is written, and makes the write
// buffer's room again if it is not the one the batch made (again).
//
// The room comes from buffers the connection keeps (its own, never another
// connection's) from one batch to the next, up to keptMax bytes each: pgx
// is done with a write buffer once it wrote it and with an argument buffer
// once the statement's Bind is encoded, and a connection is used by one
// caller at a time, so a buffer lent to the same connection again can hold
// nothing of pgx's that is still to be sent (docs/decisions/0036).

// roomFor returns b, or a copy whose statements make room for their
// arguments (sized), and makes room in conn's write buffer for what it
// sends.
func roomFor(conn *pgx.Conn, b *pgx.Batch) *pgx.Batch {
	kept := keptOf(conn)
	kept.again.n = 0
	wraps := kept.sizing(conn)
	total, out := 0, b
	for i, q := range b.QueuedQueries {
		n := 0
		for _, a := range q.Arguments {
			n += sizeOf(a)
		}
		total += 96 + n // Bind and Execute, their framing and the statement's name
		if !wraps || n <= paramsKept {
			continue
		}
		for j, a := range q.Arguments {
			wrapped, ok := sizedArg(a, n)
			if !ok {
				continue
			}
			if out == b {
				c := *b // its BEGIN's options too, if it has one
				c.QueuedQueries = slices.Clone(b.QueuedQueries)
				out = &c
			}
			c := *q
			c.Arguments = slices.Clone(q.Arguments)
			c.Arguments[j] = wrapped
			out.QueuedQueries[i] = &c
			break
		}
	}
	if total > writeKept && !conn.PgConn().IsClosed() {
		conn.PgConn().Frontend().Send(room{n: total, kept: kept})
	}
	return out
}

// What pgx keeps of its buffers from one statement (arguments) and one
// batch (write buffer) to the next, and the most a connection keeps of
// each of its own (larger batches make room as pgx would grow).
const (
	paramsKept = 256
	writeKept  = 1024
	keptMax    = 512 << 10
)

// kept are the buffers a connection lends pgx for room.
type kept struct {
	write, args []byte
	decided     bool // whether the connection wraps sized arguments is known
	wraps       bool
	// again makes the room of the batch being sent again if pgx dropped
	// write (sized arguments send it), when that room is write's.
	again again
	front *pgproto3.Frontend // the connection's
	// pg is the connection. Once it is closed its frontend is pgx's
	// closing goroutine's (it sends Terminate): room is made only before.
	pg *pgconn.PgConn
}

// keptKey is kept's key in a connection's custom data.
const keptKey = "weir/lazytx.kept"

// keptOf returns conn's kept buffers.
func keptOf(conn *pgx.Conn) *kept {
	data := conn.PgConn().CustomData()
	k, ok := data[keptKey].(*kept)
	if !ok {
		k = &kept{front: conn.PgConn().Frontend(), pg: conn.PgConn()}
		k.again.kept = k
		data[keptKey] = k
	}
	return k
}

// lend returns dst's bytes with room for n more, in *buf when they fit in
// keptMax (which then keeps the larger buffer for the next lend). A kept
// buffer has a quarter more than asked: estimates run a little short (a
// statement's name and format codes), and pgx would copy all of it to grow.
func lend(buf *[]byte, dst []byte, n int) []byte {
	need := len(dst) + n + n/4
	if need > keptMax {
		return slices.Grow(dst, n)
	}
	if cap(*buf) < need {
		*buf = slices.Grow((*buf)[:0], need)
	}
	return append((*buf)[:0], dst...) // dst may be *buf itself, if pgx kept it
}

// sizeOf is what argument a takes in pgx's binary formats: as it tells
// (fencing's arrays), else as argSize estimates. It is apart from argSize,
// whose argument must not escape: its cases box slices again.
func sizeOf(a any) int {
	if s, ok := a.(interface{ EncodedSize() int }); ok {
		return s.EncodedSize()
	}
	return argSize(a)
}

// argSize estimates what argument a takes in pgx's binary formats.
func argSize(a any) int {
	switch v := a.(type) {
	case string:
		return 4 + len(v)
	case []byte:
		return 4 + len(v)
	case [][]byte:
		n := 24
		for _, e := range v {
			n += 4 + len(e)
		}
		return n
	case []string:
		n := 24
		for _, e := range v {
			n += 4 + len(e)
		}
		return n
	case []*string:
		n := 24
		for _, e := range v {
			n += 4
			if e != nil {
				n += len(*e)
			}
		}
		return n
	case array.Texts:
		return argSize([]string(v))
	case array.Bytes:
		return argSize([][]byte(v))
	case array.JSON:
		return argSize([][]byte(v))
	case []pgtype.UUID, array.UUIDs:
		return 24 + 20*reflect.ValueOf(v).Len()
	case []int64, []time.Time, []*int64, []*time.Time, array.Int64s, array.NullInt64s, array.Times, array.NullTimes:
		return 24 + 12*reflect.ValueOf(v).Len()
	case []int32:
		return 24 + 8*len(v)
	}
	if v := reflect.ValueOf(a); v.Kind() == reflect.Slice {
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return 4 + v.Len()
		}
		return 24 + 20*v.Len() // an array of scalars, each up to a UUID
	}
	return 24
}

// room is a frontend message that sends nothing: encoding it gives the
// write buffer room for n more bytes, and notes in kept whether that room
// is kept's (again).
type room struct {
	n    int
	kept *kept
}

func (r room) Encode(dst []byte) ([]byte, error) {
	out := lend(&r.kept.write, dst, r.n)
	r.kept.again.n = 0
	if r.kept.lent(out) {
		r.kept.again.n = r.n
	}
	return out, nil
}
func (room) Decode([]byte) error { return errors.New("lazytx: room is never received") }
func (room) Frontend()           {}

// again is a frontend message that sends nothing: encoding it makes a
// batch's room (n bytes, none if 0) again unless the write buffer is
// still the one lent for it.
type again struct {
	n    int
	kept *kept
}

func (a *again) Encode(dst []byte) ([]byte, error) {
	if a.n == 0 || a.kept.lent(dst) {
		return dst, nil
	}
	return room{n: a.n, kept: a.kept}.Encode(dst)
}
func (*again) Decode([]byte) error { return errors.New("lazytx: room is never received") }
func (*again) Frontend()           {}

// lent reports whether b is k's write buffer.
func (k *kept) lent(b []byte) bool {
	return cap(b) > 0 && cap(k.write) > 0 && &b[:1][0] == &k.write[:1][0]
}

// sized is an argument that pgx encodes as v, after it made room for n
// bytes. One type per value type: pgx keeps a plan per argument type.
type sized[T any] struct {
	v T
	n int
}

func (s sized[T]) unwrap() (any, int) { return s.v, s.n }

// sizedArg wraps a, an argument of a statement whose arguments take n
// bytes, if it is of a type weir's statements carry; not a string, whose
// format pgx chooses by its type.
func sizedArg(a any, n int) (any, bool) {
	switch v := a.(type) {
	case []pgtype.UUID:
		return sized[[]pgtype.UUID]{v, n}, v != nil
	case pgtype.UUID:
		return sized[pgtype.UUID]{v, n}, true
	case []int64:
		return sized[[]int64]{v, n}, v != nil
	case int64:
		return sized[int64]{v, n}, true
	case [][]byte:
		return sized[[][]byte]{v, n}, v != nil
	case []string:
		return sized[[]string]{v, n}, v != nil
	case []int32:
		return sized[[]int32]{v, n}, v != nil
	case []time.Time:
		return sized[[]time.Time]{v, n}, v != nil
	case array.UUIDs:
		return sized[array.UUIDs]{v, n}, v != nil
	case array.Int64s:
		return sized[array.Int64s]{v, n}, v != nil
	case array.Texts:
		return sized[array.Texts]{v, n}, v != nil
	case array.Bytes:
		return sized[array.Bytes]{v, n}, v != nil
	case array.JSON:
		return sized[array.JSON]{v, n}, v != nil
	case array.Times:
		return sized[array.Times]{v, n}, v != nil
	}
	return a, false
}

// sizing reports whether conn encodes sized arguments: it does once its
// type map has k's wrapper, which sizing adds, for the extended protocol
// with described statements (the simple protocol and the exec mode encode
// arguments otherwise).
func (k *kept) sizing(conn *pgx.Conn) bool {
	if k.decided {
		return k.wraps
	}
	k.decided = true
	switch conn.Config().DefaultQueryExecMode { // a copy: read only until the wrapper is in
	case pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec:
		return false
	}
	m := conn.TypeMap()
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{k.trySized}, m.TryWrapEncodePlanFuncs...)
	k.wraps = true
	return true
}

// trySized is the type map's wrapper of sized arguments (no other).
func (k *kept) trySized(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	s, ok := value.(interface{ unwrap() (any, int) })
	if !ok {
		return nil, nil, false
	}
	v, _ := s.unwrap()
	return &sizedPlan{kept: k}, v, true
}

type sizedPlan struct {
	next pgtype.EncodePlan
	kept *kept
}

func (p *sizedPlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *sizedPlan) Encode(value any, buf []byte) ([]byte, error) {
	v, n := value.(interface{ unwrap() (any, int) }).unwrap()
	if !p.kept.pg.IsClosed() {
		p.kept.front.Send(&p.kept.again)
	}
	return p.next.Encode(v, lend(&p.kept.args, buf, n))
}
