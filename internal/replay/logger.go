package replay

import (
	"context"
	"log/slog"
)

// replayHandler drops records while workflow code replays history.
type replayHandler struct {
	inner     slog.Handler
	replaying func() bool
}

func (h *replayHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return !h.replaying() && h.inner.Enabled(ctx, level)
}

func (h *replayHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.replaying() {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *replayHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &replayHandler{inner: h.inner.WithAttrs(attrs), replaying: h.replaying}
}

func (h *replayHandler) WithGroup(name string) slog.Handler {
	return &replayHandler{inner: h.inner.WithGroup(name), replaying: h.replaying}
}
