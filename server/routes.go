package server

import (
	"cmp"
	"context"
	"net/http"
	"regexp"
	"strings"
)

// route is one entry of the mux. The mux is built from routeTable alone, and
// a test checks the table against the OpenAPI document both ways.
type route struct {
	api      func(r *http.Request) (int, any, error) // an authenticated API route
	longPoll bool                                    // its timeout adds Config.MaxWait
	method   string
	pattern  string
	plain    http.HandlerFunc // a public route
	role     Role             // needed for an API route
}

const (
	apiPrefix      = "/api/v1"
	nsPrefix       = apiPrefix + "/namespaces/{namespace}"
	workflowPrefix = nsPrefix + "/workflows/{workflow_id}"
	schedulePrefix = nsPrefix + "/schedules/{schedule_id}"
)

func (s *Server) routeTable() []*route {
	return []*route{
		{method: http.MethodGet, pattern: "/healthz", plain: s.handleHealthz},
		{method: http.MethodGet, pattern: "/readyz", plain: s.handleReadyz},
		{method: http.MethodGet, pattern: "/metrics", plain: s.handleMetrics()},
		{method: http.MethodGet, pattern: apiPrefix + "/openapi.json", plain: handleOpenAPI},

		{method: http.MethodGet, pattern: nsPrefix + "/workflows", role: RoleRead, api: s.handleList},
		{method: http.MethodPost, pattern: nsPrefix + "/workflows", role: RoleWrite, api: s.handleStart},
		{method: http.MethodGet, pattern: workflowPrefix, role: RoleRead, api: s.handleDescribe},
		{method: http.MethodPost, pattern: workflowPrefix + "/cancel", role: RoleWrite, api: s.handleCancel},
		{method: http.MethodGet, pattern: workflowPrefix + "/history", role: RoleRead, api: s.handleHistory},
		{method: http.MethodGet, pattern: workflowPrefix + "/result", role: RoleRead, api: s.handleResult, longPoll: true},
		{method: http.MethodPost, pattern: workflowPrefix + "/signal", role: RoleWrite, api: s.handleSignal},
		{method: http.MethodPost, pattern: workflowPrefix + "/terminate", role: RoleWrite, api: s.handleTerminate},

		{method: http.MethodPost, pattern: workflowPrefix + "/query", role: RoleRead, api: s.handleQuery},
		{method: http.MethodPost, pattern: workflowPrefix + "/signal-with-start", role: RoleWrite, api: s.handleSignalWithStart},
		{method: http.MethodPost, pattern: workflowPrefix + "/update", role: RoleWrite, api: s.handleUpdate},

		{method: http.MethodGet, pattern: nsPrefix + "/workers", role: RoleRead, api: s.handleListWorkers},

		// Schedules: reading needs read, changing them (and starting their
		// runs by trigger or backfill) admin.
		{method: http.MethodGet, pattern: nsPrefix + "/schedules", role: RoleRead, api: s.handleListSchedules},
		{method: http.MethodPost, pattern: nsPrefix + "/schedules", role: RoleAdmin, api: s.handleCreateSchedule},
		{method: http.MethodGet, pattern: schedulePrefix, role: RoleRead, api: s.handleDescribeSchedule},
		{method: http.MethodPatch, pattern: schedulePrefix, role: RoleAdmin, api: s.handleUpdateSchedule},
		{method: http.MethodDelete, pattern: schedulePrefix, role: RoleAdmin, api: s.handleDeleteSchedule},
		{method: http.MethodPost, pattern: schedulePrefix + "/pause", role: RoleAdmin, api: s.handlePauseSchedule},
		{method: http.MethodPost, pattern: schedulePrefix + "/resume", role: RoleAdmin, api: s.handleResumeSchedule},
		{method: http.MethodPost, pattern: schedulePrefix + "/trigger", role: RoleAdmin, api: s.handleTriggerSchedule},
		{method: http.MethodPost, pattern: schedulePrefix + "/backfill", role: RoleAdmin, api: s.handleBackfillSchedule},
		{method: http.MethodGet, pattern: schedulePrefix + "/backfills", role: RoleRead, api: s.handleListBackfills},
		{method: http.MethodGet, pattern: schedulePrefix + "/backfills/{backfill_id}", role: RoleRead, api: s.handleDescribeBackfill},
	}
}

// wrap adds metrics to every route and auth, a timeout and a body limit to
// API routes.
func (s *Server) wrap(rt *route) http.Handler {
	if rt.plain != nil {
		return s.metrics.instrument(rt.method+" "+rt.pattern, rt.plain)
	}
	timeout := s.config.RequestTimeout
	if rt.longPoll {
		timeout += s.config.MaxWait
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		namespace := r.PathValue("namespace")
		// The first failing check answers.
		if err := cmp.Or(s.authorize(r, namespace, rt.role), checkRequestText(r), checkNamespace(namespace)); err != nil {
			s.writeError(w, r, err)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		r = r.WithContext(ctx)
		r.Body = http.MaxBytesReader(w, r.Body, s.config.MaxBodyBytes)

		status, body, err := rt.api(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.writeJSON(w, status, body)
	})
	return s.metrics.instrument(rt.method+" "+rt.pattern, h)
}

// authorize checks the request's bearer token against the configured ones
// in constant time (every token is compared, by hash so lengths don't leak).
func (s *Server) authorize(r *http.Request, namespace string, need Role) error {
	if s.config.AllowUnauthenticated {
		return nil
	}
	secret := bearerSecret(r)
	if secret == "" {
		return newError(http.StatusUnauthorized, CodeUnauthenticated, "missing bearer token (Authorization: Bearer <token>)", nil)
	}
	token := s.tokenBySecret(secret)
	if token == nil {
		return newError(http.StatusUnauthorized, CodeUnauthenticated, "unknown bearer token", nil)
	}
	return token.permit(namespace, need)
}

// permit checks that t may act in namespace with role need.
func (t *Token) permit(namespace string, need Role) error {
	if !t.allows(namespace) {
		return newError(http.StatusForbidden, CodePermissionDenied,
			"token "+t.Name+" may not act in namespace "+namespace,
			map[string]any{"namespace": namespace, "token": t.Name})
	}
	if !t.Role.includes(need) {
		return newError(http.StatusForbidden, CodePermissionDenied,
			"token "+t.Name+" has role "+string(t.Role)+"; this needs "+string(need),
			map[string]any{"namespace": namespace, "required_role": string(need), "role": string(t.Role), "token": t.Name})
	}
	return nil
}

// bearerSecret is the secret of the request's "Authorization: Bearer"
// header; "" when it has none.
func bearerSecret(r *http.Request) string {
	scheme, secret, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(secret)
}

// nameRE is the client's rule for kinds and namespaces, checked here so a
// bad name is invalid_argument rather than an internal error.
var nameRE = regexp.MustCompile(`\A[\w][\w\-\[\]<>\/.·:+]*\z`)

const nameRule = "1–128 characters of letters, digits and _-[]<>/.·:+, starting with a letter, digit or _"

func validName(name string) bool {
	return len(name) > 0 && len(name) <= 128 && nameRE.MatchString(name)
}

func checkNamespace(namespace string) error {
	if !validName(namespace) {
		return invalidArgument("namespace", "invalid namespace %q: %s", namespace, nameRule)
	}
	return nil
}

// queueRE is River's rule for queue names.
var queueRE = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)
