// Package notifier sends Postgres notifications after the transactions they
// announce have committed, many in one statement.
//
// A NOTIFY inside a writing transaction serializes its commit: Postgres takes
// one database-wide lock in PreCommit_Notify and holds it until the commit
// record is flushed, so every notifying transaction waits for the previous
// one's WAL flush and none of them share one (no group commit). Sent on its
// own after the commit, the same notification holds that lock for
// microseconds: a transaction that only notifies writes no WAL of its own,
// so its commit flushes nothing.
//
// The price is that a notification is lost if the process dies between the
// commit and the send. Weir's notifications are wake-ups, never the truth:
// everyone who waits for one also polls what it announces, so a lost one
// costs a poll interval, nothing else.
package notifier

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/internal/store"
)

// sendTimeout bounds one send: a notification that cannot go in this long
// is dropped (its waiters poll).
const sendTimeout = 5 * time.Second

// Notifier sends notifications on a pool, after their transactions commit.
// Notify never blocks: the first notification goes out at once, and those
// that come while a send is in flight go together in the next one. The
// zero value is not usable; make one with New.
type Notifier struct {
	pool   *pgxpool.Pool
	logger *slog.Logger

	mu       sync.Mutex
	channels []string
	payloads []string
	pending  map[[2]string]bool // channels and payloads, once each
	sending  bool               // a goroutine is sending (and will take what is pending)
	closed   bool
	done     sync.WaitGroup
}

// New returns a Notifier that sends on pool and logs failed sends to logger
// (slog.Default() if nil).
func New(pool *pgxpool.Pool, logger *slog.Logger) *Notifier {
	if logger == nil {
		logger = slog.Default()
	}
	return &Notifier{pool: pool, logger: logger}
}

// Notify sends payload on channel soon, without waiting. Call it once the
// transaction whose work the notification announces has committed. One
// that is pending already is not sent twice. After Close it does nothing.
func (n *Notifier) Notify(channel, payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || n.pending[[2]string{channel, payload}] {
		return
	}
	if n.pending == nil {
		n.pending = map[[2]string]bool{}
	}
	n.pending[[2]string{channel, payload}] = true
	n.channels = append(n.channels, channel)
	n.payloads = append(n.payloads, payload)
	if n.sending {
		return
	}
	n.sending = true
	n.done.Add(1)
	go n.send()
}

// send sends what is pending, and again what came meanwhile, until nothing
// is pending.
func (n *Notifier) send() {
	defer n.done.Done()
	for {
		n.mu.Lock()
		channels, payloads := n.channels, n.payloads
		n.channels, n.payloads = nil, nil
		clear(n.pending)
		if len(channels) == 0 {
			n.sending = false
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
		err := store.Notify(ctx, n.pool, channels, payloads)
		cancel()
		if err != nil {
			n.logger.Warn("weir: sending notifications failed; their waiters poll",
				slog.Int("notifications", len(channels)), slog.String("error", err.Error()))
		}
	}
}

// Close sends what is pending and waits for it (until ctx ends); later
// notifications are dropped. Close it before the pool.
func (n *Notifier) Close(ctx context.Context) error {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	idle := make(chan struct{})
	go func() {
		n.done.Wait()
		close(idle)
	}()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
