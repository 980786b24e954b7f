package dbtest

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Proxy is a TCP proxy in front of the test server, for cutting one client
// off from Postgres (a network partition) while others keep working. It
// listens on 127.0.0.1 and stops when the test ends.
type Proxy struct {
	listener net.Listener
	target   string
	url      string

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	cut   bool
	wg    sync.WaitGroup

	latency atomic.Int64 // time.Duration added to every chunk forwarded
}

// NewProxy starts a proxy to the server of connString (a postgres:// URL)
// and returns it; URL is connString pointed at the proxy.
func NewProxy(ctx context.Context, tb testing.TB, connString string) *Proxy {
	tb.Helper()
	u, err := url.Parse(connString)
	require.NoError(tb, err)
	require.True(tb, strings.HasPrefix(u.Scheme, "postgres"), "NewProxy needs a postgres:// URL")

	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	p := &Proxy{conns: make(map[net.Conn]struct{}), listener: listener, target: u.Host}
	proxied := *u
	proxied.Host = listener.Addr().String()
	p.url = proxied.String()

	p.wg.Go(p.accept)
	tb.Cleanup(p.close)
	return p
}

// URL is the connection string through the proxy.
func (p *Proxy) URL() string { return p.url }

// Cut drops every proxied connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for conn := range p.conns {
		_ = conn.Close()
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// SetLatency delays every chunk of bytes forwarded in either direction by d
// (a slow network); 0 removes the delay. It applies to open connections too.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

func (p *Proxy) close() {
	_ = p.listener.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			_ = client.Close()
			_ = server.Close()
			continue
		}
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()

		p.wg.Go(func() { p.pipe(client, server) })
		p.wg.Go(func() { p.pipe(server, client) })
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, &delayedReader{src: src, latency: &p.latency}) // a cut connection ends here
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// delayedReader delays each read that returned bytes by the proxy's latency
// at the time. It hides src's WriterTo so that io.Copy goes through Read.
type delayedReader struct {
	src     net.Conn
	latency *atomic.Int64
}

func (r *delayedReader) Read(b []byte) (int, error) {
	n, err := r.src.Read(b)
	if d := time.Duration(r.latency.Load()); n > 0 && d > 0 {
		time.Sleep(d) //nolint:forbidigo // the injected latency itself
	}
	return n, err
}
