package worker_test

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/cputime"
	"github.com/weirhq/weir/internal/dbtest"
)

// batchedRun is one run of BenchmarkStepBatching: its activity's claimed
// job and lease token, its append point, and the scheduled event its
// activity resolves.
type batchedRun struct {
	id    uuid.UUID
	job   int64
	token string
	next  int64
	sched int64
}

// BenchmarkStepBatching is the design experiment behind the step committer
// (docs/decisions/0013-step-committer.md): 2,000 runs take 3
// steps each, 20 at a time (the worker's pool size), every step shaped like
// an eager activity's continuation: lock the run, complete the activity's
// claimed job with the fenced single-attempt shape (lease revoked, attempt
// logged), append three events, retire the activity, move the run's append
// point (CAS), claim the next activity's job (leased by the fencing trigger)
// and record it. With k runs per transaction, every statement covers k runs
// (arrays, unnest). It measures what the worker's real steps would gain by
// committing several runs' steps together; it does not run the worker.
// Statements are planned generically (plan_cache_mode), as the worker's
// scalar statements are.
//
//	go test -run '^$' -bench StepBatching -benchtime 1x ./worker/
func BenchmarkStepBatching(b *testing.B) {
	ctx := b.Context()
	pool := dbtest.Pool(ctx, b)
	for _, shape := range []string{"sets", "scalars", "rounds"} {
		for _, k := range []int{1, 2, 5, 10, 20} {
			if shape != "sets" && k == 1 {
				continue // the same statements as sets at k=1
			}
			b.Run(shape+"/k="+strconv.Itoa(k), func(b *testing.B) {
				for b.Loop() {
					stepBatching(ctx, b, pool, k, shape)
				}
			})
		}
	}
}

