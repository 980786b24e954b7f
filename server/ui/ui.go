// Package ui holds the web UI's templates and static assets, embedded in the
// binary so the UI works offline with nothing but the server. The handlers
// live in package server, which parses Files once at startup.
//
// The UI, served by every weir server:
//
//   - /ui/namespaces/{namespace}/workflows lists runs, newest first, filtered
//     by workflow ID prefix, kind, state and creation time, a page at a time
//     (List's cursor), with an opt-in auto-refresh.
//   - /ui/namespaces/{namespace}/workflows/{workflow_id}[?run_id=…] shows a
//     run: state, times, args, result or failure (with causes), pending
//     activities (attempt, lease expiry, last error), inputs waiting for the
//     next workflow task, the history as a timeline, every generation of the
//     workflow ID, and the attempts of its River jobs from the fencing
//     attempt log, with stale (superseded) attempts flagged. A running run's
//     page polls …/status and reloads when the run changes. Signal, cancel
//     and terminate forms appear only for a write or admin session, and the
//     server checks the role again on each POST.
//   - /riverui/ is River UI, for sessions whose token spans every namespace.
//
// Sign-in takes an API token (see server.Token) and keeps it in an HttpOnly,
// SameSite=Strict cookie; every form carries a CSRF token. With
// server.Config.AllowUnauthenticated (weir dev on loopback) the UI is open.
package ui

import "embed"

// Files holds templates/*.html (html/template, one page each plus
// layout.html) and static/ (the CSS and JavaScript the pages load).
//
//go:embed templates static
var Files embed.FS
