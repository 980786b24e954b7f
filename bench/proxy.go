package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Protocol codes of the requests a client may send before its startup
// message (each answered by one byte, not a message).
const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
)

// counts are what a countingProxy has seen since it started.
type counts struct {
	// Connections is how many connections were proxied.
	Connections int64

	// RoundTrips counts ReadyForQuery messages after the first of each
	// connection (the end of its startup): one per Sync of the extended
	// protocol or per simple Query.
	RoundTrips int64

	// Statements counts CommandComplete messages.
	Statements int64

	// Transactions counts transaction ends: a ReadyForQuery with status idle
	// ('I') after one in a transaction block ('T') or a failed one ('E'),
	// or after another idle one (an implicit, autocommit transaction).
	Transactions int64
}

// sub returns c minus o.
func (c counts) sub(o counts) counts {
	return counts{
		Connections:  c.Connections - o.Connections,
		RoundTrips:   c.RoundTrips - o.RoundTrips,
		Statements:   c.Statements - o.Statements,
		Transactions: c.Transactions - o.Transactions,
	}
}

// countingProxy is a TCP proxy in front of Postgres that reads the
// server's side of the wire protocol to count round trips, statements and
// transactions. It does not support TLS: connect with sslmode=disable.
// With a delay it also puts Postgres a network hop away: everything it
// forwards after a connection's startup, either way, arrives delay later.
type countingProxy struct {
	listener net.Listener
	target   string
	url      string
	delay    time.Duration

	connections, roundTrips, statements, transactions atomic.Int64

	// detail makes the proxy count round trips by statement too
	// (detailCounts).
	detail bool

	// busy records when Postgres had a request of these connections to
	// answer.
	busy busyClock

	mu           sync.Mutex
	conns        map[net.Conn]struct{}
	detailCounts map[string]int64
	wg           sync.WaitGroup
}

// newCountingProxy starts a proxy to the server of connString (a
// postgres:// URL) on 127.0.0.1.
// With detail it also counts round trips by the statement that opened them
// (detailSnapshot); with a delay it delays each direction by that much.
func newCountingProxy(ctx context.Context, connString string, detail bool, delay time.Duration) (*countingProxy, error) {
	u, err := url.Parse(connString)
	if err != nil {
		return nil, err
	}
	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{
		listener: listener, target: u.Host, detail: detail, delay: delay,
		conns: map[net.Conn]struct{}{}, detailCounts: map[string]int64{},
	}
	proxied := *u
	proxied.Host = listener.Addr().String()
	q := proxied.Query()
	q.Set("sslmode", "disable")
	proxied.RawQuery = q.Encode()
	p.url = proxied.String()
	p.wg.Go(p.accept)
	return p, nil
}

// URL is the connection string through the proxy.
func (p *countingProxy) URL() string { return p.url }

// snapshot returns the counts so far.
func (p *countingProxy) snapshot() counts {
	return counts{
		Connections:  p.connections.Load(),
		RoundTrips:   p.roundTrips.Load(),
		Statements:   p.statements.Load(),
		Transactions: p.transactions.Load(),
	}
}

