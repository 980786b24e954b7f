package fencing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbtest"
	"github.com/weirhq/weir/internal/fencingclaim"
)

// TestClaimedJob: a job inserted already claimed (eager dispatch) is fenced
// like a fetched one: its lease is renewed while it works, its completion
// commits the caller's writes only while it holds the job, and an attempt
// that never runs is recovered by the lease reaper when its lease expires.
func TestClaimedJob(t *testing.T) {
	t.Parallel()

	setup := func(ctx context.Context, t *testing.T) (*fencing.Driver, string, func(context.Context, pgx.Tx) *fencingclaim.Claim) {
		t.Helper()
		pool := dbtest.Pool(ctx, t)
		schema := dbtest.TestSchema(ctx, t)
		table := pgx.Identifier{schema, "side_effect"}.Sanitize()
		_, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+" (job_id bigint, attempt int)")
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "DELETE FROM "+table)
		require.NoError(t, err)
		driver := newDriver(t, pool, nil, nil)
		startClient(ctx, t, pool, schema, &clientOpts{driver: driver, maxWorkers: 2})
		claim := func(ctx context.Context, tx pgx.Tx) *fencingclaim.Claim {
			c, err := claimAPI(driver).InsertClaimedTx(ctx, tx, &fencingclaim.Params{
				Args: []byte(`{}`), AttemptedBy: "test", Kind: noopArgs{}.Kind(), MaxAttempts: 3, Queue: "default", Schema: schema,
			})
			require.NoError(t, err)
			return c
		}
		return driver, schema, claim
	}
	// committed claims a job in a transaction of its own.
	committed := func(ctx context.Context, t *testing.T, pool *pgxpool.Pool, claim func(context.Context, pgx.Tx) *fencingclaim.Claim) *fencingclaim.Claim {
		t.Helper()
		var c *fencingclaim.Claim
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { c = claim(ctx, tx); return nil }))
		return c
	}
	// rolledBack begins a transaction that is rolled back when the test ends.
	rolledBack := func(ctx context.Context, t *testing.T) pgx.Tx {
		t.Helper()
		tx, err := dbtest.Pool(ctx, t).Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
		return tx
	}
	sideEffects := func(ctx context.Context, t *testing.T, schema string, jobID int64) int {
		t.Helper()
		var n int
		require.NoError(t, dbtest.Pool(ctx, t).QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "side_effect"}.Sanitize()+
			" WHERE job_id = $1", jobID).Scan(&n))
		return n
	}

	t.Run("CompletesWithTheCallersWrites", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, schema, claim := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)

		var c *fencingclaim.Claim
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			c = claim(ctx, tx)
			var setting string
			require.NoError(t, tx.QueryRow(ctx, "SELECT coalesce(current_setting('weir.fencing_lease_ttl', true), '')").Scan(&setting))
			require.Empty(t, setting, "the lease setting does not outlive the insert")
			return nil
		}))
		row := getJob(ctx, t, pool, schema, c.ID)
		require.Equal(t, "running", row.State)
		require.Equal(t, 1, row.Attempt)
		require.True(t, row.LeaseToken.Valid)
		require.True(t, row.LeaseExpiresAt.Valid)

		err := claimAPI(driver).WorkClaimed(ctx, c, time.Time{}, func(ctx context.Context, _ context.CancelCauseFunc) error {
			lease, ok := fencing.LeaseFromContext(ctx)
			require.True(t, ok)
			require.Equal(t, c.ID, lease.JobID)
			require.Equal(t, row.LeaseToken.String, lease.Token)
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "side_effect"}.Sanitize()+" VALUES ($1, 1)", c.ID); err != nil {
					return err
				}
				return claimAPI(driver).SetClaimedStateTx(ctx, tx, riverdriver.JobSetStateCompleted(c.ID, time.Now(), nil))
			})
		})
		require.NoError(t, err)
		require.Equal(t, "completed", getJob(ctx, t, pool, schema, c.ID).State)
		require.Equal(t, 1, sideEffects(ctx, t, schema, c.ID))
	})

	t.Run("RowIsTheInsertedRow", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, schema, claim := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)

		c := committed(ctx, t, pool, claim)
		require.NotZero(t, c.ID, "the sequence's ID")
		want, err := driver.GetExecutor().JobGetByID(ctx, &riverdriver.JobGetByIDParams{ID: c.ID, Schema: schema})
		require.NoError(t, err)
		got := c.Row()
		require.Equal(t, want.ID, got.ID)
		require.Equal(t, want.Attempt, got.Attempt)
		require.True(t, want.AttemptedAt.Equal(*got.AttemptedAt), "%v, %v", want.AttemptedAt, got.AttemptedAt)
		require.Equal(t, want.AttemptedBy, got.AttemptedBy)
		require.True(t, want.CreatedAt.Equal(got.CreatedAt), "%v, %v", want.CreatedAt, got.CreatedAt)
		require.True(t, want.ScheduledAt.Equal(got.ScheduledAt), "%v, %v", want.ScheduledAt, got.ScheduledAt)
		require.JSONEq(t, string(want.EncodedArgs), string(got.EncodedArgs))
		require.JSONEq(t, string(want.Metadata), string(got.Metadata))
		require.Equal(t, want.Kind, got.Kind)
		require.Equal(t, want.MaxAttempts, got.MaxAttempts)
		require.Equal(t, want.Priority, got.Priority)
		require.Equal(t, want.Queue, got.Queue)
		require.Equal(t, want.State, got.State)
	})

	t.Run("WorkedAgainHasAStateOfItsOwn", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, schema, claim := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)

		// The contract is one WorkClaimed per claim; a second one, while the
		// first runs, is an attempt of its own with the same lease: the
		// first's context is not the second's, and cancelling one leaves
		// the other running.
		c := committed(ctx, t, pool, claim)
		token := getJob(ctx, t, pool, schema, c.ID).LeaseToken.String
		errFirst := errors.New("first cancelled")
		err := claimAPI(driver).WorkClaimed(ctx, c, time.Time{}, func(first context.Context, cancelFirst context.CancelCauseFunc) error {
			return claimAPI(driver).WorkClaimed(ctx, c, time.Time{}, func(second context.Context, _ context.CancelCauseFunc) error {
				lease, ok := fencing.LeaseFromContext(second)
				require.True(t, ok)
				require.Equal(t, c.ID, lease.JobID)
				require.Equal(t, token, lease.Token)
				require.Equal(t, c.AttemptedAt.UTC(), lease.AttemptedAt.UTC())
				cancelFirst(errFirst)
				require.ErrorIs(t, context.Cause(first), errFirst)
				require.NoError(t, second.Err(), "the second attempt runs on")
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					return claimAPI(driver).SetClaimedStateTx(second, tx, riverdriver.JobSetStateCompleted(c.ID, time.Now(), nil))
				})
			})
		})
		require.NoError(t, err)
		require.Equal(t, "completed", getJob(ctx, t, pool, schema, c.ID).State)
	})

	t.Run("RolledBackCompletionKeepsTheLease", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, schema, claim := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)

		// Each way of writing the completion succeeds and its transaction
		// then rolls back (a later statement failed, say): the attempt still
		// holds its job, so its lease goes on being renewed (LeaseTTL 3s,
		// heartbeats every 200ms), and it completes for real afterwards.
		c := committed(ctx, t, pool, claim)
		err := claimAPI(driver).WorkClaimed(ctx, c, time.Time{}, func(ctx context.Context, _ context.CancelCauseFunc) error {
			for _, queued := range []bool{false, true} {
				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				params := riverdriver.JobSetStateCompleted(c.ID, time.Now(), nil)
				if queued {
					batch := &pgx.Batch{}
					require.NoError(t, queueCompletion(ctx, driver, batch, params.ID, *params.FinalizedAt, params.MetadataUpdates))
					require.NoError(t, tx.SendBatch(ctx, batch).Close())
				} else {
					require.NoError(t, claimAPI(driver).SetClaimedStateTx(ctx, tx, params))
				}
				require.NoError(t, tx.Rollback(ctx))
			}
			before := getJob(ctx, t, pool, schema, c.ID).LeaseExpiresAt.Time
			require.Eventually(t, func() bool {
				return getJob(ctx, t, pool, schema, c.ID).LeaseExpiresAt.Time.After(before)
			}, 5*time.Second, 20*time.Millisecond, "the lease is no longer renewed")
			require.NoError(t, ctx.Err(), "the attempt was not told it lost its lease")
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return claimAPI(driver).SetClaimedStateTx(ctx, tx, riverdriver.JobSetStateCompleted(c.ID, time.Now(), nil))
			})
		})
		require.NoError(t, err)
		require.Equal(t, "completed", getJob(ctx, t, pool, schema, c.ID).State)
	})

	t.Run("StaleCannotFinalize", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, schema, claim := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)

		c := committed(ctx, t, pool, claim)
		// The write below must be refused by its own check, not by the
		// keeper having noticed the loss first (cancelling the attempt).
		driver.StopHeartbeats()
		err := claimAPI(driver).WorkClaimed(ctx, c, time.Time{}, func(ctx context.Context, _ context.CancelCauseFunc) error {
			// The job is taken away and a new attempt holds it now.
			_, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+
				" SET state = 'running', attempt = 2, attempted_at = now(), lease_expires_at = NULL WHERE id = $1", c.ID)
			require.NoError(t, err)
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			_, err = tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "side_effect"}.Sanitize()+" VALUES ($1, 1)", c.ID)
			require.NoError(t, err)
			err = claimAPI(driver).SetClaimedStateTx(ctx, tx, riverdriver.JobSetStateCompleted(c.ID, time.Now(), nil))
			require.ErrorIs(t, err, fencing.ErrLeaseLost)
			var lost *fencing.LeaseLostError
			require.ErrorAs(t, err, &lost)
			require.Equal(t, c.ID, lost.JobID)
			require.Error(t, tx.Commit(ctx), "the caller's transaction is aborted")
			return nil
		})
		require.NoError(t, err)
		row := getJob(ctx, t, pool, schema, c.ID)
		require.Equal(t, "running", row.State)
		require.Equal(t, 2, row.Attempt)
		require.Zero(t, sideEffects(ctx, t, schema, c.ID))
	})

	t.Run("CancelRequestedWhileItWorks", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, schema, claim := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)

		c := committed(ctx, t, pool, claim)
		err := claimAPI(driver).WorkClaimed(ctx, c, time.Time{}, func(ctx context.Context, _ context.CancelCauseFunc) error {
			// River's JobCancel on a running job only marks it; the attempt's
			// failure then cancels it instead of making it retryable.
			_, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+
				` SET metadata = metadata || '{"cancel_attempted_at": "2026-11-30T00:00:00Z"}' WHERE id = $1`, c.ID)
			require.NoError(t, err)
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return claimAPI(driver).SetClaimedStateTx(ctx, tx, riverdriver.JobSetStateErrorRetryable(c.ID, time.Now().Add(time.Minute),
					[]byte(`{"at":"2026-11-30T00:00:00Z","attempt":1,"error":"cancelled","trace":""}`), []byte(`{"big":12345678901234567890}`)))
			})
		})
		require.NoError(t, err, "a cancelled job is not a lost lease")
		row := getJob(ctx, t, pool, schema, c.ID)
		require.Equal(t, "cancelled", row.State)
		var big string
		require.NoError(t, pool.QueryRow(ctx, "SELECT metadata->>'big' FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+" WHERE id = $1",
			c.ID).Scan(&big))
		require.Equal(t, "12345678901234567890", big, "metadata updates pass through unrounded")
	})

	t.Run("RenewedWhileItWorks", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, schema, claim := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)

		c := committed(ctx, t, pool, claim)
		first := getJob(ctx, t, pool, schema, c.ID).LeaseExpiresAt.Time
		err := claimAPI(driver).WorkClaimed(ctx, c, time.Time{}, func(ctx context.Context, _ context.CancelCauseFunc) error {
			waitUntil(t, "the lease is renewed", func() bool {
				return getJob(ctx, t, pool, schema, c.ID).LeaseExpiresAt.Time.After(first)
			})
			require.NoError(t, fencing.Heartbeat(ctx, map[string]int{"done": 1}))
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return claimAPI(driver).SetClaimedStateTx(ctx, tx, riverdriver.JobSetStateCompleted(c.ID, time.Now(), nil))
			})
		})
		require.NoError(t, err)
		require.Equal(t, "completed", getJob(ctx, t, pool, schema, c.ID).State)
	})

	t.Run("AbandonedGoesBackToRiver", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, schema, claim := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)

		// Claimed, then never worked: its process died.
		c := committed(ctx, t, pool, claim)
		waitPastRestartGrace(ctx, t, pool, 3*time.Second)
		row := waitForState(ctx, t, pool, schema, c.ID, "completed")
		require.Equal(t, 2, row.Attempt, "River ran it again once the lease expired")
	})

	// queued completes c with a write queued behind the caller's own in one
	// batch (Completion, QueueCompletions), after takeAway ran.
	queued := func(ctx context.Context, t *testing.T, driver *fencing.Driver, schema string, claim func(context.Context, pgx.Tx) *fencingclaim.Claim,
		c *fencingclaim.Claim, takeAway func(ctx context.Context),
	) error {
		t.Helper()
		pool := dbtest.Pool(ctx, t)
		return claimAPI(driver).WorkClaimed(ctx, c, time.Time{}, func(ctx context.Context, _ context.CancelCauseFunc) error {
			takeAway(ctx)
			batch := &pgx.Batch{}
			batch.Queue("INSERT INTO "+pgx.Identifier{schema, "side_effect"}.Sanitize()+" VALUES ($1, 1)", c.ID)
			require.NoError(t, queueCompletion(ctx, driver, batch, c.ID, time.Now(), nil))
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			batchErr := tx.SendBatch(ctx, batch).Close()
			// Commit even if the batch failed, as a careless caller would.
			return errors.Join(batchErr, tx.Commit(ctx))
		})
	}

	t.Run("QueuedWithTheCallersWrites", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, schema, claim := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)

		c := committed(ctx, t, pool, claim)
		require.NoError(t, queued(ctx, t, driver, schema, claim, c, func(context.Context) {}))
		row := getJob(ctx, t, pool, schema, c.ID)
		require.Equal(t, "completed", row.State)
		require.False(t, row.LeaseToken.Valid, "the lease is revoked")
		require.Equal(t, 1, sideEffects(ctx, t, schema, c.ID))
	})

	// A queued write refused, whoever took the job: the batch fails with
	// the lease lost, and the caller's commit (made though it ignored the
	// error) fails too.
	for _, c := range []struct {
		name, takeAway string
		state          string
		attempt        int
	}{
		// A new attempt holds the job now.
		{"QueuedStaleCannotFinalize", "SET state = 'running', attempt = 2, attempted_at = now(), lease_expires_at = NULL", "running", 2},
		// The lease expired and the reaper recovered the job; no
		// attempt holds it yet (its last token is still this one's).
		{"QueuedAfterTheReaperCannotFinalize", "SET state = 'available', scheduled_at = now() + interval '1 hour', lease_expires_at = NULL", "available", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			driver, schema, claim := setup(ctx, t)
			pool := dbtest.Pool(ctx, t)

			cl := committed(ctx, t, pool, claim)
			driver.StopHeartbeats() // the queued write's own check refuses it, not the keeper
			err := queued(ctx, t, driver, schema, claim, cl, func(ctx context.Context) {
				_, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+" "+c.takeAway+" WHERE id = $1", cl.ID)
				require.NoError(t, err)
			})
			var lost *fencing.LeaseLostError
			require.ErrorAs(t, err, &lost)
			require.Equal(t, cl.ID, lost.JobID)
			row := getJob(ctx, t, pool, schema, cl.ID)
			require.Equal(t, c.state, row.State)
			require.Equal(t, c.attempt, row.Attempt)
			require.Zero(t, sideEffects(ctx, t, schema, cl.ID), "the caller's commit failed though it ignored the error")
		})
	}

	// Completions queued together are one statement (QueueCompletions):
	// all of them apply, each logged, each merging its metadata if it has
	// any; when one job was taken away (a new attempt holds it, or its
	// token is not the attempt's), none does, and the caller's commit fails
	// even if it ignored the batch's error.
	for _, tt := range []struct {
		name, stale string
		attempt     int    // the stale job's attempt then
		metadata    []byte // the second completion's
	}{
		{"MergedCompletions", "", 1, nil},
		{"MergedCompletionsOneMerging", "", 1, []byte(`{"merged": true}`)},
		{"MergedCompletionsOneStale", "SET state = 'running', attempt = 2, attempted_at = now(), lease_expires_at = NULL", 2, nil},
		{"MergedCompletionsOneStaleToken", "SET lease_token = gen_random_uuid()", 1, nil},
	} {
		stale := tt.stale
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			driver, schema, claim := setup(ctx, t)
			pool := dbtest.Pool(ctx, t)
			claims := []*fencingclaim.Claim{committed(ctx, t, pool, claim), committed(ctx, t, pool, claim), committed(ctx, t, pool, claim)}
			before := getJob(ctx, t, pool, schema, claims[1].ID)
			batch := &pgx.Batch{}
			batch.Queue("INSERT INTO "+pgx.Identifier{schema, "side_effect"}.Sanitize()+" VALUES ($1, 1)", claims[0].ID)
			// Each completion is made inside its own attempt, the attempts
			// nested so that all are still running when the batch goes.
			var completions []fencingclaim.Completion
			var work func(ctx context.Context, i int) error
			work = func(ctx context.Context, i int) error {
				if i == len(claims) {
					if stale != "" {
						_, err := pool.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "river_job"}.Sanitize()+" "+stale+" WHERE id = $1", claims[1].ID)
						require.NoError(t, err)
					}
					claimAPI(driver).QueueCompletions(batch, completions)
					require.Equal(t, 2, batch.Len(), "the caller's write and one completion")
					tx, err := pool.Begin(ctx)
					require.NoError(t, err)
					defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
					batchErr := tx.SendBatch(ctx, batch).Close()
					return errors.Join(batchErr, tx.Commit(ctx))
				}
				return claimAPI(driver).WorkClaimed(ctx, claims[i], time.Time{}, func(ctx context.Context, _ context.CancelCauseFunc) error {
					var metadata []byte
					if i == 1 {
						metadata = tt.metadata
					}
					c, err := claimAPI(driver).Completion(ctx, claims[i].ID, time.Now(), metadata)
					require.NoError(t, err)
					require.NotNil(t, c)
					completions = append(completions, c)
					return work(ctx, i+1)
				})
			}
			err := work(ctx, 0)
			var logged int
			for _, c := range claims[:3] {
				for _, outcome := range attemptLog(ctx, t, pool, schema, c.ID) {
					if outcome == "completed" {
						logged++
					}
				}
			}
			if stale == "" {
				require.NoError(t, err)
				for i, c := range claims {
					row := getJob(ctx, t, pool, schema, c.ID)
					require.Equal(t, "completed", row.State)
					require.False(t, row.LeaseToken.Valid, "the lease is revoked")
					_, merged := row.Metadata["merged"]
					require.Equal(t, i == 1 && tt.metadata != nil, merged, "job %d: only its own metadata is merged", i)
				}
				require.Equal(t, 3, logged, "each attempt recorded ended")
				require.Equal(t, 1, sideEffects(ctx, t, schema, claims[0].ID))
				return
			}
			require.Error(t, err)
			require.Equal(t, "running", getJob(ctx, t, pool, schema, claims[0].ID).State, "nothing applied")
			row := getJob(ctx, t, pool, schema, claims[1].ID)
			require.Equal(t, "running", row.State)
			require.Equal(t, tt.attempt, row.Attempt)
			require.NotEqual(t, before.LeaseToken, row.LeaseToken, "the stale one holds another token")
			require.Zero(t, logged)
			require.Zero(t, sideEffects(ctx, t, schema, claims[0].ID), "the caller's commit failed though it ignored the error")
		})
	}

	// A statement of more claims than a fetch mints tokens for at most
	// (a group of 256 steps, some scheduling several activities) gives
	// each its own lease all the same.
	t.Run("MergedClaimsPastAFetchsTokens", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, schema, _ := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)

		const n = 300
		claims := make([]*fencingclaim.Claim, n)
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			ids, err := fencingclaim.ReserveJobIDs(ctx, tx, schema, n)
			require.NoError(t, err)
			requests := make([]fencingclaim.Request, n)
			for i := range n {
				requests[i] = fencingclaim.Request{Params: fencingclaim.Params{
					Args: []byte(`{}`), AttemptedBy: "test", ID: ids[i], Kind: noopArgs{}.Kind(), MaxAttempts: 3, Queue: "default", Schema: schema,
				}, Done: func(c *fencingclaim.Claim) { claims[i] = c }}
			}
			batch := &pgx.Batch{}
			claimAPI(driver).QueueClaims(batch, requests)
			return tx.SendBatch(ctx, batch).Close()
		}))
		var leased, tokens int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT lease_token) FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
			" WHERE state = 'running' AND lease_token IS NOT NULL").Scan(&leased, &tokens))
		require.Equal(t, n, leased)
		require.Equal(t, n, tokens, "a token each")
		for i, c := range claims {
			require.NotNil(t, c, "claim %d", i)
		}
	})

	// Claims with reserved IDs queued together are one statement
	// (QueueClaims): each gets its own Claim, with its reserved ID and
	// a lease of its own, the setting is cleared only after the last insert
	// (every row has a lease), and each claimed attempt completes.
	t.Run("MergedClaims", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, schema, _ := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)

		const n = 5
		claims := make([]*fencingclaim.Claim, n)
		var ids []int64
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			ids, err = fencingclaim.ReserveJobIDs(ctx, tx, schema, n)
			require.NoError(t, err)
			require.Len(t, ids, n)
			requests := make([]fencingclaim.Request, n)
			for i := range n {
				requests[i] = fencingclaim.Request{Params: fencingclaim.Params{
					Args: []byte(`{"i": ` + string(rune('0'+i)) + `}`), AttemptedBy: "test", ID: ids[i], Kind: noopArgs{}.Kind(),
					MaxAttempts: 3, Queue: "default", Schema: schema,
				}, Done: func(c *fencingclaim.Claim) { claims[i] = c }}
				if i%2 == 1 {
					requests[i].Params.Metadata = []byte(`{"m": ` + string(rune('0'+i)) + `}`)
				}
			}
			batch := &pgx.Batch{}
			claimAPI(driver).QueueClaims(batch, requests)
			batch.Queue("INSERT INTO "+pgx.Identifier{schema, "side_effect"}.Sanitize()+" VALUES ($1, 1)", ids[1])
			require.Equal(t, 2, batch.Len(), "one claim statement and the caller's write")
			batch.Queue("SELECT coalesce(current_setting('weir.fencing_lease_ttl', true), '')").QueryRow(func(row pgx.Row) error {
				var setting string
				require.NoError(t, row.Scan(&setting))
				require.Empty(t, setting, "the lease setting does not outlive the insert")
				return nil
			})
			return tx.SendBatch(ctx, batch).Close()
		}))
		tokens := map[string]bool{}
		for i, c := range claims {
			require.NotNil(t, c, "claim %d", i)
			require.Equal(t, ids[i], c.ID)
			row := getJob(ctx, t, pool, schema, c.ID)
			require.Equal(t, "running", row.State)
			require.True(t, row.LeaseToken.Valid)
			require.True(t, row.LeaseExpiresAt.Valid)
			var args, metadata string
			require.NoError(t, pool.QueryRow(ctx, "SELECT args::text, metadata::text FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
				" WHERE id = $1", c.ID).Scan(&args, &metadata))
			require.JSONEq(t, `{"i": `+string(rune('0'+i))+`}`, args, "the job's args, as given")
			wantMetadata := `{}`
			if i%2 == 1 {
				wantMetadata = `{"m": ` + string(rune('0'+i)) + `}`
			}
			require.JSONEq(t, wantMetadata, metadata, "the job's metadata, as given")
			tokens[row.LeaseToken.String] = true
			require.NoError(t, claimAPI(driver).WorkClaimed(ctx, c, time.Time{}, func(ctx context.Context, _ context.CancelCauseFunc) error {
				lease, ok := fencing.LeaseFromContext(ctx)
				require.True(t, ok)
				require.Equal(t, row.LeaseToken.String, lease.Token)
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					return claimAPI(driver).SetClaimedStateTx(ctx, tx, riverdriver.JobSetStateCompleted(c.ID, time.Now(), nil))
				})
			}))
			require.Equal(t, "completed", getJob(ctx, t, pool, schema, c.ID).State)
		}
		require.Len(t, tokens, n, "a token each")
		require.Equal(t, 1, sideEffects(ctx, t, schema, ids[1]))
	})

	// The claim's insert brings the lease (the insert trigger leaves the
	// row to it): with every trigger on river_job disabled (by hand, here inside
	// the transaction) the claimed job still has a lease, the one the claim
	// holds. (Without the fencing migration the lease columns are missing
	// and the insert fails outright.)
	t.Run("LeaseWithoutTheTrigger", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, schema, claim := setup(ctx, t)
		tx := rolledBack(ctx, t)
		_, err := tx.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema, "river_job"}.Sanitize()+" DISABLE TRIGGER USER")
		require.NoError(t, err)
		c := claim(ctx, tx)
		requireClaimLease(ctx, t, driver, tx, schema, c)
	})

	// The insert trigger leaves a running row its own lease only in
	// a claim's shape (attempt 1, no earlier token, token and expiry); any
	// other running row inserted with a token, as a restore of an archived
	// row would, gets a fresh one.
	t.Run("InsertTriggerSkipsOnlyAClaimsShape", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		_, schema, _ := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)
		const token = "6d661f51-8580-46c0-9f7c-c097681b684b"
		insert := func(attempt int, lastToken *string) string {
			t.Helper()
			var got string
			require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+pgx.Identifier{schema, "river_job"}.Sanitize()+`
				(args, kind, max_attempts, queue, state, attempt, attempted_at, lease_token, lease_expires_at, lease_last_token)
				VALUES ('{}', 'shape', 5, 'default', 'running', $1, now(), $2::uuid, now() + interval '1 minute', $3::uuid)
				RETURNING lease_token::text`, attempt, token, lastToken).Scan(&got))
			return got
		}
		require.Equal(t, token, insert(1, nil), "a claim's shape keeps its token")
		require.NotEqual(t, token, insert(2, nil), "a later attempt gets a fresh token")
		last := "0e2f5c57-2a5b-4c59-9d53-0d1e9f0a9a11"
		require.NotEqual(t, token, insert(1, &last), "a row that had a token before gets a fresh one")
	})

	// The statement's backstop: a row left without a lease all the same
	// (here a trigger of someone else's drops the expiry) fails the claim in
	// the database, so even a caller that ignores the error cannot commit a
	// running job nobody leases.
	t.Run("UnleasedRowAbortsTheTransaction", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, schema, _ := setup(ctx, t)
		tx := rolledBack(ctx, t)
		fn := pgx.Identifier{schema, "drop_lease"}.Sanitize()
		_, err := tx.Exec(ctx, `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN NEW.lease_expires_at := NULL; RETURN NEW; END $$`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `CREATE TRIGGER zz_drop_lease BEFORE INSERT ON `+pgx.Identifier{schema, "river_job"}.Sanitize()+
			` FOR EACH ROW EXECUTE FUNCTION `+fn+`()`)
		require.NoError(t, err)
		_, err = claimAPI(driver).InsertClaimedTx(ctx, tx, &fencingclaim.Params{
			Args: []byte(`{}`), AttemptedBy: "test", Kind: noopArgs{}.Kind(), MaxAttempts: 3, Queue: "default", Schema: schema,
		})
		require.ErrorIs(t, err, fencing.ErrNoLease)
		require.Error(t, tx.Commit(ctx), "the transaction is aborted")
	})

	t.Run("OutsideItsAttempt", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		driver, _, claim := setup(ctx, t)
		pool := dbtest.Pool(ctx, t)
		c := committed(ctx, t, pool, claim)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return claimAPI(driver).SetClaimedStateTx(ctx, tx, riverdriver.JobSetStateCompleted(c.ID, time.Now(), nil))
		})
		require.True(t, errors.Is(err, fencing.ErrNoLease), "%v", err)
	})
}

