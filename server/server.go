// Package server is weir's HTTP server. Today it answers health and
// readiness; the JSON API, the web UI, River UI and /metrics build on it.
//
//	srv, err := server.New(pool, &server.Config{Schema: "weir"})
//	...
//	http.ListenAndServe("127.0.0.1:8844", srv.Handler())
//
// GET /healthz is liveness: 200 while the process can reach Postgres.
// GET /readyz is readiness: 200 only when every migration line is at the
// version this build requires (see migrations.Migrator.Verify), 503 with the
// lines that are behind otherwise.
package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/migrations"
)

// CheckTimeoutDefault bounds each health or readiness check.
const CheckTimeoutDefault = 2 * time.Second

// Config configures a Server. The zero value works.
type Config struct {
	// CheckTimeout bounds each health or readiness check's database work.
	// Defaults to CheckTimeoutDefault.
	CheckTimeout time.Duration

	// Logger receives request errors. Defaults to discarding.
	Logger *slog.Logger

	// Schema is the Postgres schema holding River's and weir's tables.
	// Defaults to empty: the first schema on the search_path.
	Schema string
}

func (c *Config) withDefaults() *Config {
	out := *c
	out.CheckTimeout = cmp.Or(out.CheckTimeout, CheckTimeoutDefault)
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return &out
}

func (c *Config) validate() error {
	if c.CheckTimeout < 0 {
		return errors.New("server config: CheckTimeout must not be negative")
	}
	return nil
}

// Server serves weir's HTTP endpoints.
type Server struct {
	config   *Config
	migrator *migrations.Migrator
	mux      *http.ServeMux
	pool     *pgxpool.Pool
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

	s := &Server{config: config, migrator: migrator, mux: http.NewServeMux(), pool: pool}
	s.mux.HandleFunc("GET /healthz", s.handleHealthz)
	s.mux.HandleFunc("GET /readyz", s.handleReadyz)
	return s, nil
}

// Handler is the server's root handler.
func (s *Server) Handler() http.Handler { return s.mux }

// HealthResponse is the body of /healthz.
type HealthResponse struct {
	// Database is "ok" or the error reaching it.
	Database string `json:"database"`

	// Status is "ok" or "unavailable".
	Status string `json:"status"`
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.config.CheckTimeout)
	defer cancel()

	if err := s.pool.Ping(ctx); err != nil {
		s.writeJSON(w, http.StatusServiceUnavailable, &HealthResponse{Database: err.Error(), Status: "unavailable"})
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
		s.writeJSON(w, http.StatusServiceUnavailable, &ReadyResponse{Error: err.Error(), Status: "not_ready"})
		return
	}
	resp := &ReadyResponse{Status: "ready"}
	code := http.StatusOK
	for _, status := range statuses {
		resp.Lines = append(resp.Lines, &LineReadiness{
			Current: status.Current, Line: status.Line, Pending: status.Pending, Required: status.Latest,
		})
		if status.Behind() {
			resp.Status, code = "not_ready", http.StatusServiceUnavailable
		}
	}
	if code != http.StatusOK {
		resp.Error = (&migrations.SchemaBehindError{Lines: behindOnly(statuses), Schema: s.config.Schema}).Error()
	}
	s.writeJSON(w, code, resp)
}

func behindOnly(statuses []*migrations.LineStatus) []*migrations.LineStatus {
	var out []*migrations.LineStatus
	for _, status := range statuses {
		if status.Behind() {
			out = append(out, status)
		}
	}
	return out
}

func (s *Server) writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if err := json.NewEncoder(w).Encode(body); err != nil {
		s.config.Logger.Warn("writing response", slog.String("error", err.Error()))
	}
}