// stepBatching runs one measurement: 2,000 runs, 3 steps each, k runs per
// transaction.
//
// With scalars, the k runs share the transaction but each run sends its own
// statements (the worker's statements today, grouped): this tells what a
// group commit gains without set-based writes. With rounds, each run also
// takes its own two round trips (its lock, then its writes), as a run's
// continuation does in the worker.
func stepBatching(ctx context.Context, b *testing.B, pool *pgxpool.Pool, k int, shape string) {
	schema := dbtest.FreshSchema(ctx, b) // dropped when the sub-benchmark ends
	tn := func(n string) string { return pgx.Identifier{schema, n}.Sanitize() }
	const nRuns, steps = 2000, 3
	_, err := pool.Exec(ctx, "INSERT INTO "+tn("weir_namespace")+" (name) VALUES ('default') ON CONFLICT DO NOTHING")
	require.NoError(b, err)
	runs := make([]*batchedRun, nRuns)
	for i := range runs {
		runs[i] = &batchedRun{id: uuid.New(), next: 3, sched: 2}
	}
	ids := make([]uuid.UUID, nRuns)
	wfs := make([]string, nRuns)
	for i, r := range runs {
		ids[i], wfs[i] = r.id, "wf-"+strconv.Itoa(i)
	}
	_, err = pool.Exec(ctx, "INSERT INTO "+tn("weir_workflow")+" (namespace, workflow_id, last_generation) SELECT 'default', w, 1 FROM unnest($1::text[]) w", wfs)
	require.NoError(b, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+tn("weir_run")+" (run_id, namespace, workflow_id, generation, kind, queue, args, request_id, request_hash, next_event_id)"+
		" SELECT r, 'default', w, 1, 'k', 'default', '\\x', w, '\\x', 3 FROM unnest($1::uuid[], $2::text[]) x(r, w)", ids, wfs)
	require.NoError(b, err)
	// Each run's first activity is claimed, as its start would.
	claim := func(tx pgx.Tx, rs []*batchedRun) error {
		rows, err := tx.Query(ctx, "WITH l AS (SELECT set_config('weir.fencing_lease_ttl', '30 seconds', true))"+
			" INSERT INTO "+tn("river_job")+" (args, attempt, attempted_at, attempted_by, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)"+
			" SELECT '{}', 1, now(), ARRAY['w'], 'act', 25, '{}', 1, 'default', now(), 'running', '{}' FROM l, generate_series(1, $1) RETURNING id, lease_token::text", len(rs))
		if err != nil {
			return err
		}
		i := 0
		for rows.Next() {
			if err := rows.Scan(&rs[i].job, &rs[i].token); err != nil {
				return err
			}
			i++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		jobs := make([]int64, len(rs))
		rids := make([]uuid.UUID, len(rs))
		sch := make([]int64, len(rs))
		for i, r := range rs {
			jobs[i], rids[i], sch[i] = r.job, r.id, r.sched
		}
		_, err = tx.Exec(ctx, "INSERT INTO "+tn("weir_activity")+" (run_id, scheduled_event_id, job_id, kind) SELECT r, s, j, 'act' FROM unnest($1::uuid[], $2::bigint[], $3::bigint[]) x(r, s, j)", rids, sch, jobs)
		return err
	}
	require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return claim(tx, runs) }))
	_, err = pool.Exec(ctx, "ANALYZE "+tn("weir_run")+", "+tn("river_job")+", "+tn("weir_activity"))
	require.NoError(b, err)

	scalarStep := func(rs []*batchedRun) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			sorted := slices.Clone(rs)
			slices.SortFunc(sorted, func(a, b *batchedRun) int { return bytes.Compare(a.id[:], b.id[:]) })
			batch := &pgx.Batch{}
			batch.Queue("SET LOCAL plan_cache_mode = force_generic_plan")
			lock := func(r *batchedRun) {
				batch.Queue("SELECT run_id, next_event_id FROM "+tn("weir_run")+" WHERE run_id = $1 FOR UPDATE", r.id)
			}
			if shape == "rounds" {
				rs = sorted
			} else {
				for _, r := range sorted {
					lock(r)
				}
			}
			for _, r := range rs {
				if shape == "rounds" {
					lock(r)
					if err := tx.SendBatch(ctx, batch).Close(); err != nil {
						return err
					}
					batch = &pgx.Batch{}
				}
				batch.Queue("WITH u AS (UPDATE "+tn("river_job")+" j SET finalized_at = now(), state = 'completed', lease_last_token = j.lease_token, lease_token = NULL, lease_expires_at = NULL"+
					" WHERE j.id = $1 AND j.state = 'running' AND j.lease_token = $2::uuid"+
					" RETURNING j.id, j.attempt, j.attempted_at, j.attempted_by, j.lease_last_token)"+
					" SELECT 1 / count(*)::int FROM u", r.job, r.token)
				batch.Queue("INSERT INTO "+tn("weir_event")+" (run_id, event_id, type, attributes, resolves_event_id)"+
					" SELECT $1, $2::bigint + o, 't', '{\"a\":1}', CASE WHEN o = 0 THEN $3::bigint END FROM generate_series(0, 2) o", r.id, r.next, r.sched)
				batch.Queue("DELETE FROM "+tn("weir_activity")+" WHERE run_id = $1 AND scheduled_event_id = $2", r.id, r.sched)
				batch.Queue("WITH u AS (UPDATE "+tn("weir_run")+" SET next_event_id = $2::bigint + 3, updated_at = now()"+
					" WHERE run_id = $1 AND next_event_id = $2 AND closed_at IS NULL RETURNING 1) SELECT 1 / count(*)::int FROM u", r.id, r.next)
				r.sched = r.next + 2
				r.next += 3
				batch.Queue("WITH l AS (SELECT set_config('weir.fencing_lease_ttl', '30 seconds', true)),"+
					" j AS (INSERT INTO "+tn("river_job")+" (args, attempt, attempted_at, attempted_by, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)"+
					" SELECT '{}', 1, now(), ARRAY['w'], 'act', 25, '{}', 1, 'default', now(), 'running', '{}' FROM l RETURNING id, lease_token::text),"+
					" a AS (INSERT INTO "+tn("weir_activity")+" (run_id, scheduled_event_id, job_id, kind) SELECT $1, $2, id, 'act' FROM j)"+
					" SELECT id, lease_token FROM j", r.id, r.sched).QueryRow(func(row pgx.Row) error { return row.Scan(&r.job, &r.token) })
				if shape == "rounds" {
					if err := tx.SendBatch(ctx, batch).Close(); err != nil {
						return err
					}
					batch = &pgx.Batch{}
				}
			}
			return tx.SendBatch(ctx, batch).Close()
		})
	}
	step := func(rs []*batchedRun) error {
		if shape != "sets" {
			return scalarStep(rs)
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			n := len(rs)
			rids := make([]uuid.UUID, n)
			jobs := make([]int64, n)
			toks := make([]string, n)
			nexts := make([]int64, n)
			scheds := make([]int64, n)
			for i, r := range rs {
				rids[i], jobs[i], toks[i], nexts[i], scheds[i] = r.id, r.job, r.token, r.next, r.sched
			}
			batch := &pgx.Batch{}
			batch.Queue("SET LOCAL plan_cache_mode = force_generic_plan")
			batch.Queue("SELECT run_id, next_event_id FROM "+tn("weir_run")+" WHERE run_id = ANY($1) ORDER BY run_id FOR UPDATE", rids)
			batch.Queue("WITH u AS (UPDATE "+tn("river_job")+" j SET finalized_at = now(), state = 'completed', lease_last_token = j.lease_token, lease_token = NULL, lease_expires_at = NULL"+
				" FROM unnest($1::bigint[], $2::uuid[]) x(id, tok) WHERE j.id = x.id AND j.id = ANY($1) AND j.state = 'running' AND j.lease_token = x.tok"+
				" RETURNING j.id, j.attempt, j.attempted_at, j.attempted_by, j.lease_last_token)"+
				" SELECT 1 / (count(*) = $3)::int FROM u", jobs, toks, n)
			batch.Queue("INSERT INTO "+tn("weir_event")+" (run_id, event_id, type, attributes, resolves_event_id)"+
				" SELECT r, e + o, 't', '{\"a\":1}', CASE WHEN o = 0 THEN s END FROM unnest($1::uuid[], $2::bigint[], $3::bigint[]) x(r, e, s), generate_series(0, 2) o", rids, nexts, scheds)
			batch.Queue("DELETE FROM "+tn("weir_activity")+" a USING unnest($1::uuid[], $2::bigint[]) x(r, s) WHERE a.run_id = x.r AND a.scheduled_event_id = x.s AND a.run_id = ANY($1)", rids, scheds)
			batch.Queue("WITH u AS (UPDATE "+tn("weir_run")+" r SET next_event_id = x.e + 3, updated_at = now() FROM unnest($1::uuid[], $2::bigint[]) x(id, e)"+
				" WHERE r.run_id = x.id AND r.run_id = ANY($1) AND r.next_event_id = x.e AND r.closed_at IS NULL RETURNING 1) SELECT 1 / (count(*) = $3)::int FROM u", rids, nexts, n)
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				return err
			}
			for _, r := range rs {
				r.sched = r.next + 2
				r.next += 3
			}
			return claim(tx, rs)
		})
	}
	self0, pg0 := cputime.Process(), cputime.Postgres()
	start := time.Now()
	var (
		mu       sync.Mutex
		firstErr error
	)
	for range steps {
		// Every run takes its next step once the previous level is done, as
		// a run's steps follow each other.
		work := make(chan []*batchedRun)
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				for rs := range work {
					if err := step(rs); err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
					}
				}
			})
		}
		for i := 0; i < nRuns; i += k {
			work <- runs[i:min(i+k, nRuns)]
		}
		close(work)
		wg.Wait()
	}
	el := time.Since(start)
	self1, pg1 := cputime.Process(), cputime.Postgres()
	require.NoError(b, firstErr)
	total := float64(nRuns * steps)
	b.ReportMetric(total/el.Seconds(), "steps/s")
	b.ReportMetric(float64((self1-self0).Microseconds())/total, "self_cpu_us/step")
	b.ReportMetric(float64((pg1-pg0).Microseconds())/total, "pg_cpu_us/step")
}
