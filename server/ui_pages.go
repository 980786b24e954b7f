package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/store"
)

// listURL is the list page of namespace with query q.
func listURL(namespace string, q url.Values) string {
	u := uiPrefix + "/namespaces/" + url.PathEscape(namespace) + "/workflows"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// runURL is the page of a run; runID may be Nil for the latest run.
func runURL(namespace, workflowID string, runID uuid.UUID) string {
	u := uiPrefix + "/namespaces/" + url.PathEscape(namespace) + "/workflows/" + url.PathEscape(workflowID)
	if runID != uuid.Nil {
		u += "?run_id=" + runID.String()
	}
	return u
}

// uiDurations are the "created within" choices of the list's time filter.
var uiDurations = []struct{ Value, Label string }{
	{"", "any time"}, {"15m", "last 15 minutes"}, {"1h", "last hour"}, {"24h", "last 24 hours"},
	{"168h", "last 7 days"}, {"720h", "last 30 days"},
}

// uiTimeLayout is the layout of datetime-local inputs, read as UTC.
const uiTimeLayout = "2006-01-02T15:04"

func uiFuncs(staticTag string) template.FuncMap {
	return template.FuncMap{
		"static":       func(name string) string { return uiPrefix + "/static/" + name + "?v=" + staticTag },
		"runURL":       runURL,
		"workflowURL":  func(namespace, workflowID string) string { return runURL(namespace, workflowID, uuid.Nil) },
		"listURL":      func(namespace string) string { return listURL(namespace, nil) },
		"workersURL":   workersURL,
		"schedulesURL": schedulesURL,
		"scheduleURL":  scheduleURL,
		"deref":        func(id *uuid.UUID) uuid.UUID { return *id },
		"jobURL": func(id any) string { // of an int64 or a non-nil *int64; else River UI's home
			if p, ok := id.(*int64); ok && p != nil {
				id = *p
			}
			if n, ok := id.(int64); ok {
				return riverUIPrefix + "/jobs/" + strconv.FormatInt(n, 10)
			}
			return riverUIPrefix + "/"
		},
		"ts":       func(t any) string { return formatUITime(t, "2006-01-02 15:04:05.000") },
		"iso":      func(t any) string { return formatUITime(t, time.RFC3339Nano) },
		"ago":      func(t time.Time) string { return humanDuration(time.Since(t)) + " ago" },
		"until":    untilText,
		"duration": runDuration,
		"stateClass": func(state string) string {
			return "state-" + strings.ReplaceAll(state, "_", "-")
		},
		"stateLabel": func(state string) string { return strings.ReplaceAll(state, "_", " ") },
		"short":      func(id uuid.UUID) string { return id.String()[:8] },
		"shortStr": func(s string) string {
			if len(s) > 8 {
				return s[:8]
			}
			return s
		},
	}
}

// formatUITime formats a time.Time or a non-nil *time.Time in UTC; "" for
// anything else.
func formatUITime(t any, layout string) string {
	if p, ok := t.(*time.Time); ok && p != nil {
		t = *p
	}
	if t, ok := t.(time.Time); ok {
		return t.UTC().Format(layout)
	}
	return ""
}

// humanDuration prints d to about two significant units.
func humanDuration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

func untilText(t *time.Time) string {
	if t == nil {
		return ""
	}
	d := time.Until(*t)
	if d < 0 {
		return "expired " + humanDuration(d) + " ago"
	}
	return "in " + humanDuration(d)
}

func runDuration(created time.Time, closed *time.Time) string {
	if closed == nil {
		return humanDuration(time.Since(created)) + " so far"
	}
	return humanDuration(closed.Sub(created))
}

// uiListPage is the data of the list page.
type uiListPage struct {
	uiBase
	Durations []struct{ Value, Label string }
	Error     string
	Filter    uiListFilter
	FirstURL  string
	NextURL   string
	Running   bool
	Runs      []*client.RunSummary
	States    []string
}

// uiListFilter is the list page's filter form.
type uiListFilter struct {
	Before string
	Kind   string
	Prefix string
	Since  string
	After  string
	State  string
}

func (f *uiListFilter) values() url.Values {
	q := url.Values{}
	for name, v := range map[string]string{
		"after": f.After, "before": f.Before, "kind": f.Kind, "prefix": f.Prefix, "since": f.Since, "state": f.State,
	} {
		if v != "" {
			q.Set(name, v)
		}
	}
	return q
}

// Active reports whether any filter is set.
func (f *uiListFilter) Active() bool { return len(f.values()) > 0 }

func parseUITime(field, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{uiTimeLayout, uiTimeLayout + ":05", time.RFC3339Nano} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, invalidArgument(field, "%s is not a time such as 2026-01-31T15:04 (UTC): %q", field, v)
}

func (s *Server) uiList(w http.ResponseWriter, r *http.Request) {
	sess, c := s.namespacePage(w, r)
	if sess == nil {
		return
	}
	namespace, q := r.PathValue("namespace"), r.URL.Query()
	page := &uiListPage{
		uiBase:    s.base(r, sess, namespace, "Workflows · "+namespace),
		Durations: uiDurations,
		Filter: uiListFilter{
			After: q.Get("after"), Before: q.Get("before"), Kind: strings.TrimSpace(q.Get("kind")),
			Prefix: strings.TrimSpace(q.Get("prefix")), Since: q.Get("since"), State: q.Get("state"),
		},
		States: States,
	}
	opts, err := page.Filter.listOpts(namespace)
	if err != nil {
		page.Error = s.apiError(r, err).Message
		s.render(w, r, http.StatusBadRequest, "list", page)
		return
	}
	opts.Cursor, opts.Limit = q.Get("cursor"), uiListLimit
	res, err := c.List(r.Context(), opts)
	if err != nil {
		s.renderError(w, r, sess, namespace, err)
		return
	}
	page.Runs = res.Runs
	if res.NextCursor != "" {
		next := page.Filter.values()
		next.Set("cursor", res.NextCursor)
		page.NextURL = listURL(namespace, next)
	}
	if opts.Cursor != "" {
		page.FirstURL = listURL(namespace, page.Filter.values())
	}
	page.Running = slices.ContainsFunc(page.Runs, func(run *client.RunSummary) bool { return run.State == "running" })
	s.render(w, r, http.StatusOK, "list", page)
}

func (f *uiListFilter) listOpts(namespace string) (*client.ListOpts, error) {
	opts := &client.ListOpts{Kind: f.Kind, Namespace: namespace, State: f.State, WorkflowIDPrefix: f.Prefix}
	if opts.State != "" && !slices.Contains(States, opts.State) {
		return nil, invalidArgument("state", "unknown state %q", opts.State)
	}
	if opts.Kind != "" && !validName(opts.Kind) {
		return nil, invalidArgument("kind", "invalid workflow kind %q: %s", opts.Kind, nameRule)
	}
	if len(opts.WorkflowIDPrefix) > 1000 {
		return nil, invalidArgument("prefix", "the workflow ID prefix is longer than 1000 bytes")
	}
	var err error
	if opts.CreatedAfter, err = parseUITime("after", f.After); err != nil {
		return nil, err
	}
	if opts.CreatedBefore, err = parseUITime("before", f.Before); err != nil {
		return nil, err
	}
	if f.Since != "" {
		d, err := time.ParseDuration(f.Since)
		if err != nil || d <= 0 {
			return nil, invalidArgument("since", "since is not a positive duration: %q", f.Since)
		}
		if since := time.Now().Add(-d); since.After(opts.CreatedAfter) {
			opts.CreatedAfter = since
		}
	}
	return opts, nil
}

// uiRunPage is the data of a run's page.
type uiRunPage struct {
	uiBase
	ActionBase     string // the actions' URLs, less /signal, /cancel or /terminate
	Args           *uiPayload
	Attempts       []*uiAttempt
	AttemptsError  string
	CanWrite       bool
	Description    *client.Description
	Events         []*uiEvent
	Failures       []*client.Failure // the failure and its causes, outermost first
	FirstEventsURL string
	Flash          string
	FormError      string
	Generations    []*store.Generation
	HistoryLength  int64
	// LiveLength is the history length of the run as Describe read it,
	// with its state and pending activities and inbox: the page's live
	// refresh reloads when the run's length is no longer this one.
	LiveLength    int64
	MoreEventsURL string
	// Query is the query sent from the page, with its answer; nil when none.
	Query  *uiQuery
	Result *uiPayload
	RunURL string
	// Schedule links to the schedule that started the run; nil when none.
	Schedule *uiRunSchedule
	// Children are the child workflows the run's shown events start.
	Children []uiChild

	// SignalKinds are the kinds of the signals the run has received.
	SignalKinds []string
	StatusURL   string
}

// Running reports whether the run is still running.
func (p *uiRunPage) Running() bool { return p.Description.State == "running" }

// Live reports whether the page refreshes itself as the run changes: while
// the run runs, unless the page answers a query's POST (reloading it would
// send the query again).
func (p *uiRunPage) Live() bool { return p.Running() && p.Query == nil }

// uiFlashes are the messages a redirect after an action may show; the query
// names one, so no text from the request reaches the page.
var uiFlashes = map[string]string{
	"cancel":    "Cancellation requested. The workflow sees it at its next task.",
	"signal":    "Signal sent.",
	"terminate": "Run terminated.",
}

func (s *Server) uiRun(w http.ResponseWriter, r *http.Request) {
	sess := s.requireLogin(w, r)
	if sess == nil {
		return
	}
	s.renderRunPage(w, r, sess, http.StatusOK, "", nil)
}

// renderRunPage renders a run's page; formError, if set, is shown above the
// actions (a rejected action re-renders the page with status), and a query
// sent from the page with its answer when query is not nil.
func (s *Server) renderRunPage(w http.ResponseWriter, r *http.Request, sess *uiLogin, status int, formError string, query *uiQuery) {
	page, err := s.runPage(r, sess, formError, query)
	if err != nil {
		s.renderError(w, r, sess, r.PathValue("namespace"), err)
		return
	}
	s.render(w, r, status, "run", page)
}

func (s *Server) runPage(r *http.Request, sess *uiLogin, formError string, query *uiQuery) (*uiRunPage, error) {
	namespace, workflowID := r.PathValue("namespace"), r.PathValue("workflow_id")
	c, runID, err := s.uiTarget(r, sess, namespace, workflowID, RoleRead)
	if err != nil {
		return nil, err
	}
	ctx := r.Context()
	d, err := c.Describe(ctx, workflowID, runID)
	if err != nil {
		return nil, err
	}
	if s.afterDescribe != nil {
		s.afterDescribe()
	}
	page := &uiRunPage{
		uiBase:      s.base(r, sess, namespace, workflowID+" · "+d.Kind),
		CanWrite:    sess.permit(namespace, RoleWrite) == nil,
		Description: d,
		Flash:       uiFlashes[r.URL.Query().Get("flash")],
		FormError:   formError,
		Query:       query,
		RunURL:      runURL(namespace, workflowID, d.RunID),
		ActionBase:  runURL(namespace, workflowID, uuid.Nil),
		StatusURL:   runURL(namespace, workflowID, uuid.Nil) + "/status?run_id=" + d.RunID.String(),
	}
	for f := d.Failure; f != nil; f = f.Cause {
		page.Failures = append(page.Failures, f)
	}
	payloads, err := s.store.GetRunPayloads(ctx, s.pool, d.RunID)
	if err != nil {
		return nil, fmt.Errorf("reading the payloads of run %s: %w", d.RunID, err)
	}
	page.Args, page.Result = newUIPayload(payloads.Args), newUIPayload(payloads.Result)
	if page.SignalKinds, err = s.store.SignalKinds(ctx, s.pool, d.RunID, uiSignalKindsMax); err != nil {
		return nil, fmt.Errorf("reading the signals of run %s: %w", d.RunID, err)
	}
	if page.Schedule, err = scheduleLink(r, c, namespace, workflowID); err != nil {
		return nil, err
	}
	key := store.RunKey{Namespace: namespace, WorkflowID: workflowID}
	if page.Generations, err = s.store.Generations(ctx, s.pool, key, uiGenerationsMax); err != nil {
		return nil, fmt.Errorf("listing generations of %s: %w", workflowID, err)
	}
	after, err := parseInt(r.URL.Query(), "after", 0, 1<<62)
	if err != nil {
		return nil, err
	}
	history, err := c.History(ctx, workflowID, d.RunID, &client.HistoryOpts{AfterEventID: int64(after), Limit: uiHistoryLimit})
	if err != nil {
		return nil, err
	}
	page.Events = describeEvents(history.Events, d.CreatedAt)
	page.Children = childrenOf(history.Events)
	// History may have grown since Describe read the run: show the larger.
	// The live refresh compares with Describe's, which the state and the
	// pending lists shown come from: had it compared with the larger, a
	// page rendered with an activity pending (read before its outcome
	// committed) and that outcome's events (read after) would never reload,
	// and show the activity pending for good.
	page.HistoryLength, page.LiveLength = d.HistoryLength, d.HistoryLength
	if n := len(history.Events); n > 0 && history.Events[n-1].ID > page.HistoryLength {
		page.HistoryLength = history.Events[n-1].ID
	}
	if after > 0 {
		page.FirstEventsURL = page.RunURL + "#history"
	}
	if history.NextAfterEventID != 0 {
		page.MoreEventsURL = page.RunURL + "&after=" + strconv.FormatInt(history.NextAfterEventID, 10)
	}
	if page.Attempts, err = s.attempts(ctx, d.RunID); err != nil {
		page.AttemptsError = err.Error()
	}
	return page, nil
}

// uiNamespaceList renders the page tmpl of a list of the namespace in the
// request's path: list reads it with the namespace's client (read role), and
// page wraps it with the page's base, titled title.
func uiNamespaceList[T any](s *Server, w http.ResponseWriter, r *http.Request, tmpl, title string,
	list func(*client.Client, context.Context) (T, error), page func(uiBase, T) any) {
	sess, c := s.namespacePage(w, r)
	if sess == nil {
		return
	}
	namespace := r.PathValue("namespace")
	items, err := list(c, r.Context())
	if err != nil {
		s.renderError(w, r, sess, namespace, err)
		return
	}
	s.render(w, r, http.StatusOK, tmpl, page(s.base(r, sess, namespace, title+" · "+namespace), items))
}

// namespacePage returns the session of a page of the namespace in the path
// (read role) and the namespace's client; nil after it sent the caller to
// log in or to the error page.
func (s *Server) namespacePage(w http.ResponseWriter, r *http.Request) (*uiLogin, *client.Client) {
	sess := s.requireLogin(w, r)
	if sess == nil {
		return nil, nil
	}
	namespace := r.PathValue("namespace")
	if err := s.uiNamespace(sess, namespace, RoleRead); err != nil {
		s.renderError(w, r, sess, "", err)
		return nil, nil
	}
	c, err := s.client(namespace)
	if err != nil {
		s.renderError(w, r, sess, namespace, err)
		return nil, nil
	}
	return sess, c
}

// uiNamespace checks the session's access to namespace with role need, and
// the namespace's name.
func (s *Server) uiNamespace(sess *uiLogin, namespace string, need Role) error {
	return cmp.Or(sess.permit(namespace, need), checkNamespace(namespace))
}

// uiTarget checks the session's access to namespace and reads the run_id
// query or form parameter.
func (s *Server) uiTarget(r *http.Request, sess *uiLogin, namespace, workflowID string, need Role) (*client.Client, uuid.UUID, error) {
	if err := s.uiNamespace(sess, namespace, need); err != nil {
		return nil, uuid.Nil, err
	}
	return s.runTarget(namespace, workflowID, r.FormValue("run_id"))
}

// UIStatus is the body of the UI's status endpoint, which a run's page polls
// to refresh itself while the run is running.
type UIStatus struct {
	HistoryLength int64     `json:"history_length"`
	State         string    `json:"state"`
	UpdatedAt     time.Time `json:"updated_at"`
}

func (s *Server) uiStatus(w http.ResponseWriter, r *http.Request) {
	sess := s.loginOf(r)
	if sess == nil {
		s.writeError(w, r, newError(http.StatusUnauthorized, CodeUnauthenticated, "sign in first", nil))
		return
	}
	c, runID, err := s.uiTarget(r, sess, r.PathValue("namespace"), r.PathValue("workflow_id"), RoleRead)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	d, err := c.Describe(r.Context(), r.PathValue("workflow_id"), runID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, &UIStatus{HistoryLength: d.HistoryLength, State: d.State, UpdatedAt: d.UpdatedAt})
}

// uiPayloadDownload serves a run's args or result whole, as stored, for
// the pages that show only their start.
func (s *Server) uiPayloadDownload(w http.ResponseWriter, r *http.Request) {
	sess := s.requireLogin(w, r)
	if sess == nil {
		return
	}
	namespace, workflowID, which := r.PathValue("namespace"), r.PathValue("workflow_id"), r.PathValue("which")
	_, runID, err := s.uiTarget(r, sess, namespace, workflowID, RoleRead)
	if err == nil && runID == uuid.Nil {
		err = invalidArgument("run_id", "name the run: run_id is required")
	}
	var data []byte
	if err == nil {
		data, err = s.runPayload(r.Context(), namespace, workflowID, runID, which)
	}
	if err != nil {
		s.renderError(w, r, sess, namespace, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", runID.String()+"-"+which+".json"))
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(data)
}

// PayloadURL is the download of the run's args or result (which).
func (p *uiRunPage) PayloadURL(which string) string {
	return p.ActionBase + "/payload/" + which + "?run_id=" + p.Description.RunID.String()
}

func (s *Server) uiAction(w http.ResponseWriter, r *http.Request) {
	namespace, workflowID, action := r.PathValue("namespace"), r.PathValue("workflow_id"), r.PathValue("action")
	_, known := uiFlashes[action]
	sess := s.formLogin(w, r, known)
	if sess == nil {
		return
	}
	c, runID, err := s.uiTarget(r, sess, namespace, workflowID, RoleWrite)
	if err != nil {
		s.renderError(w, r, sess, namespace, err)
		return
	}
	if runID == uuid.Nil {
		s.renderError(w, r, sess, namespace, invalidArgument("run_id", "the form names no run"))
		return
	}
	ctx := r.Context()
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	switch action {
	case "signal":
		kind := strings.TrimSpace(r.PostFormValue("kind"))
		args := bytes.TrimSpace([]byte(r.PostFormValue("args")))
		requestID := strings.TrimSpace(r.PostFormValue("request_id"))
		if err = checkCall("", "signal", kind, "request_id", requestID, args); err == nil {
			err = c.Signal(ctx, workflowID, runID, client.RawArgs{JSON: args, KindName: kind},
				&client.SignalOpts{RequestID: requestID})
		}
	case "cancel":
		err = c.Cancel(ctx, workflowID, runID, reason)
	case "terminate":
		err = c.Terminate(ctx, workflowID, runID, reason)
	}
	s.actionDone(w, r, sess, err, runURL(namespace, workflowID, runID)+"&flash="+action, func(status int, formError string) {
		s.renderRunPage(w, r, sess, status, formError, nil)
	})
}

// formLogin returns the session of a form POST to a known action, its form
// parsed and checked (checkForm); else it sends the caller to log in or an
// error page and returns nil.
func (s *Server) formLogin(w http.ResponseWriter, r *http.Request, known bool) *uiLogin {
	r.Body = http.MaxBytesReader(w, r.Body, s.config.MaxBodyBytes)
	sess := s.loginOf(r)
	namespace := r.PathValue("namespace")
	switch {
	case sess == nil:
		http.Redirect(w, r, uiPrefix+"/login", http.StatusSeeOther)
	case !known:
		s.renderError(w, r, sess, namespace, newError(http.StatusNotFound, CodeNotFound, "no such action: "+r.PathValue("action"), nil))
	case s.checkForm(w, r, sess, namespace):
		return sess
	}
	return nil
}

// actionDone answers a form action that ended with err: on success a
// redirect to done; a refused action shows its page again with the error
// (rerender), a missing target or a server failure the error page.
func (s *Server) actionDone(w http.ResponseWriter, r *http.Request, sess *uiLogin, err error, done string, rerender func(status int, formError string)) {
	if err == nil {
		http.Redirect(w, r, done, http.StatusSeeOther)
		return
	}
	apiErr := s.apiError(r, err)
	if apiErr.Status == http.StatusNotFound || apiErr.Status >= 500 {
		s.renderError(w, r, sess, r.PathValue("namespace"), apiErr)
		return
	}
	rerender(apiErr.Status, apiErr.Message)
}

// uiChild is a child workflow a run started.
type uiChild struct {
	Kind       string
	WorkflowID string
}

// childrenOf returns the child workflows events schedule, in order.
func childrenOf(events []*client.Event) []uiChild {
	var children []uiChild
	for _, ev := range events {
		if ev.Type != client.EventChildWorkflowScheduled {
			continue
		}
		var a struct {
			Kind       string `json:"kind"`
			WorkflowID string `json:"workflow_id"`
		}
		if json.Unmarshal(ev.Attributes, &a) == nil && a.WorkflowID != "" {
			children = append(children, uiChild{Kind: a.Kind, WorkflowID: a.WorkflowID})
		}
	}
	return children
}
