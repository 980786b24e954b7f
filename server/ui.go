package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weirhq/weir/server/ui"
)

// The web UI lives under /ui/ (pages, their actions and a small JSON status
// endpoint for live refresh) and /ui/static/ (embedded CSS and JavaScript),
// beside routeTable, so the OpenAPI document does not list it. It signs in
// with the API's tokens into a server-side login (ui_login.go); every action
// is a POST carrying the login's CSRF token and checked along with the
// Origin header.
const (
	uiPrefix       = "/ui"
	uiCookie       = "weir_session"
	uiCSRFField    = "csrf"
	uiListLimit    = 50
	uiHistoryLimit = 1000
	uiLoginMaxAge  = 12 * time.Hour
)

// uiState is what the UI keeps for the server's lifetime.
type uiState struct {
	csrfKey   []byte
	pages     map[string]*template.Template
	riverUI   *riverUIMount
	sessions  *uiLogins
	staticFS  fs.FS
	staticTag string // busts caches of static assets across builds
}

// uiLogin is the caller of a UI request.
type uiLogin struct {
	csrf  string
	id    string // the server-side session's ID; empty when open
	open  bool   // Config.AllowUnauthenticated: no token, admin everywhere
	token *Token // nil when open
}

// permit checks that the session may act in namespace with role need.
func (s *uiLogin) permit(namespace string, need Role) error {
	if s.open {
		return nil
	}
	return s.token.permit(namespace, need)
}

// allNamespaces reports whether the session spans every namespace (River UI
// shows every namespace's jobs, so it needs that).
func (s *uiLogin) allNamespaces() bool {
	return s.open || slices.Contains(s.token.Namespaces, NamespaceAll)
}

// Name is what the header shows for the session.
func (s *uiLogin) Name() string {
	if s.open {
		return "open (dev)"
	}
	return s.token.Name
}

// Role is the session's role.
func (s *uiLogin) Role() Role {
	if s.open {
		return RoleAdmin
	}
	return s.token.Role
}

// Open reports whether the UI runs without tokens.
func (s *uiLogin) Open() bool { return s.open }

func newUIState() (*uiState, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("ui: reading random key: %w", err)
	}
	staticFS, err := fs.Sub(ui.Files, "static")
	if err != nil {
		return nil, fmt.Errorf("ui: opening static assets: %w", err)
	}
	tag := sha256.New()
	err = fs.WalkDir(staticFS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(staticFS, path)
		tag.Write(data)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ui: hashing static assets: %w", err)
	}
	st := &uiState{csrfKey: key, pages: map[string]*template.Template{}, sessions: newUISessions(), staticFS: staticFS}
	st.staticTag = hex.EncodeToString(tag.Sum(nil))[:12]
	for _, page := range []string{"error", "list", "login", "run", "schedule", "schedules", "workers"} {
		t, err := template.New(page).Funcs(uiFuncs(st.staticTag)).ParseFS(ui.Files, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("ui: parsing template %s: %w", page, err)
		}
		st.pages[page] = t
	}
	return st, nil
}

// mountUI adds the UI's and River UI's routes to the mux.
func (s *Server) mountUI() error {
	st, err := newUIState()
	if err != nil {
		return err
	}
	s.ui = st
	if st.riverUI, err = s.newRiverUIMount(); err != nil {
		return err
	}
	handle := func(pattern string, h http.HandlerFunc) {
		s.mux.Handle(pattern, s.metrics.instrument(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := checkRequestText(r); err != nil {
				s.renderError(w, r, nil, "", err)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), s.config.RequestTimeout)
			defer cancel()
			h(w, r.WithContext(ctx))
		})))
	}
	handle("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, uiPrefix+"/", http.StatusFound)
	})
	handle("GET "+uiPrefix+"/{$}", s.uiHome)
	handle(uiPrefix+"/", func(w http.ResponseWriter, r *http.Request) {
		s.renderError(w, r, s.loginOf(r), "", newError(http.StatusNotFound, CodeNotFound, "There is no page at "+r.URL.Path+".", nil))
	})
	handle("GET "+uiPrefix+"/static/", s.uiStatic)
	handle("GET "+uiPrefix+"/switch", func(w http.ResponseWriter, r *http.Request) {
		namespace := r.URL.Query().Get("namespace")
		if !validName(namespace) {
			http.Redirect(w, r, uiPrefix+"/", http.StatusSeeOther)
			return
		}
		http.Redirect(w, r, listURL(namespace, nil), http.StatusSeeOther)
	})
	handle("GET "+uiPrefix+"/login", s.uiLoginPage)
	handle("POST "+uiPrefix+"/login", s.uiLogin)
	handle("POST "+uiPrefix+"/logout", s.uiLogout)
	handle("GET "+uiPrefix+"/namespaces/{namespace}/workflows", s.uiList)
	handle("GET "+uiPrefix+"/namespaces/{namespace}/workflows/{workflow_id}", s.uiRun)
	handle("GET "+uiPrefix+"/namespaces/{namespace}/workers", s.uiWorkers)
	handle("GET "+uiPrefix+"/namespaces/{namespace}/schedules", s.uiSchedules)
	handle("GET "+uiPrefix+"/namespaces/{namespace}/schedules/{schedule_id}", s.uiSchedule)
	handle("POST "+uiPrefix+"/namespaces/{namespace}/schedules/{schedule_id}/{action}", s.uiScheduleAction)
	handle("GET "+uiPrefix+"/namespaces/{namespace}/workflows/{workflow_id}/status", s.uiStatus)
	handle("GET "+uiPrefix+"/namespaces/{namespace}/workflows/{workflow_id}/payload/{which}", s.uiPayloadDownload)
	handle("POST "+uiPrefix+"/namespaces/{namespace}/workflows/{workflow_id}/query", s.uiQueryRun)
	handle("POST "+uiPrefix+"/namespaces/{namespace}/workflows/{workflow_id}/{action}", s.uiAction)
	s.mux.Handle(riverUIPrefix+"/", s.metrics.instrument(riverUIPrefix+"/", st.riverUI.serve(s)))
	return nil
}

