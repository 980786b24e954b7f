package migrations_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
)

// Bring a database to the schema this build needs, then check it the way a
// readiness probe does.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	const schema = "weir_example_migrations"
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		log.Fatal(err)
	}

	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if err := migrator.Verify(ctx); err != nil {
		fmt.Println("before: behind")
	}

	res, err := migrator.Up(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("applied versions:", len(res.Versions) > 0)

	// Running it again (or from another process at the same time) is a no-op.
	res, err = migrator.Up(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("applied again:", len(res.Versions))

	statuses, err := migrator.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, status := range statuses {
		fmt.Printf("%s current: %v\n", status.Line, status.Current == status.Latest)
	}
	fmt.Println("verify:", migrator.Verify(ctx))

	// Output:
	// before: behind
	// applied versions: true
	// applied again: 0
	// main current: true
	// fencing current: true
	// weir current: true
	// verify: <nil>
}
