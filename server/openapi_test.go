package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/server"
)

// openAPIRouter loads and validates the OpenAPI document once.
var openAPIRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := openapi3.NewLoader().LoadFromData(server.OpenAPI)
	if err != nil {
		return nil, err
	}
	return legacy.NewRouter(doc) // validates the document
})

// checkResponse validates a response against the OpenAPI document: its
// route and method must be documented, and its status and body must match
// the operation's responses.
func checkResponse(t *testing.T, req *http.Request, status int, header http.Header, body []byte) {
	t.Helper()
	require.Equal(t, "nosniff", header.Get("X-Content-Type-Options"), "every JSON answer forbids sniffing")
	router, err := openAPIRouter()
	require.NoError(t, err)
	// Route on the escaped path, so an escaped slash stays in its segment.
	routed := req.Clone(req.Context())
	routed.URL.Path, routed.URL.RawPath = req.URL.EscapedPath(), ""
	route, params, err := router.FindRoute(routed)
	if err != nil {
		// Only the mux's fallback may answer an undocumented route.
		var resp server.ErrorResponse
		require.NoError(t, json.Unmarshal(body, &resp), string(body))
		require.Equal(t, http.StatusNotFound, status, "%s %s is not in the OpenAPI document", req.Method, req.URL.Path)
		require.Contains(t, resp.Error.Data, "route")
		return
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		Body:    io.NopCloser(strings.NewReader(string(body))),
		Header:  header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			PathParams: params, Request: req, Route: route,
		},
		Status: status,
	})
	require.NoError(t, err, "%s %s answered %d %s", req.Method, req.URL.Path, status, body)
}

func TestOpenAPI(t *testing.T) {
	t.Parallel()

	ctx := t.Context()
	srv, err := server.New(dbtest.Pool(ctx, t), &server.Config{Schema: dbtest.TestSchema(ctx, t)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })

	doc, err := openapi3.NewLoader().LoadFromData(server.OpenAPI)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(ctx))

	t.Run("EveryRouteDocumentedAndBack", func(t *testing.T) {
		t.Parallel()
		var documented []string
		for path, item := range doc.Paths.Map() {
			for method := range item.Operations() {
				documented = append(documented, method+" "+path)
			}
		}
		var routes []string
		for _, rt := range srv.Routes() {
			routes = append(routes, rt.Method+" "+rt.Pattern)

			// The document states each route's role, and public routes need no token.
			op := doc.Paths.Value(rt.Pattern).GetOperation(rt.Method)
			require.NotNil(t, op, rt.Pattern)
			if rt.Role == "" {
				require.NotNil(t, op.Security, rt.Pattern)
				require.Empty(t, *op.Security, rt.Pattern)
				continue
			}
			require.Equal(t, string(rt.Role), op.Extensions["x-weir-role"], rt.Pattern)
			require.NotEmpty(t, *op.Security, rt.Pattern)
			require.Contains(t, op.Responses.Map(), "401", rt.Pattern)
			require.Contains(t, op.Responses.Map(), "403", rt.Pattern)
		}
		slices.Sort(documented)
		slices.Sort(routes)
		require.Equal(t, documented, routes)

		// And the mux itself serves each documented operation: none falls
		// through to the fallback's "no such route".
		for _, op := range documented {
			method, path, _ := strings.Cut(op, " ")
			path = strings.NewReplacer("{namespace}", "default", "{workflow_id}", "wf", "{schedule_id}", "sched").Replace(path)
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(ctx, method, path, nil))
			if rec.Code == http.StatusNotFound {
				var resp server.ErrorResponse
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
				require.NotContains(t, resp.Error.Data, "route", op)
			}
			require.NotEqual(t, http.StatusMethodNotAllowed, rec.Code, op)
		}
	})

	t.Run("Served", func(t *testing.T) {
		t.Parallel()
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/v1/openapi.json", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		require.Equal(t, server.OpenAPI, rec.Body.Bytes())
	})

	t.Run("ErrorCodesDocumented", func(t *testing.T) {
		t.Parallel()
		var codes []string
		for _, code := range doc.Components.Schemas["Error"].Value.Properties["code"].Value.Enum {
			codes = append(codes, code.(string))
		}
		require.ElementsMatch(t, []string{
			server.CodeDeadlineExceeded, server.CodeInternal, server.CodeInvalidArgument, server.CodeNotFound,
			server.CodePayloadTooLarge, server.CodePermissionDenied, server.CodeQueryFailed, server.CodeQueryTimeout,
			server.CodeRequestConflict, server.CodeRunClosed, server.CodeScheduleAlreadyExists,
			server.CodeUnauthenticated, server.CodeUnavailable, server.CodeUnimplemented, server.CodeUpdateFailed, server.CodeUpdateRejected,
			server.CodeWorkflowAlreadyStarted, server.CodeWorkflowIDReuse,
		}, codes)
	})
}
