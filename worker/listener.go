package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// listenRetry is how long a listener waits before reconnecting.
const listenRetry = time.Second

// listen holds a connection of its own that LISTENs on the channels that
// channelsOf names (it may ask the connection, e.g. for current_schema()) and
// calls notify for every notification, until ctx ends. Each time LISTEN has
// taken effect (at first and after a reconnect) it calls notify(nil):
// whatever was sent before may have been missed. A lost connection is
// logged (what names the listener and what covers for it meanwhile) and
// made again a second later.
func (w *Worker) listen(ctx context.Context, what string, channelsOf func(ctx context.Context, conn *pgx.Conn) ([]string, error),
	notify func(*pgconn.Notification),
) {
	for ctx.Err() == nil {
		err := func() error {
			conn, err := pgx.ConnectConfig(ctx, w.pool.Config().ConnConfig.Copy())
			if err != nil {
				return err
			}
			defer conn.Close(context.WithoutCancel(ctx))
			channels, err := channelsOf(ctx, conn)
			if err != nil {
				return err
			}
			for _, channel := range channels {
				if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
					return err
				}
			}
			notify(nil)
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					return err
				}
				notify(n)
			}
		}()
		if ctx.Err() != nil {
			return
		}
		w.config.Logger.WarnContext(ctx, "weir: "+what, slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(listenRetry):
		}
	}
}
