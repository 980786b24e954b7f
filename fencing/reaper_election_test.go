package fencing_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

// riverLeader returns the ID of River's leader in schema, "" if none.
func riverLeader(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	var id string
	err := pool.QueryRow(ctx, "SELECT leader_id FROM "+pgx.Identifier{schema, "river_leader"}.Sanitize()).Scan(&id)
	if err == pgx.ErrNoRows {
		return ""
	}
	require.NoError(t, err)
	return id
}

// startClientOnQueue starts a River client on schema (a plain one for a
// nil driver) that serves queue alone and may lead River, stopped when the
// test ends.
func startClientOnQueue(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, driver *fencing.Driver, queue string) *river.Client[pgx.Tx] {
	t.Helper()
	config := testConfig(schema, &clientOpts{driver: driver})
	config.Queues = map[string]river.QueueConfig{queue: {MaxWorkers: 1}}
	var (
		client *river.Client[pgx.Tx]
		err    error
	)
	if driver != nil {
		client, err = river.NewClient[pgx.Tx](driver, config)
	} else {
		client, err = river.NewClient[pgx.Tx](riverpgxv5.New(pool), config)
	}
	require.NoError(t, err)
	startFully(ctx, t, client, config)
	t.Cleanup(func() { stopClient(ctx, t, client) })
	return client
}

// TestReaperRunsWhateverLeadsRiver: with a plain riverpgxv5 process as
// River's leader, a fenced process that is not River's leader reaps the
// expired lease of a fenced process that stopped renewing, within LeaseTTL
// plus a reaper interval (plus slack for a loaded machine). A reaper that
// ran only on River's leader would leave the lease unreaped here.
func TestReaperRunsWhateverLeadsRiver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	const ttl = time.Second
	config := func() *fencing.Config {
		return &fencing.Config{LeaseTTL: ttl, HeartbeatInterval: 200 * time.Millisecond, ReaperInterval: 100 * time.Millisecond}
	}
	waitPastRestartGrace(ctx, t, pool, ttl)

	// The plain process and the surviving fenced one serve queues of their
	// own: neither must fetch the job, which they have no worker for.
	plain := startClientOnQueue(ctx, t, pool, schema, nil, "plain")
	waitUntil(t, "the plain client leads River", func() bool { return riverLeader(ctx, t, pool, schema) == plain.ID() })

	// The process that dies: it never takes part in elections.
	runnerDriver := newDriver(t, pool, nil, config())
	worker := newBlockWorker(t)
	runner := startClient(ctx, t, pool, schema, &clientOpts{driver: runnerDriver, noLeader: true, worker: worker})
	// A fenced process that may lead, but River's leader is the plain one.
	survivorDriver := newDriver(t, pool, nil, config())
	startClientOnQueue(ctx, t, pool, schema, survivorDriver, "survivor")

	inserted, err := runner.Insert(ctx, blockArgs{}, nil)
	require.NoError(t, err)
	attempt := recv(t, worker.started)
	t.Cleanup(func() { attempt.release <- complete })

	runnerDriver.StopHeartbeats()
	stopped := time.Now()
	waitUntil(t, "the job is recovered", func() bool { return getJob(ctx, t, pool, schema, inserted.Job.ID).Errors > 0 })
	took := time.Since(stopped)
	bound := ttl + config().ReaperInterval + 5*time.Second // slack for a loaded machine
	require.Less(t, took, bound, "recovered %s after its last renewal", took)

	require.True(t, survivorDriver.ReaperHolds(schema), "the fenced process reaps")
	require.False(t, runnerDriver.ReaperHolds(schema), "a client with LeaderElectionDisabled never reaps")
	require.Equal(t, plain.ID(), riverLeader(ctx, t, pool, schema), "the plain client still leads River")
}

// TestReaperElection: of two fenced processes one reaps a schema at a time,
// whatever each calls the schema (by name or through the search_path), and
// the other takes over once the first stops or its session ends.
func TestReaperElection(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	schema := dbtest.TestSchema(ctx, t)
	config := func() *fencing.Config {
		return &fencing.Config{LeaseTTL: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond, ReaperInterval: 50 * time.Millisecond}
	}

	// One client names the schema; the other's pool has it first in its
	// search_path and names none.
	pathConfig := pool.Config().Copy()
	pathConfig.ConnConfig.RuntimeParams["search_path"] = schema
	pathPool, err := pgxpool.NewWithConfig(ctx, pathConfig)
	require.NoError(t, err)
	t.Cleanup(pathPool.Close)

	named := newDriver(t, pool, nil, config())
	namedClient := startClient(ctx, t, pool, schema, &clientOpts{driver: named})
	unnamed := newDriver(t, pathPool, nil, config())
	unnamedClient := startClient(ctx, t, pathPool, "", &clientOpts{driver: unnamed})

	holders := func() (n int, holder *fencing.Driver) {
		if named.ReaperHolds(schema) {
			n, holder = n+1, named
		}
		if unnamed.ReaperHolds("") {
			n, holder = n+1, unnamed
		}
		return n, holder
	}
	waitUntil(t, "a fenced process reaps", func() bool { n, _ := holders(); return n > 0 })
	// Both watch for server restarts, reaping or not: River's rescuer,
	// which may run in either, takes its grace after a restart from it.
	var epoch time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT "+fencing.ServerEpochSQL).Scan(&epoch))
	for _, driver := range []*fencing.Driver{named, unnamed} {
		waitUntil(t, "the restart watch saw the server", func() bool { return driver.RestartWatchSeen().Equal(epoch) })
	}
	for range 20 { // many reaper intervals
		n, _ := holders()
		require.Equal(t, 1, n, "exactly one process reaps the schema")
		time.Sleep(25 * time.Millisecond) //nolint:forbidigo // sampling who holds the lock over many passes
	}

	// The holder's session ends (an administrator, idle_session_timeout):
	// a new session takes the lock, and one process reaps again.
	holderPID := func() int {
		var pid int
		err := pool.QueryRow(ctx, `
SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objid = (
    hashtextextended('weir.fencing.reaper:' || $1::text, 0) & 4294967295)::oid`, schema).Scan(&pid)
		if err == pgx.ErrNoRows {
			return 0
		}
		require.NoError(t, err)
		return pid
	}
	terminatedPID := holderPID()
	require.NotZero(t, terminatedPID)
	var terminated bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", terminatedPID).Scan(&terminated))
	require.True(t, terminated)
	waitUntil(t, "a new session holds the reaper lock", func() bool {
		pid := holderPID()
		n, _ := holders()
		return pid != 0 && pid != terminatedPID && n == 1
	})

	// The holder stops: the other process takes over.
	_, first := holders()
	firstClient, other := namedClient, unnamed
	if first == unnamed {
		firstClient, other = unnamedClient, named
	}
	stopClient(ctx, t, firstClient)
	waitUntil(t, "the other process reaps", func() bool {
		n, holder := holders()
		return n == 1 && holder == other
	})
}
