// Package server is weir's HTTP server: a JSON API under /api/v1 for
// operators and callers in any language, described by an OpenAPI 3 document
// served at /api/v1/openapi.json, plus /healthz, /readyz and /metrics.
//
//	srv, err := server.New(pool, &server.Config{
//		Schema: "weir",
//		Tokens: []*server.Token{{Name: "ci", Namespaces: []string{"orders"}, Role: server.RoleWrite, Secret: secret}},
//	})
//	...
//	defer srv.Close()
//	err = srv.Serve(ctx, listener) // graceful shutdown when ctx ends
//
// # API
//
// The OpenAPI document has every route, field and response (docs/server.md
// summarises them): workflows under /api/v1/namespaces/{namespace}/workflows
// (start, list, and per workflow ID describe, signal, signal-with-start,
// query, update, cancel, terminate, history and a result long poll; a run_id
// query parameter picks a run, else the latest is meant), schedules under
// /api/v1/namespaces/{namespace}/schedules. Reading schedules needs the read
// role, changing them admin.
//
// Every error is {"error": {"code", "message", "data"}} with a stable code
// (the Code constants) and the IDs involved in data, e.g.
// workflow_already_started with workflow_id, run_id and generation.
//
// # Auth
//
// Every API call needs "Authorization: Bearer <secret>" of one of
// Config.Tokens, compared in constant time; a token acts only in its
// namespaces and within its role (read < write < admin). A missing or
// unknown token is 401 unauthenticated, a token outside its scope 403
// permission_denied. Config.AllowUnauthenticated opens the API (weir dev on
// loopback only); the server then answers only a loopback Host and Origin
// and takes API writes only as application/json, so no web page of another
// site (nor one reached by DNS rebinding) can drive it. The OpenAPI
// document, /healthz and /readyz need no token; /metrics needs
// Config.MetricsToken when one is set. Token secrets (and the metrics
// token) must not be easy to guess: New refuses short ones and ones of a
// few repeated characters.
//
// # Input
//
// Text anywhere in a request (path, query, form, JSON strings and args)
// must be valid UTF-8 without NUL bytes: 400 invalid_argument otherwise,
// before any query.
//
// # Web UI
//
// The UI under /ui/ signs in with an API token into a server-side session
// (the cookie holds a random ID; sign-out revokes it; it ends after 12
// hours; sessions are per process). Failed sign-ins are limited per
// address. Pages lay out JSON only up to a size and depth and otherwise
// show its start raw, with a download of the whole.
//
// # Health
//
// GET /healthz is liveness: 200 while the process can reach Postgres. It
// and /readyz say what is wrong without connection details, which go to
// Config.Logger.
// GET /readyz is readiness: 200 only when every migration line (River's,
// fencing's, weir's) is at the version this build requires (see
// migrations.Migrator.Verify), 503 naming the lines that are behind
// otherwise.
// GET /metrics serves Prometheus metrics of requests, the pool and the
// runs (weir_workflow_runs, by state unless Config.RunMetrics says
// otherwise), counted at most once a Config.RunMetricsInterval.
package server