// requireClaimLease checks, through db, that claim c's job has a lease and
// that it is the one the claim's attempt holds. (Read through the claim's
// own transaction, db lets a test check a claim it will not commit; the
// attempt it runs returns at once.)
func requireClaimLease(ctx context.Context, t *testing.T, driver *fencing.Driver, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string, c *fencingclaim.Claim) {
	t.Helper()
	var (
		token   *string
		expires *time.Time
	)
	require.NoError(t, db.QueryRow(ctx, "SELECT lease_token::text, lease_expires_at FROM "+pgx.Identifier{schema, "river_job"}.Sanitize()+
		" WHERE id = $1", c.ID).Scan(&token, &expires))
	require.NotNil(t, token, "the claimed job has a token")
	require.NotNil(t, expires, "the claimed job has a lease")
	require.NoError(t, claimAPI(driver).WorkClaimed(ctx, c, time.Time{}, func(ctx context.Context, _ context.CancelCauseFunc) error {
		lease, ok := fencing.LeaseFromContext(ctx)
		require.True(t, ok)
		require.Equal(t, *token, lease.Token)
		require.True(t, expires.Equal(lease.ExpiresAt), "%v, %v", *expires, lease.ExpiresAt)
		return nil
	}))
}

// claimAPI is driver's claim API, which weir's worker uses.
func claimAPI(driver *fencing.Driver) fencingclaim.Driver { return fencingclaim.For(driver) }