func (s *Server) uiStatic(w http.ResponseWriter, r *http.Request) {
	// Files only: a directory (/ui/static/ itself) is not listed.
	name := strings.TrimPrefix(r.URL.Path, uiPrefix+"/static/")
	if info, err := fs.Stat(s.ui.staticFS, name); name == "" || err != nil || info.IsDir() {
		s.renderError(w, r, s.loginOf(r), "", newError(http.StatusNotFound, CodeNotFound, "There is no file at "+r.URL.Path+".", nil))
		return
	}
	w.Header().Set("Cache-Control", "public, max-age=86400")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.StripPrefix(uiPrefix+"/static/", http.FileServerFS(s.ui.staticFS)).ServeHTTP(w, r)
}

// loginOf returns the request's session, or nil when it has none (or
// its cookie names no configured token).
func (s *Server) loginOf(r *http.Request) *uiLogin {
	if s.config.AllowUnauthenticated {
		return &uiLogin{csrf: s.csrfFor("open"), open: true}
	}
	cookie, err := r.Cookie(uiCookie)
	if err != nil || cookie.Value == "" {
		return nil
	}
	token := s.ui.sessions.token(cookie.Value)
	if token == nil {
		return nil
	}
	return &uiLogin{csrf: s.csrfFor(cookie.Value), id: cookie.Value, token: token}
}

// tokenBySecret finds the token with secret in constant time (every token is
// compared, by hash so lengths don't leak); nil when none matches.
func (s *Server) tokenBySecret(secret string) *Token {
	sum := sha256.Sum256([]byte(secret))
	var token *Token
	for i, hash := range s.hashes {
		if subtle.ConstantTimeCompare(sum[:], hash[:]) == 1 {
			token = s.config.Tokens[i]
		}
	}
	return token
}

func (s *Server) csrfFor(sessionID string) string {
	mac := hmac.New(sha256.New, s.ui.csrfKey)
	mac.Write([]byte("weir ui csrf\x00" + sessionID))
	return hex.EncodeToString(mac.Sum(nil))
}

// sameOrigin rejects a cross-site POST: a browser sends Origin with every
// POST, and a form on another site cannot carry our CSRF token anyway. A
// reverse proxy that rewrites Host may name the original in
// X-Forwarded-Host (a header no cross-site form can set).
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return r.Header.Get("Sec-Fetch-Site") == "" || r.Header.Get("Sec-Fetch-Site") == "same-origin"
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return u.Host == r.Host || u.Host == r.Header.Get("X-Forwarded-Host")
}

// checkPost checks a UI form POST: same origin and the session's CSRF token.
func (s *Server) checkPost(r *http.Request, sess *uiLogin) bool {
	if !sameOrigin(r) {
		return false
	}
	got := r.PostFormValue(uiCSRFField)
	return subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) == 1
}

