package worker

import "context"

// StartOnSchemaBehind starts w without refusing a schema behind this build,
// for tests of a migration's rollout that start a worker before the
// migration.
func StartOnSchemaBehind(ctx context.Context, w *Worker) error {
	w.mu.Lock()
	w.schemaBehindOK = true
	w.mu.Unlock()
	return w.Start(ctx)
}
