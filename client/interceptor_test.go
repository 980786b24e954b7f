package client_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
)

// headerInterceptor leaves headers in every start it wraps.
type headerInterceptor struct {
	client.InterceptorDefaults
	headers map[string]string
}

func (h *headerInterceptor) InterceptStart(ctx context.Context, info *client.StartInfo, next func(context.Context) (*client.Run, error)) (*client.Run, error) {
	info.Headers = h.headers
	return next(ctx)
}

func TestStartHeaders(t *testing.T) {
	t.Parallel()

	traceContext := func(ctx context.Context, t *testing.T, b *testBundle, run *client.Run) string {
		t.Helper()
		var stored string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT trace_context::text FROM "+b.names.Run+" WHERE run_id = $1", run.RunID).Scan(&stored))
		return stored
	}

	t.Run("NoneStoredAsEmpty", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := setup(ctx, t, nil)
		run, err := b.client.Start(ctx, orderArgs{ID: "a", Cents: 1}, nil)
		require.NoError(t, err)
		require.JSONEq(t, `{}`, traceContext(ctx, t, b, run))
	})

	t.Run("StoredWithTheRun", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		headers := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=b"}
		b := setup(ctx, t, &client.Config{Interceptors: []client.Interceptor{&headerInterceptor{headers: headers}}})
		run, err := b.client.Start(ctx, orderArgs{ID: "a", Cents: 1}, nil)
		require.NoError(t, err)
		require.JSONEq(t, `{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=b"}`,
			traceContext(ctx, t, b, run))
	})
}