// Close stops accepting, drops every connection and waits for the
// forwarding goroutines.
func (p *countingProxy) Close() error {
	err := p.listener.Close()
	p.mu.Lock()
	for conn := range p.conns {
		_ = conn.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *countingProxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
}

func (p *countingProxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *countingProxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

func (p *countingProxy) serve(client net.Conn) {
	server, err := (&net.Dialer{}).Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.track(client, server)
	defer p.untrack(client, server)
	p.connections.Add(1)

	serverReader := bufio.NewReaderSize(server, 64<<10)
	if err := relayStartup(client, server, serverReader); err != nil {
		return
	}
	var toClient, toServer io.Writer = client, server
	if p.delay > 0 {
		delayedClient, delayedServer := newDelayWriter(client, p.delay), newDelayWriter(server, p.delay)
		defer delayedClient.Close()
		defer delayedServer.Close()
		toClient, toServer = delayedClient, delayedServer
	}
	done := make(chan struct{})
	var outstanding atomic.Int64 // this connection's requests not yet answered
	go func() {
		defer close(done)
		_ = p.relayClient(client, toServer, &outstanding)
		_ = server.Close()
	}()
	_ = p.relayServer(serverReader, toClient, &outstanding)
	_ = client.Close()
	<-done
}

// relayStartup forwards SSL and GSS encryption requests (refused answers
// only) and then the startup message from client to server.
func relayStartup(client, server net.Conn, serverReader *bufio.Reader) error {
	for {
		var head [8]byte
		if _, err := io.ReadFull(client, head[:]); err != nil {
			return err
		}
		length := int(binary.BigEndian.Uint32(head[:4]))
		code := binary.BigEndian.Uint32(head[4:])
		if _, err := server.Write(head[:]); err != nil {
			return err
		}
		if code == sslRequestCode || code == gssEncRequestCode {
			answer, err := serverReader.ReadByte()
			if err != nil {
				return err
			}
			if _, err := client.Write([]byte{answer}); err != nil {
				return err
			}
			if answer != 'N' {
				return errors.New("counting proxy: the server accepted encryption; connect with sslmode=disable")
			}
			continue
		}
		if length < 8 {
			return fmt.Errorf("counting proxy: bad startup message length %d", length)
		}
		_, err := io.CopyN(server, client, int64(length-8))
		return err
	}
}

// relayServer copies the server's messages to the client, counting; each
// ReadyForQuery answers one of the connection's outstanding requests.
func (p *countingProxy) relayServer(r *bufio.Reader, client io.Writer, outstanding *atomic.Int64) error {
	w := bufio.NewWriterSize(client, 64<<10)
	c := messageCounter{}
	var head [5]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		if _, err := w.Write(head[:]); err != nil {
			return err
		}
		body := int64(binary.BigEndian.Uint32(head[1:])) - 4
		switch {
		case head[0] == 'Z' && body == 1:
			status, err := r.ReadByte()
			if err != nil {
				return err
			}
			if err := w.WriteByte(status); err != nil {
				return err
			}
			roundTrip, tx := c.readyForQuery(status)
			if roundTrip {
				p.roundTrips.Add(1)
			}
			if n := outstanding.Load(); n > 0 && outstanding.CompareAndSwap(n, n-1) {
				p.busy.answered(time.Now())
			}
			if tx {
				p.transactions.Add(1)
			}
		default:
			if head[0] == 'C' {
				p.statements.Add(1)
			}
			if _, err := io.CopyN(w, r, body); err != nil {
				return err
			}
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// messageCounter follows one connection's transaction status.
type messageCounter struct {
	started bool // the startup's ReadyForQuery was seen
	status  byte // the last ReadyForQuery's status
}

// readyForQuery takes a ReadyForQuery's status and reports whether it ends a
// round trip and a transaction.
func (c *messageCounter) readyForQuery(status byte) (roundTrip, tx bool) {
	prev := c.status
	c.status = status
	if !c.started {
		c.started = true
		return false, false
	}
	return true, status == 'I' && (prev == 'I' || prev == 'T' || prev == 'E')
}

// detailSnapshot returns the round trips so far by statement: the SQL of
// the first Query, or of the first Bind's prepared statement (or Parse),
// since the previous Sync. Empty without detail.
func (p *countingProxy) detailSnapshot() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.detailCounts)
}

// relayClient copies the client's messages (after the startup) to the
// server. Each Sync or Query is a request the server answers with a
// ReadyForQuery (outstanding); with detail it is attributed to a statement.
func (p *countingProxy) relayClient(client net.Conn, server io.Writer, outstanding *atomic.Int64) error {
	r := bufio.NewReaderSize(client, 64<<10)
	w := bufio.NewWriterSize(server, 64<<10)
	prepared := map[string]string{} // statement name -> SQL, per connection
	label := ""                     // the statement of the round trip being sent
	var head [5]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return err
		}
		body := make([]byte, int(binary.BigEndian.Uint32(head[1:]))-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return err
		}
		switch head[0] {
		case 'P': // Parse: name, query
			name, rest := cString(body)
			query, _ := cString(rest)
			prepared[name] = query
			if label == "" {
				label = query
			}
		case 'B': // Bind: portal, statement
			_, rest := cString(body)
			name, _ := cString(rest)
			if q, ok := prepared[name]; ok && label == "" {
				label = q
			}
		case 'C': // Close: 'S' or 'P', name
			if len(body) > 0 && body[0] == 'S' {
				name, _ := cString(body[1:])
				delete(prepared, name)
			}
		case 'Q', 'S':
			outstanding.Add(1)
			p.busy.sent(time.Now())
			if head[0] == 'Q' {
				label, _ = cString(body)
			}
			if p.detail {
				p.mu.Lock()
				p.detailCounts[statementLabel(label)]++
				p.mu.Unlock()
			}
			label = ""
		}
		if _, err := w.Write(head[:]); err != nil {
			return err
		}
		if _, err := w.Write(body); err != nil {
			return err
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// cString splits a NUL-terminated string off b.
func cString(b []byte) (string, []byte) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return string(b), nil
	}
	return string(b[:i]), b[i+1:]
}

// statementLabel shortens SQL to a label: comments dropped, whitespace
// collapsed, at most 120 characters.
func statementLabel(sql string) string {
	var lines []string
	for line := range strings.SplitSeq(sql, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		lines = append(lines, line)
	}
	label := strings.Join(strings.Fields(strings.Join(lines, " ")), " ")
	if label == "" {
		return "(none)"
	}
	if len(label) > 120 {
		label = label[:120] + "…"
	}
	return label
}

// busyClock records the spans of time in which the server had at least one
// request of the proxied connections to answer: from a request sent while
// none was outstanding to the answer of the last outstanding one.
type busyClock struct {
	mu          sync.Mutex
	outstanding int
	since       time.Time
	spans       []timeSpan
}

// timeSpan is [from, to).
type timeSpan struct{ from, to time.Time }

// busySpansMax bounds the spans a busyClock keeps (the oldest are kept).
const busySpansMax = 1 << 20

func (b *busyClock) sent(at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.outstanding == 0 {
		b.since = at
	}
	b.outstanding++
}

func (b *busyClock) answered(at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.outstanding == 0 {
		return
	}
	if b.outstanding--; b.outstanding == 0 && len(b.spans) < busySpansMax {
		b.spans = append(b.spans, timeSpan{b.since, at})
	}
}

// within returns how long the server was busy between from and to, and in
// how many separate spans (a span cut by the window counts).
func (b *busyClock) within(from, to time.Time) (busy time.Duration, spans int) {
	for _, s := range b.cut(from, to) {
		busy += s.to.Sub(s.from)
		spans++
	}
	return busy, spans
}

// path returns the window from..to as the server saw it, in order: the
// time before its first busy span, that span, the time to the next span,
// and so on, ending with the time after the last span (zero when a span
// reaches to). A window with no busy span is one entry: all of it.
func (b *busyClock) path(from, to time.Time) []time.Duration {
	var out []time.Duration
	at := from
	for _, s := range b.cut(from, to) {
		out = append(out, s.from.Sub(at), s.to.Sub(s.from))
		at = s.to
	}
	return append(out, to.Sub(at))
}

// cut returns the busy spans between from and to, cut at both ends, in
// order; spans the window only touches are left out.
func (b *busyClock) cut(from, to time.Time) []timeSpan {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Spans are appended in order of their ends, which are also in order
	// of their starts (they do not overlap).
	i, _ := slices.BinarySearchFunc(b.spans, from, func(s timeSpan, t time.Time) int { return s.to.Compare(t) })
	var out []timeSpan
	for ; i < len(b.spans) && b.spans[i].from.Before(to); i++ {
		s := b.spans[i]
		if s.from.Before(from) {
			s.from = from
		}
		if s.to.After(to) {
			s.to = to
		}
		if s.to.After(s.from) {
			out = append(out, s)
		}
	}
	return out
}

// delayWriter writes what it is given to its destination delay later, in
// order, without holding up the writer: a link with delay's latency and the
// destination's bandwidth.
type delayWriter struct {
	dst    io.Writer
	delay  time.Duration
	chunks chan delayedChunk
	done   chan struct{}
	err    atomic.Pointer[error] // the destination's first write error
}

// delayedChunk is data due to be written at due.
type delayedChunk struct {
	due  time.Time
	data []byte
}

// delayWriterQueue bounds the chunks in flight on one delayWriter; a writer
// that gets that far ahead waits.
const delayWriterQueue = 4096

func newDelayWriter(dst io.Writer, delay time.Duration) *delayWriter {
	d := &delayWriter{dst: dst, delay: delay, chunks: make(chan delayedChunk, delayWriterQueue), done: make(chan struct{})}
	go d.run()
	return d
}

// Write queues a copy of b; it fails once the destination failed.
func (d *delayWriter) Write(b []byte) (int, error) {
	if err := d.err.Load(); err != nil {
		return 0, *err
	}
	d.chunks <- delayedChunk{due: time.Now().Add(d.delay), data: bytes.Clone(b)}
	return len(b), nil
}

// Close writes what is queued (or drops it once the destination failed)
// and stops; no Write may follow.
func (d *delayWriter) Close() {
	close(d.chunks)
	<-d.done
}

func (d *delayWriter) run() {
	defer close(d.done)
	for c := range d.chunks {
		if d.err.Load() != nil {
			continue // drain, so that Write never blocks on a dead link
		}
		if wait := time.Until(c.due); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := d.dst.Write(c.data); err != nil {
			d.err.Store(&err)
		}
	}
}