// requireLogin returns the session of a page request, or sends the caller
// to the login page and returns nil.
func (s *Server) requireLogin(w http.ResponseWriter, r *http.Request) *uiLogin {
	sess := s.loginOf(r)
	if sess == nil {
		http.Redirect(w, r, uiPrefix+"/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
	}
	return sess
}

func (s *Server) uiHome(w http.ResponseWriter, r *http.Request) {
	sess := s.requireLogin(w, r)
	if sess == nil {
		return
	}
	namespace := "default"
	if !sess.open && !sess.allNamespaces() && !sess.token.allows(namespace) {
		namespace = sess.token.Namespaces[0]
	}
	http.Redirect(w, r, listURL(namespace, nil), http.StatusFound)
}

// uiBase is what every page's layout needs.
type uiBase struct {
	CSRF       string
	Namespace  string
	Namespaces []string
	RiverUI    bool
	Session    *uiLogin
	Title      string
}

func (s *Server) base(r *http.Request, sess *uiLogin, namespace, title string) uiBase {
	b := uiBase{Namespace: namespace, Session: sess, Title: title}
	if sess != nil {
		b.CSRF = sess.csrf
		b.RiverUI = sess.allNamespaces()
		b.Namespaces = s.knownNamespaces(r, sess, namespace)
	}
	return b
}

// render executes a page into a buffer first, so a template error is a
// clean 500 rather than half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, page string, data any) {
	var buf bytes.Buffer
	if err := s.ui.pages[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		s.config.Logger.ErrorContext(r.Context(), "rendering UI page",
			slog.String("page", page), slog.String("error", err.Error()))
		http.Error(w, "internal error rendering the page (logged by the server)", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy",
		"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// uiErrorPage is the data of the error page.
type uiErrorPage struct {
	uiBase
	Message string
	Status  int
}

func (s *Server) renderError(w http.ResponseWriter, r *http.Request, sess *uiLogin, namespace string, err error) {
	apiErr := s.apiError(r, err)
	title := http.StatusText(apiErr.Status)
	s.render(w, r, apiErr.Status, "error", &uiErrorPage{
		uiBase: s.base(r, sess, namespace, title), Message: apiErr.Message, Status: apiErr.Status,
	})
}

// uiLoginPageData is the data of the login page.
type uiLoginPageData struct {
	uiBase
	Error string
	Next  string
}

func (s *Server) uiLoginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if s.loginOf(r) != nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, "login", &uiLoginPageData{uiBase: uiBase{Title: "Sign in"}, Next: next})
}

func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	next := safeNext(r.PostFormValue("next"))
	refuse := func(status int, message string) {
		s.render(w, r, status, "login", &uiLoginPageData{uiBase: uiBase{Title: "Sign in"}, Error: message, Next: next})
	}
	if !sameOrigin(r) {
		refuse(http.StatusForbidden, "This form must be sent from this server's own page.")
		return
	}
	address := clientAddress(r)
	if ok, wait := s.ui.sessions.loginAllowed(address); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		refuse(http.StatusTooManyRequests, "Too many failed sign-ins from your address: try again in a few minutes.")
		return
	}
	secret := strings.TrimSpace(r.PostFormValue("token"))
	token := s.tokenBySecret(secret)
	if secret == "" || token == nil {
		s.ui.sessions.loginFailed(address)
		refuse(http.StatusUnauthorized, "That token is not one this server accepts.")
		return
	}
	id, err := s.ui.sessions.create(token)
	if err != nil {
		s.renderError(w, r, nil, "", fmt.Errorf("starting a UI session: %w", err))
		return
	}
	http.SetCookie(w, &http.Cookie{
		HttpOnly: true,
		MaxAge:   int(uiLoginMaxAge / time.Second),
		Name:     uiCookie,
		Path:     "/",
		SameSite: http.SameSiteStrictMode,
		Secure:   r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https",
		Value:    id,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) uiLogout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	sess := s.loginOf(r)
	if sess == nil || !s.checkPost(r, sess) {
		http.Redirect(w, r, uiPrefix+"/login", http.StatusSeeOther)
		return
	}
	s.ui.sessions.revoke(sess.id) // nothing to revoke when open
	http.SetCookie(w, &http.Cookie{
		HttpOnly: true, MaxAge: -1, Name: uiCookie, Path: "/", SameSite: http.SameSiteStrictMode, Value: "",
	})
	http.Redirect(w, r, uiPrefix+"/login", http.StatusSeeOther)
}

// safeNext keeps a post-login redirect on this server: a path under /ui/ or
// /riverui/, never another host.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || next == "" || u.Scheme != "" || u.Host != "" || u.User != nil ||
		strings.HasPrefix(next, "//") || strings.Contains(next, "\\") ||
		!(strings.HasPrefix(u.Path, uiPrefix+"/") || strings.HasPrefix(u.Path, "/riverui/")) {
		return uiPrefix + "/"
	}
	return u.RequestURI()
}
