package server_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"

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
