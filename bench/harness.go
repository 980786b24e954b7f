package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/internal/cputime"
)

// harness runs measurements on one server and prints their results.
type harness struct {
	logf   func(format string, args ...any)
	out    *resultWriter
	server *server
	seq    atomic.Int64 // numbers the databases

	// rtDetail makes counting proxies count round trips by statement too.
	rtDetail bool
}

// benchDB is a fresh database for one measurement.
type benchDB struct {
	name   string
	server *server

	// url and pool reach the database, through the counting proxy when
	// there is one; contenders use them.
	url  string
	pool *pgxpool.Pool

	// admin reaches it directly: for WAL positions, completion polling and
	// checks, none of which are counted.
	admin *pgxpool.Pool
	proxy *countingProxy

	// postmaster is the server's postmaster when only its processes' CPU
	// counts (dbOptions.serverCPU), or 0.
	postmaster int
}

// harnessAppName is the application_name of the harness's own connections,
// which the busy-backend sampler leaves out.
const harnessAppName = "bench-harness"

// dbOptions shape a measurement's database.
type dbOptions struct {
	// proxy sends the contender's connections through a counting proxy,
	// which delays each direction by delay.
	proxy bool
	delay time.Duration

	// noPool leaves pool nil: the contender runs in processes of its own.
	noPool bool

	// serverCPU counts the CPU of the measured server's processes only
	// (when it runs on this machine), not of every postgres process.
	serverCPU bool
}

// openDatabase creates a fresh database for a measurement of contender.
func (h *harness) openDatabase(ctx context.Context, contender string, o dbOptions) (*benchDB, error) {
	name := fmt.Sprintf("bench_%s_%d", strings.ReplaceAll(contender, "-", "_"), h.seq.Add(1))
	if err := h.server.createDatabase(ctx, name); err != nil {
		return nil, err
	}
	db := &benchDB{name: name, server: h.server, url: h.server.url(name)}
	var err error
	adminConfig, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		return nil, errors.Join(err, db.close())
	}
	adminConfig.MaxConns = 3 // completion polling, the busy-backend sampler, settling
	adminConfig.ConnConfig.RuntimeParams["application_name"] = harnessAppName
	if db.admin, err = pgxpool.NewWithConfig(ctx, adminConfig); err != nil {
		return nil, errors.Join(err, db.close())
	}
	if o.serverCPU {
		db.postmaster = postmasterOf(ctx, db.admin)
	}
	if o.proxy {
		if db.proxy, err = newCountingProxy(ctx, db.url, h.rtDetail, o.delay); err != nil {
			return nil, errors.Join(err, db.close())
		}
		db.url = db.proxy.URL()
	}
	if o.noPool {
		return db, nil
	}
	if db.pool, err = newPool(ctx, db.url, PoolMaxConns); err != nil {
		return nil, errors.Join(err, db.close())
	}
	return db, nil
}

// close closes the pools and the proxy and drops the database.
func (db *benchDB) close() error {
	if db.pool != nil {
		db.pool.Close()
	}
	var err error
	if db.proxy != nil {
		err = db.proxy.Close()
	}
	if db.admin != nil {
		db.admin.Close()
	}
	ctx := context.Background()
	if os.Getenv("BENCH_KEEP_DATABASES") != "" {
		return err // kept for inspection
	}
	return errors.Join(err, db.server.dropDatabase(ctx, db.name))
}

// window is a measured interval: WAL and proxy counts at its start.
type window struct {
	db     *benchDB
	lsn    int64
	counts counts
	detail map[string]int64

	benchCPU, postgresCPU time.Duration
}

// beginWindow lets the server settle (settle), then records the WAL
// position, the proxy's counts and the CPU time used so far.
func (db *benchDB) beginWindow(ctx context.Context) (*window, error) {
	db.settle(ctx)
	w := &window{db: db, benchCPU: cputime.Process(), postgresCPU: db.postgresCPU()}
	var err error
	if w.lsn, err = walLSN(ctx, db.admin); err != nil {
		return nil, fmt.Errorf("reading WAL position: %w", err)
	}
	if db.proxy != nil {
		w.counts = db.proxy.snapshot()
		w.detail = db.proxy.detailSnapshot()
	}
	return w, nil
}

// postgresCPU is the CPU time used so far by the server's processes
// (dbOptions.serverCPU) or by every postgres process on this machine.
func (db *benchDB) postgresCPU() time.Duration {
	if db.postmaster > 0 {
		return serverCPU(db.postmaster)
	}
	return cputime.Postgres()
}

// settleWait bounds how long settle waits for autovacuum.
const settleWait = 15 * time.Second

// settle lets the server finish what came before the window: a CHECKPOINT
// writes what earlier measurements and this one's set-up left dirty, and
// autovacuum workers (of this database or another) are waited for, up to
// settleWait. Without it, the contender that ran after a burn-down of
// 100,000 jobs paid for that run's checkpoint and vacuum, in its time and in
// its CPU figures (make bench 20261203-093333: weir's three bursts cost
// 2,070, 1,920 and 1,590 µs of Postgres CPU per workflow, the first one
// right after the jobs runs). A CHECKPOINT the role may not run is skipped.
func (db *benchDB) settle(ctx context.Context) {
	if !db.server.noCheckpoint.Load() {
		if _, err := db.admin.Exec(ctx, "CHECKPOINT"); err != nil && ctx.Err() == nil {
			db.server.noCheckpoint.Store(true)
			db.server.logf("CHECKPOINT before a window failed, so measurements skip it: %v", err)
		}
	}
	for deadline := time.Now().Add(settleWait); time.Now().Before(deadline); {
		var workers int
		err := db.admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'").Scan(&workers)
		if err != nil || workers == 0 {
			return
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
}

// end fills res's per-unit WAL bytes and CPU time and, with a proxy, round
// trips, statements and transactions, over n units.
func (w *window) end(ctx context.Context, res *Result, n int) error {
	var c counts
	if w.db.proxy != nil {
		c = w.db.proxy.snapshot().sub(w.counts)
	}
	lsn, err := walLSN(ctx, w.db.admin)
	if err != nil {
		return fmt.Errorf("reading WAL position: %w", err)
	}
	res.WALBytesPerUnit = float64(lsn-w.lsn) / float64(n)
	res.BenchCPUUsPerUnit = cpuUsPerUnit(cputime.Process()-w.benchCPU, n)
	res.PostgresCPUUsPerUnit = cpuUsPerUnit(w.db.postgresCPU()-w.postgresCPU, n)
	if w.db.proxy != nil {
		res.RoundTripsPerUnit = float64(c.RoundTrips) / float64(n)
		res.StatementsPerUnit = float64(c.Statements) / float64(n)
		res.TxPerUnit = float64(c.Transactions) / float64(n)
		res.Connections = c.Connections
		for label, count := range w.db.proxy.detailSnapshot() {
			if d := count - w.detail[label]; d > 0 {
				if res.RoundTripDetail == nil {
					res.RoundTripDetail = map[string]float64{}
				}
				res.RoundTripDetail[label] = float64(d) / float64(n)
			}
		}
	}
	return nil
}
