package server

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/migrations"
)

// Server serves weir's HTTP endpoints: the JSON API under /api/v1, its
// OpenAPI document, /healthz, /readyz and /metrics, and the web UI under
// /ui/ with River UI under /riverui/ (see ui.go).
type Server struct {
	clients   map[string]*client.Client // by namespace
	clientsMu sync.Mutex
	config    *Config
	handler   http.Handler        // the mux, guarded when the server is open (open.go)
	hashes    [][sha256.Size]byte // of config.Tokens' secrets, in order
	metrics   *metrics
	migrator  *migrations.Migrator
	mux       *http.ServeMux
	pool      *pgxpool.Pool
	routes    []*route
	store     *store.Store
	stopCtx   context.Context // cancelled when shutdown begins: long polls end
	stop      context.CancelFunc
	ui        *uiState       // the web UI (ui.go)
	waiter    *client.Client // awaits results in any namespace (Get reads by run ID)

	afterDescribe func() // tests: runs between a run page's reads of the run and of its history
}

// New returns a Server over pool. A nil config means defaults.
func New(pool *pgxpool.Pool, config *Config) (*Server, error) {
	if pool == nil {
		return nil, errors.New("server: pool is required")
	}
	if config == nil {
		config = &Config{}
	}
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	migrator, err := migrations.New(pool, &migrations.Config{Logger: config.Logger, Schema: config.Schema})
	if err != nil {
		return nil, err
	}
	waiter, err := client.New(pool, &client.Config{Codec: config.Codec, Logger: config.Logger, Schema: config.Schema})
	if err != nil {
		return nil, err
	}

	st := store.New(dbschema.New(config.Schema))
	s := &Server{
		clients:  make(map[string]*client.Client),
		config:   config,
		metrics:  newMetrics(pool, st, config),
		migrator: migrator,
		mux:      http.NewServeMux(),
		pool:     pool,
		store:    st,
		waiter:   waiter,
	}
	for _, token := range config.Tokens {
		s.hashes = append(s.hashes, sha256.Sum256([]byte(token.Secret)))
	}
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	s.routes = s.routeTable()
	for _, rt := range s.routes {
		s.mux.Handle(rt.method+" "+rt.pattern, s.wrap(rt))
	}
	// The web UI and River UI: not API routes, so not in routeTable.
	if err := s.mountUI(); err != nil {
		return nil, errors.Join(err, waiter.Close())
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, newError(http.StatusNotFound, CodeNotFound, "no such route: "+r.Method+" "+r.URL.Path,
			map[string]any{"route": r.Method + " " + r.URL.Path}))
	})
	s.handler = s.mux
	if config.AllowUnauthenticated {
		s.handler = s.guardOpen(s.mux)
	}
	return s, nil
}

// Route is one route of the server.
type Route struct {
	// Method and Pattern are the route in ServeMux syntax, which the OpenAPI
	// document also uses for its paths.
	Method  string
	Pattern string

	// Role is the role a token needs; empty for a public route.
	Role Role
}

// Routes lists the server's routes: exactly what its mux serves.
func (s *Server) Routes() []*Route {
	out := make([]*Route, 0, len(s.routes))
	for _, rt := range s.routes {
		out = append(out, &Route{Method: rt.method, Pattern: rt.pattern, Role: rt.role})
	}
	return out
}

// Handler is the server's root handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Close ends the server's long polls and releases its clients' listener
// connections. Call it after the HTTP server in front of it has stopped.
func (s *Server) Close() error {
	s.stop()
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	errs := []error{s.waiter.Close()}
	for _, c := range s.clients {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Serve serves the handler on listener until ctx ends, then shuts down
// gracefully: it stops accepting connections, ends long polls (they answer
// "not closed yet", so callers poll again elsewhere) and waits up to
// Config.ShutdownTimeout for in-flight requests to finish. It returns nil
// after a clean shutdown.
func (s *Server) Serve(ctx context.Context, listener net.Listener) error {
	httpServer := &http.Server{
		Handler:           s.handler,
		IdleTimeout:       2 * time.Minute,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.config.RequestTimeout,
		WriteTimeout:      s.config.RequestTimeout + s.config.MaxWait + 5*time.Second,
		ErrorLog:          slog.NewLogLogger(s.config.Logger.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- httpServer.Serve(listener) }()

	select {
	case err := <-serveErr:
		s.stop()
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
	}
	s.stop() // long polls return now
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.config.ShutdownTimeout)
	defer cancel()
	if err := httpServer.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down HTTP: %w", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving HTTP: %w", err)
	}
	return nil
}

