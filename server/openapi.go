package server

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the API's OpenAPI 3 document, served at /api/v1/openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

func handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(OpenAPI)
}
