package migrations_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/weirhq/weir/fencing"
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

// Apply the fencing line with River's rivermigrate, as a River application
// does, under the lock weir's migrator holds: many processes of a deploy may
// run it at once.
func ExampleLock() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	const schema = "weir_example_lock"
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		log.Fatal(err)
	}
	weir, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := weir.Up(ctx, &migrations.UpOpts{Line: migrations.LineMain}); err != nil { // River's own tables
		log.Fatal(err)
	}

	driver, err := fencing.NewDriver(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Line: fencing.MigrationLine, Schema: schema})
	if err != nil {
		log.Fatal(err)
	}
	err = migrations.Lock(ctx, pool, schema, func(ctx context.Context) error {
		_, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	statuses, err := weir.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("fencing current:", statuses[1].Current == statuses[1].Latest)
	fmt.Println("schema check:", migrations.CheckStatus(schema, statuses[:2]))

	// Output:
	// fencing current: true
	// schema check: <nil>
}
