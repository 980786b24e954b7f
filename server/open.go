package server

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// With Config.AllowUnauthenticated nothing proves who calls, so the server
// answers only what a browser page of another site cannot send: a loopback
// Host (a DNS-rebound name is refused), an Origin, when there is one, on a
// loopback host, and API writes as application/json (a cross-site form or
// no-cors fetch can send text/plain or nothing, never JSON without a
// preflight the server does not grant).

// guardOpen wraps the handler of a server without tokens.
func (s *Server) guardOpen(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			s.writeError(w, r, newError(http.StatusForbidden, CodePermissionDenied,
				"this server runs without tokens and answers only a loopback Host (localhost, 127.0.0.1, [::1])",
				map[string]any{"host": r.Host}))
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !loopbackOrigin(origin) {
			s.writeError(w, r, newError(http.StatusForbidden, CodePermissionDenied,
				"this server runs without tokens and answers only pages of a loopback origin",
				map[string]any{"origin": origin}))
			return
		}
		if apiWrite(r) && !jsonContent(r.Header.Get("Content-Type")) {
			s.writeError(w, r, newError(http.StatusUnsupportedMediaType, CodeInvalidArgument,
				"this server runs without tokens: API writes need Content-Type: application/json",
				map[string]any{"field": "Content-Type"}))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header names this machine's loopback
// interface: localhost or a loopback IP, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && loopbackHost(u.Host)
}

func apiWrite(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return strings.HasPrefix(r.URL.Path, apiPrefix+"/")
}

func jsonContent(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	return err == nil && mediaType == "application/json"
}
