package fencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
)

type limitArgs struct {
	Limits fencing.AttemptLimits `json:"limits"`
}

func (limitArgs) Kind() string { return "fencing_limit" }

// startLimitClient starts a fenced client whose limitArgs worker tells its
// args' limits, reports its start on started and returns work's result.
func startLimitClient(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schema string, driver *fencing.Driver,
	timeout time.Duration, started chan<- time.Time, work func(ctx context.Context, attempt int) error,
) *river.Client[pgx.Tx] {
	t.Helper()
	config := testConfig(schema, &clientOpts{driver: driver, maxWorkers: 2})
	river.AddWorker(config.Workers, &limitWorker{started: started, timeout: timeout, work: work})
	client, err := river.NewClient[pgx.Tx](driver, config)
	require.NoError(t, err)
	startFully(ctx, t, client, config)
	t.Cleanup(func() { stopClient(ctx, t, client) })
	return client
}

type limitWorker struct {
	river.WorkerDefaults[limitArgs]
	started chan<- time.Time
	timeout time.Duration
	work    func(ctx context.Context, attempt int) error
}

func (w *limitWorker) Timeout(*river.Job[limitArgs]) time.Duration { return w.timeout }

func (w *limitWorker) Work(ctx context.Context, job *river.Job[limitArgs]) error {
	if err := fencing.LimitAttempt(ctx, job.Args.Limits); err != nil {
		return err
	}
	w.started <- time.Now()
	return w.work(ctx, job.Attempt)
}

// TestLimitAttempt: an attempt that passes a limit it told LimitAttempt,
// its code deaf to its context, is recovered within AttemptLimitGrace plus
// a reaper interval (plus slack for a loaded machine), though its process
// keeps renewing the leases of its attempts and its lease is far longer;
// its late completion is refused. An attempt that returns when its context
// ends at its limit writes its own outcome.
func TestLimitAttempt(t *testing.T) {
	t.Parallel()
	const (
		ttl            = 10 * time.Second
		reaperInterval = 100 * time.Millisecond
		slack          = 3 * time.Second
	)
	config := func() *fencing.Config {
		// Renewals are further apart than the limits below plus the
		// grace: LimitAttempt must cut the fetch's lease back itself.
		return &fencing.Config{LeaseTTL: ttl, HeartbeatInterval: 2 * time.Second, ReaperInterval: reaperInterval}
	}

	t.Run("HungAttemptRecovered", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		waitPastRestartGrace(ctx, t, pool, ttl)
		driver := newDriver(t, pool, nil, config())
		started := make(chan time.Time, 10)
		release := make(chan struct{})
		client := startLimitClient(ctx, t, pool, schema, driver, 0, started, func(_ context.Context, attempt int) error {
			if attempt == 1 {
				<-release // deaf to its context
			}
			return nil
		})
		t.Cleanup(func() { // before the client stops
			select {
			case <-release:
			default:
				close(release)
			}
		})
		const limit = 500 * time.Millisecond
		inserted, err := client.Insert(ctx, limitArgs{Limits: fencing.AttemptLimits{HeartbeatTimeout: limit}}, nil)
		require.NoError(t, err)
		start := recv(t, started)

		// The lease the fetch gave (a LeaseTTL) was cut back at once.
		row := getJob(ctx, t, pool, schema, inserted.Job.ID)
		require.True(t, row.LeaseExpiresAt.Valid)
		var attemptedAt time.Time
		require.NoError(t, pool.QueryRow(ctx, "SELECT attempted_at FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
			" WHERE id = $1", inserted.Job.ID).Scan(&attemptedAt))
		require.False(t, row.LeaseExpiresAt.Time.After(attemptedAt.Add(limit+fencing.AttemptLimitGrace)),
			"lease until %s, attempt started %s", row.LeaseExpiresAt.Time, attemptedAt)

		second := recv(t, started) // the job, recovered, runs again
		took := second.Sub(start)
		require.Less(t, took, limit+fencing.AttemptLimitGrace+reaperInterval+slack, "recovered %s after the attempt started", took)
		require.Equal(t, 1, getJob(ctx, t, pool, schema, inserted.Job.ID).Errors)

		waitForState(ctx, t, pool, schema, inserted.Job.ID, "completed")
		close(release) // the first attempt completes too late
		waitUntil(t, "the late completion is refused", func() bool { return driver.Stats().StaleWritesRejected > 0 })
	})

	t.Run("AttemptReturningAtItsLimitWritesItsOutcome", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		waitPastRestartGrace(ctx, t, pool, ttl)
		driver := newDriver(t, pool, nil, config())
		const limit = 300 * time.Millisecond
		started := make(chan time.Time, 1)
		client := startLimitClient(ctx, t, pool, schema, driver, limit, started, func(ctx context.Context, _ int) error {
			<-ctx.Done()                       // River's deadline, the same as the limit
			time.Sleep(200 * time.Millisecond) //nolint:forbidigo // returns a little late, within the grace
			return errors.New("gave up at the deadline")
		})
		inserted, err := client.Insert(ctx, limitArgs{Limits: fencing.AttemptLimits{Timeout: limit}}, &river.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		recv(t, started)
		waitForState(ctx, t, pool, schema, inserted.Job.ID, "discarded")
		var lastError string
		require.NoError(t, pool.QueryRow(ctx, "SELECT errors[array_length(errors, 1)]->>'error' FROM "+
			pgx.Identifier{schema, "river_job"}.Sanitize()+" WHERE id = $1", inserted.Job.ID).Scan(&lastError))
		require.Contains(t, lastError, "gave up at the deadline", "the attempt's own outcome, not a recovery")
		require.Zero(t, driver.Stats().StaleWritesRejected)
	})
}