// TestClaimAPIOutsideAnAttempt: only a fencing driver has a claim API; a
// claimed state write outside its claimed attempt is refused before it
// reaches the database; no claims and no completions queue nothing.
func TestClaimAPIOutsideAnAttempt(t *testing.T) {
	t.Parallel()
	require.Nil(t, fencingclaim.For(riverpgxv5.New(nil)))
	driver, err := fencing.NewDriver(nil, nil)
	require.NoError(t, err)
	claims := claimAPI(driver)
	require.NotNil(t, claims)

	err = claims.SetClaimedStateTx(t.Context(), nil, riverdriver.JobSetStateCompleted(1, time.Now(), nil))
	require.ErrorIs(t, err, fencing.ErrNoLease)
	completion, err := claims.Completion(t.Context(), 1, time.Now(), nil)
	require.ErrorIs(t, err, fencing.ErrNoLease)
	require.Zero(t, completion)

	batch := &pgx.Batch{}
	claims.QueueClaims(batch, nil)
	claims.QueueCompletions(batch, nil)
	require.Zero(t, batch.Len())
}

// queueCompletion queues in batch the completion of job jobID, in its
// claimed attempt's context ctx (Completion, QueueCompletions).
func queueCompletion(ctx context.Context, driver *fencing.Driver, batch *pgx.Batch, jobID int64, finalizedAt time.Time, metadata []byte) error {
	c, err := claimAPI(driver).Completion(ctx, jobID, finalizedAt, metadata)
	if err != nil {
		return err
	}
	claimAPI(driver).QueueCompletions(batch, []fencingclaim.Completion{c})
	return nil
}