// clientCacheMax bounds the namespaces whose clients are kept; past it a
// namespace's client is built per request (clients are cheap and, without
// Get, hold nothing to release).
const clientCacheMax = 1024

// client returns the client of a namespace, creating it on first use.
// Clients own no goroutines until Get, which only the waiter calls.
func (s *Server) client(namespace string) (*client.Client, error) {
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	if c, ok := s.clients[namespace]; ok {
		return c, nil
	}
	c, err := client.New(s.pool, &client.Config{
		Codec: s.config.Codec, Logger: s.config.Logger, Namespace: namespace, Schema: s.config.Schema,
	})
	if err != nil {
		return nil, err
	}
	if len(s.clients) < clientCacheMax {
		s.clients[namespace] = c
	}
	return c, nil
}

// dbProblem says what is wrong with the database in words safe for an
// unauthenticated caller: never the user, database, host or port, which
// go to the log with the whole error.
func (s *Server) dbProblem(r *http.Request, check string, err error) string {
	s.config.Logger.WarnContext(r.Context(), "health check failed",
		slog.String("check", check), slog.String("error", err.Error()))
	var (
		pgErr   *pgconn.PgError
		connErr *pgconn.ConnectError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out reaching the database"
	case errors.As(err, &pgErr):
		return "the database refused (SQLSTATE " + pgErr.Code + ")"
	case errors.As(err, &connErr):
		return "cannot connect to the database"
	default:
		return "the database is unavailable"
	}
}

// HealthResponse is the body of /healthz.
type HealthResponse struct {
	// Database is "ok" or what is wrong reaching it, without connection
	// details (the server logs those).
	Database string `json:"database"`

	// Status is "ok" or "unavailable".
	Status string `json:"status"`
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.config.CheckTimeout)
	defer cancel()

	if err := s.pool.Ping(ctx); err != nil {
		s.writeJSON(w, http.StatusServiceUnavailable, &HealthResponse{Database: s.dbProblem(r, "liveness", err), Status: "unavailable"})
		return
	}
	s.writeJSON(w, http.StatusOK, &HealthResponse{Database: "ok", Status: "ok"})
}

// ReadyResponse is the body of /readyz.
type ReadyResponse struct {
	// Error says why the server is not ready; empty when it is.
	Error string `json:"error,omitempty"`

	// Lines is where each migration line stands against this build.
	Lines []*LineReadiness `json:"lines,omitempty"`

	// Status is "ready" or "not_ready".
	Status string `json:"status"`
}

// LineReadiness is one migration line in a ReadyResponse.
type LineReadiness struct {
	Current  int    `json:"current"`
	Line     string `json:"line"`
	Pending  []int  `json:"pending,omitempty"`
	Required int    `json:"required"`
}

func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.config.CheckTimeout)
	defer cancel()

	statuses, err := s.migrator.Status(ctx)
	if err != nil {
		s.writeJSON(w, http.StatusServiceUnavailable, &ReadyResponse{
			Error: "reading the migration status: " + s.dbProblem(r, "readiness", err), Status: "not_ready",
		})
		return
	}
	resp := &ReadyResponse{Status: "ready"}
	code := http.StatusOK
	for _, status := range statuses {
		resp.Lines = append(resp.Lines, &LineReadiness{
			Current: status.Current, Line: status.Line, Pending: status.Pending, Required: status.Latest,
		})
	}
	if err := migrations.CheckStatus(s.config.Schema, statuses); err != nil { // worker.Start's check too
		resp.Status, code, resp.Error = "not_ready", http.StatusServiceUnavailable, err.Error()
	}
	s.writeJSON(w, code, resp)
}

func (s *Server) writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	if err := json.NewEncoder(w).Encode(body); err != nil {
		s.config.Logger.Warn("writing response", slog.String("error", err.Error()))
	}
}
