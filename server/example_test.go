package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/server"
)

// Serve health and readiness; readiness turns green once the schema is at the
// version this build requires.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	const schema = "weir_example_server"
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		log.Fatal(err)
	}

	srv, err := server.New(pool, &server.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	httpServer := httptest.NewServer(srv.Handler())
	defer httpServer.Close()

	status := func(path string) int {
		resp, err := httpServer.Client().Get(httpServer.URL + path)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	fmt.Println("healthz:", status("/healthz"))
	fmt.Println("readyz before migrating:", status("/readyz"))

	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		log.Fatal(err)
	}
	fmt.Println("readyz after migrating:", status("/readyz"))

	// Output:
	// healthz: 200
	// readyz before migrating: 503
	// readyz after migrating: 200
}

// Start a workflow over the JSON API with a bearer token; the same request ID
// again is an idempotent replay, another request for the live workflow ID a
// typed conflict. (No worker runs here, so the run stays running.)
func Example_api() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	const schema = "weir_example_server_api"
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		log.Fatal(err)
	}
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		log.Fatal(err)
	}

	const secret = "example-secret-0123456789"
	srv, err := server.New(pool, &server.Config{Schema: schema, Tokens: []*server.Token{
		{Name: "ci", Namespaces: []string{"orders"}, Role: server.RoleWrite, Secret: secret},
	}})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	httpServer := httptest.NewServer(srv.Handler())
	defer httpServer.Close()

	post := func(path, token, body string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, httpServer.URL+path, strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpServer.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Created    bool `json:"created"`
			Generation int  `json:"generation"`
			Error      *struct {
				Code string         `json:"code"`
				Data map[string]any `json:"data"`
			} `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			log.Fatal(err)
		}
		if out.Error != nil {
			fmt.Println(resp.StatusCode, out.Error.Code, "generation", out.Error.Data["generation"])
			return
		}
		fmt.Println(resp.StatusCode, "created", out.Created, "generation", out.Generation)
	}
	const start = `{"kind":"ship_order","workflow_id":"order-42","request_id":"%s","args":{"id":42}}`
	post("/api/v1/namespaces/orders/workflows", secret, fmt.Sprintf(start, "req-1"))
	post("/api/v1/namespaces/orders/workflows", secret, fmt.Sprintf(start, "req-1"))
	post("/api/v1/namespaces/orders/workflows", secret, fmt.Sprintf(start, "req-2"))
	post("/api/v1/namespaces/orders/workflows", "", fmt.Sprintf(start, "req-3"))
	post("/api/v1/namespaces/billing/workflows", secret, fmt.Sprintf(start, "req-4"))

	// Output:
	// 201 created true generation 1
	// 200 created false generation 1
	// 409 workflow_already_started generation 1
	// 401 unauthenticated generation <nil>
	// 403 permission_denied generation <nil>
}
