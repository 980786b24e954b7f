// Package ui holds the web UI's templates and static assets, embedded in the
// binary so the UI works offline with nothing but the server; package server
// serves them (see docs/server.md and docs/operations.md).
package ui

import "embed"

// Files holds templates/*.html (html/template, one page each plus
// layout.html) and static/ (the CSS and JavaScript the pages load).
//
//go:embed templates static
var Files embed.FS
