package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"riverqueue.com/riverui"
)

// riverUIPrefix is where River UI is mounted.
const riverUIPrefix = "/riverui"

// riverUIMount serves River UI under /riverui/ behind the UI's auth. River
// UI shows every namespace's jobs, so it takes a session whose token spans
// all namespaces ("*"): read to look, admin to cancel, retry or delete jobs
// and pause queues. Its background services start with its first request
// and stop when the server closes.
type riverUIMount struct {
	handler *riverui.Handler
	start   sync.Once
	err     error
}

func (s *Server) newRiverUIMount() (*riverUIMount, error) {
	riverClient, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{
		Logger: s.config.Logger, Schema: s.config.Schema,
	})
	if err != nil {
		return nil, fmt.Errorf("ui: creating River UI's client: %w", err)
	}
	handler, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints[pgx.Tx](riverClient, nil),
		Logger:    s.config.Logger,
		Prefix:    riverUIPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("ui: creating River UI: %w", err)
	}
	return &riverUIMount{handler: handler}, nil
}

func (m *riverUIMount) serve(s *Server) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := checkRequestText(r); err != nil {
			s.writeError(w, r, err)
			return
		}
		sess := s.loginOf(r)
		if sess == nil {
			// River UI's own API calls may carry the bearer token instead.
			if token := s.tokenBySecret(bearerSecret(r)); token != nil {
				sess = &uiLogin{token: token}
			}
		}
		if sess == nil {
			if strings.HasPrefix(r.URL.Path, riverUIPrefix+"/api/") || r.Method != http.MethodGet {
				s.writeError(w, r, newError(http.StatusUnauthorized, CodeUnauthenticated, "sign in first (or send a bearer token)", nil))
				return
			}
			http.Redirect(w, r, uiPrefix+"/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		need := RoleRead
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			need = RoleAdmin
			if !sameOrigin(r) {
				s.writeError(w, r, newError(http.StatusForbidden, CodePermissionDenied, "cross-site request refused", nil))
				return
			}
		}
		if !sess.allNamespaces() || !sess.Role().includes(need) {
			s.writeError(w, r, newError(http.StatusForbidden, CodePermissionDenied,
				"River UI shows every namespace: it needs a token of namespace \"*\" with role "+string(need), nil))
			return
		}
		m.start.Do(func() { m.err = m.handler.Start(s.stopCtx) })
		if m.err != nil {
			s.writeError(w, r, fmt.Errorf("starting River UI: %w", m.err))
			return
		}
		m.handler.ServeHTTP(w, r)
	}
}
