package client

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// listener is the one connection a Client LISTENs on, for closed runs and
// answered queries. Every waiting Get or Query registers with it instead of
// holding a connection of its own.
type listener struct {
	channels []string
	logger   *slog.Logger
	pool     *pgxpool.Pool

	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	ready   chan struct{} // closed once LISTEN is in effect (or it gave up)
	waiters map[waitKey]map[chan struct{}]struct{}
}

// waitKey is what a waiter waits for: a notification on channel with
// payload.
type waitKey struct {
	channel string
	payload string
}

func newListener(pool *pgxpool.Pool, channels []string, logger *slog.Logger) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{
		cancel:   cancel,
		channels: channels,
		done:     make(chan struct{}),
		logger:   logger,
		pool:     pool,
		ready:    make(chan struct{}),
		waiters:  make(map[waitKey]map[chan struct{}]struct{}),
	}
	go l.run(ctx)
	return l
}

// register returns a channel that receives a value when a notification on
// channel with payload may have been sent (it was, or a reconnect may have
// missed it), and a function to unregister it.
func (l *listener) register(channel, payload string) (<-chan struct{}, func()) {
	key := waitKey{channel: channel, payload: payload}
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	if l.waiters[key] == nil {
		l.waiters[key] = make(map[chan struct{}]struct{})
	}
	l.waiters[key][ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.waiters[key], ch)
		if len(l.waiters[key]) == 0 {
			delete(l.waiters, key)
		}
	}
}

// waitReady waits until LISTEN is in effect, so a state read after it cannot
// miss the notification of a close that happens later. It gives up after
// limit: polling still finds the close.
func (l *listener) waitReady(ctx context.Context, limit time.Duration) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-l.ready:
	case <-ctx.Done():
	case <-timer.C:
	}
}

func (l *listener) close() {
	l.cancel()
	<-l.done
}

func (l *listener) notify(key waitKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.waiters[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (l *listener) notifyAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, chans := range l.waiters {
		for ch := range chans {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

func (l *listener) run(ctx context.Context) {
	defer close(l.done)
	readyOnce := sync.OnceFunc(func() { close(l.ready) })
	defer readyOnce()

	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listenOnce(ctx, readyOnce)
		if ctx.Err() != nil {
			return
		}
		l.logger.Warn("weir client: result listener lost its connection; waiters fall back to polling until it is back",
			slog.String("error", err.Error()))
		// Closes may have happened while we were not listening.
		l.notifyAll()
		readyOnce() // don't hold up waiters: they poll meanwhile
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (l *listener) listenOnce(ctx context.Context, ready func()) error {
	conn, err := pgx.ConnectConfig(ctx, l.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	for _, channel := range l.channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
			return err
		}
	}
	// A reconnect may have missed notifications.
	l.notifyAll()
	ready()

	for {
		notification, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.notify(waitKey{channel: notification.Channel, payload: notification.Payload})
	}
}
