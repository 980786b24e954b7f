package fencing

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// reaperElection chooses, among the fenced processes of a schema, the one
// that runs its lease reaper: the holder of a session-level advisory lock
// keyed on the schema (reaperLockSQL), not River's leader, which may be a
// plain riverpgxv5 process during a rollout. The winner reaps on the session
// it won on, taken out of the pool, so it never reaps after its session
// ended (docs/operations.md); the session is replaced once it outlives the
// pool's MaxConnLifetime, and closed when the reaper stops.
type reaperElection struct {
	mu     sync.Mutex
	conn   *pgx.Conn       // the session holding this process's reaper locks; nil: none
	opened time.Time       // when conn was taken from the pool
	held   map[string]bool // schemas whose reaper lock conn holds
}

// reaperLockSQL tries to take the reaper lock of schema $1 ("" for the
// session's current schema, so that clients naming their schema and clients
// using the search_path contend for one lock) without waiting.
const reaperLockSQL = `SELECT pg_try_advisory_lock(hashtextextended('weir.fencing.reaper:' || coalesce(nullif($1::text, ''), current_schema(), ''), 0))`

// reaperIdleTimeoutMin is the least idle_session_timeout of the session
// holding the reaper locks.
const reaperIdleTimeoutMin = 10 * time.Second

// reaperIdleTimeout is how long the session holding the reaper locks may
// stay idle before the server ends it: three reaper intervals, at least
// reaperIdleTimeoutMin.
func (d *Driver) reaperIdleTimeout() time.Duration {
	return max(3*d.config.ReaperInterval, reaperIdleTimeoutMin)
}

// eligible reports whether the client whose service context is ctx takes
// part in the election (it does not with River's LeaderElectionDisabled),
// and notes the client's schema for the reaper.
func (e *reaperElection) eligible(ctx context.Context, p *pilot) bool {
	client, _ := river.ClientFromContextSafely[pgx.Tx](ctx)
	if client == nil {
		return true
	}
	p.noteSchema(client.Schema())
	return !clientLeaderElectionDisabled(client)
}

// clientLeaderElectionDisabled reads LeaderElectionDisabled from a River
// client's configuration. River exposes no accessor; the fencing
// conformance test fails if this stops working.
func clientLeaderElectionDisabled(client *river.Client[pgx.Tx]) bool {
	config := reflect.ValueOf(client).Elem().FieldByName("config")
	if !config.IsValid() || config.Kind() != reflect.Pointer || config.IsNil() {
		return false
	}
	field := config.Elem().FieldByName("LeaderElectionDisabled")
	return field.IsValid() && field.Kind() == reflect.Bool && field.Bool()
}

// hold returns the session holding schema's reaper lock if this process
// holds it or takes it now; nil if another process holds it.
func (e *reaperElection) hold(ctx context.Context, d *Driver, schema string) (*pgx.Conn, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if lifetime := d.pool.Config().MaxConnLifetime; e.conn != nil && lifetime > 0 && time.Since(e.opened) >= lifetime {
		e.closeConn()
	}
	if e.conn != nil {
		if e.held[schema] {
			return e.conn, nil
		}
		var won bool
		if err := e.conn.QueryRow(ctx, reaperLockSQL, schema).Scan(&won); err != nil {
			e.dropIfUnfit(ctx, d, err)
			return nil, fmt.Errorf("taking the reaper lock of schema %q: %w", schema, err)
		}
		if !won {
			return nil, nil
		}
		e.held[schema] = true
		d.logger().InfoContext(ctx, "fencing: this process reaps expired leases", slog.String("schema", schema))
		return e.conn, nil
	}
	return e.takeFromPool(ctx, d, schema)
}

// takeFromPool tries to take schema's reaper lock on a connection of the
// pool, and keeps the connection if it did. A connection whose try failed
// midway may hold the lock: it is closed, never returned to the pool.
func (e *reaperElection) takeFromPool(ctx context.Context, d *Driver, schema string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.config.ReaperInterval)
	defer cancel()
	pooled, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("taking the reaper lock of schema %q: %w", schema, err)
	}
	var won bool
	if err := pooled.Conn().QueryRow(ctx, reaperLockSQL, schema).Scan(&won); err != nil {
		closeSession(pooled.Hijack())
		return nil, fmt.Errorf("taking the reaper lock of schema %q: %w", schema, err)
	}
	if !won {
		pooled.Release()
		return nil, nil
	}
	conn := pooled.Hijack()
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET idle_session_timeout = %d", d.reaperIdleTimeout().Milliseconds())); err != nil {
		closeSession(conn)
		return nil, fmt.Errorf("setting idle_session_timeout of the reaper's session: %w", err)
	}
	e.conn, e.opened, e.held = conn, time.Now(), map[string]bool{schema: true}
	d.logger().InfoContext(ctx, "fencing: this process reaps expired leases", slog.String("schema", schema))
	return conn, nil
}

// lost closes the session holding the reaper locks if err, from a statement
// on it, says it is closed or unfit: its locks are gone with it, or soon.
func (e *reaperElection) lost(ctx context.Context, d *Driver, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropIfUnfit(ctx, d, err)
}

// dropIfUnfit is lost for a caller that holds e.mu.
func (e *reaperElection) dropIfUnfit(ctx context.Context, d *Driver, err error) {
	if e.conn == nil || (!e.conn.IsClosed() && !connUnfit(err)) {
		return
	}
	d.logger().WarnContext(ctx, "fencing: this process no longer reaps expired leases: its session ended",
		slog.String("error", err.Error()))
	e.closeConn()
}

// resign gives up every reaper lock of this process (the reaper stops).
func (e *reaperElection) resign() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closeConn()
}

// closeConn closes the session holding the reaper locks, which releases
// them. The caller holds e.mu.
func (e *reaperElection) closeConn() {
	if e.conn == nil {
		return
	}
	closeSession(e.conn)
	e.conn, e.held = nil, nil
}

// closeSession closes conn within a few seconds.
func closeSession(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
