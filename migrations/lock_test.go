package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/migrations"
)

// TestLockMakesRivermigrateConcurrent: River users migrate the fencing line
// with rivermigrate, as documented, while weir's migrator runs too. Wrapped
// in Lock, two rivermigrate migrators and a Migrator racing on one schema
// all succeed, round after round, and apply each version once.
func TestLockMakesRivermigrateConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	// newPool is a pool of its own, as a separate process has.
	newPool := func() *pgxpool.Pool {
		config, err := pgxpool.ParseConfig(dbtest.URL(ctx, t))
		require.NoError(t, err)
		config.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(ctx, config)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}

	for round := range 4 {
		schema := dbtest.EmptySchema(ctx, t)
		weir, err := migrations.New(newPool(), &migrations.Config{Schema: schema})
		require.NoError(t, err)
		// A River application: River's main line is there already.
		_, err = weir.Up(ctx, &migrations.UpOpts{Line: migrations.LineMain})
		require.NoError(t, err)

		const rivermigrators = 2
		applied := make([]int, rivermigrators+1)
		errs := make([]error, rivermigrators+1)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range rivermigrators {
			pool := newPool()
			driver, err := fencing.NewDriver(pool, nil)
			require.NoError(t, err)
			migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Line: fencing.MigrationLine, Schema: schema})
			require.NoError(t, err)
			wg.Go(func() {
				<-start
				errs[i] = migrations.Lock(ctx, pool, schema, func(ctx context.Context) error {
					res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
					if err == nil {
						applied[i] = len(res.Versions)
					}
					return err
				})
			})
		}
		wg.Go(func() {
			<-start
			res, err := weir.Up(ctx, nil)
			if errs[rivermigrators] = err; err == nil {
				for _, v := range res.Versions {
					if v.Line == migrations.LineFencing {
						applied[rivermigrators]++
					}
				}
			}
		})
		close(start)
		wg.Wait()

		total := 0
		for i, err := range errs {
			require.NoError(t, err, "round %d, migrator %d", round, i)
			total += applied[i]
		}
		statuses, err := weir.Status(ctx)
		require.NoError(t, err)
		require.Equal(t, migrations.LineFencing, statuses[1].Line)
		require.Equal(t, statuses[1].Latest, total, "round %d: every fencing version applied once", round)
		require.NoError(t, weir.Verify(ctx))
	}
}

func TestLockNeedsTwoConnections(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	config, err := pgxpool.ParseConfig(dbtest.URL(ctx, t))
	require.NoError(t, err)
	config.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	err = migrations.Lock(ctx, pool, "", func(context.Context) error { return nil })
	require.ErrorContains(t, err, "at least 2 connections")
}
