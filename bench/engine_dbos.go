package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// dbosThreeSteps is the DBOS contender's workflow: three steps run inline,
// each checkpointed.
func dbosThreeSteps(ctx dbos.Context, input int) (int, error) {
	v := input
	for range 3 {
		var err error
		if v, err = dbos.RunAsStep(ctx, func(context.Context) (int, error) { return v + 1, nil }); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// dbosQueueName is the queue of the dbos-queue contender.
const dbosQueueName = "bench"

// dbosEngine is DBOS Transact Go v1.8.0 with its defaults: workflows run in
// the starting process (direct) or go through a queue with the default
// polling (queue).
type dbosEngine struct {
	ctx   dbos.Context
	queue dbos.Queue // nil when direct

	mu      sync.Mutex
	handles map[int]dbos.WorkflowHandle[int]
}

func newDBOSEngine(ctx context.Context, db *benchDB, queued bool) (*dbosEngine, error) {
	u, err := url.Parse(db.url)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(PoolMaxConns))
	u.RawQuery = q.Encode()
	dctx, err := dbos.NewContext(context.WithoutCancel(ctx), dbos.Config{
		AppName:     "weir-bench",
		DatabaseURL: u.String(),
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	dbos.RegisterWorkflow(dctx, dbosThreeSteps)
	e := &dbosEngine{ctx: dctx, handles: map[int]dbos.WorkflowHandle[int]{}}
	if queued {
		if e.queue, err = dbos.RegisterQueue(dctx, dbosQueueName); err != nil {
			_ = dbos.Shutdown(dctx, 10*time.Second)
			return nil, fmt.Errorf("registering queue: %w", err)
		}
	}
	if err := dbos.Launch(dctx); err != nil {
		_ = dbos.Shutdown(dctx, 10*time.Second)
		return nil, err
	}
	return e, nil
}

func (e *dbosEngine) config() string {
	if e.queue != nil {
		return "v1.8.0 queue, default polling (1s base), pool 20"
	}
	return "v1.8.0 direct RunWorkflow (in-process), pool 20"
}

func (e *dbosEngine) start(_ context.Context, i int) error {
	opts := []dbos.WorkflowOption{dbos.WithWorkflowID(workflowID(i))}
	if e.queue != nil {
		opts = append(opts, dbos.WithQueue(e.queue))
	}
	handle, err := dbos.RunWorkflow(e.ctx, dbosThreeSteps, i, opts...)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.handles[i] = handle
	e.mu.Unlock()
	return nil
}

func (e *dbosEngine) result(_ context.Context, i int) (int, error) {
	e.mu.Lock()
	handle := e.handles[i]
	e.mu.Unlock()
	if handle == nil {
		return 0, fmt.Errorf("workflow %d was not started", i)
	}
	return handle.GetResult()
}

func (*dbosEngine) completedSQL() string {
	return `SELECT substr(workflow_uuid, 4)::int, to_timestamp(completed_at / 1000.0) FROM dbos.workflow_status
		WHERE status = 'SUCCESS' AND completed_at IS NOT NULL`
}

func (e *dbosEngine) stop(context.Context) error { return dbos.Shutdown(e.ctx, 30*time.Second) }
