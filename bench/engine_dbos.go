package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// dbosThreeSteps is the DBOS contender's workflow: three steps run inline,
// each checkpointed. Each step notes its execution when the process counts
// them (the scale workloads).
func dbosThreeSteps(ctx dbos.Context, input int) (int, error) {
	v := input
	for k := range 3 {
		var err error
		if v, err = dbos.RunAsStep(ctx, func(context.Context) (int, error) {
			if executions != nil {
				executions.record(workflowID(input) + "#" + strconv.Itoa(k))
			}
			return v + 1, nil
		}); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// dbosQueueName is the queue of the dbos-queue contender.
const dbosQueueName = "bench"

// dbosWorkflowName is the name DBOS registers dbosThreeSteps under, which a
// client enqueues by.
var dbosWorkflowName = runtime.FuncForPC(reflect.ValueOf(dbosThreeSteps).Pointer()).Name()

// dbosAppName is the application name of every DBOS process and client of
// the harness: a queue's workers only take workflows enqueued for theirs.
const dbosAppName = "weir-bench"

// dbosEngine is DBOS Transact Go v1.8.0 with its defaults: workflows run in
// the starting process (direct) or go through a queue with the default
// polling (queue). In its role roleWorker it only runs the queue's
// workflows; in roleStarter it is a dbos.Client that only enqueues them.
type dbosEngine struct {
	ctx    dbos.Context // nil for roleStarter
	client dbos.Client  // ctx, or the client of roleStarter
	queue  dbos.Queue   // nil when direct or roleStarter
	queued bool
	role   string
	pool   int

	mu      sync.Mutex
	handles map[int]dbos.WorkflowHandle[int]
}

// newDBOSEngine starts DBOS in role on the database of databaseURL with a
// pool of poolSize connections, direct or through a queue (queued; always
// for roleWorker and roleStarter).
func newDBOSEngine(ctx context.Context, databaseURL string, poolSize int, queued bool, role string) (*dbosEngine, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(poolSize))
	u.RawQuery = q.Encode()
	e := &dbosEngine{queued: queued || role != roleBoth, role: role, pool: poolSize, handles: map[int]dbos.WorkflowHandle[int]{}}
	if role == roleStarter {
		e.client, err = dbos.NewClient(context.WithoutCancel(ctx), dbos.ClientConfig{
			AppName:     dbosAppName,
			DatabaseURL: u.String(),
			Logger:      slog.New(slog.DiscardHandler),
		})
		return e, err
	}
	dctx, err := dbos.NewContext(context.WithoutCancel(ctx), dbos.Config{
		AppName:     dbosAppName,
		DatabaseURL: u.String(),
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	e.ctx, e.client = dctx, dctx
	dbos.RegisterWorkflow(dctx, dbosThreeSteps)
	if e.queued {
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
	switch {
	case e.role == roleWorker:
		return fmt.Sprintf("v1.8.0 queue worker, default polling (1s base), pool %d", e.pool)
	case e.role == roleStarter:
		return fmt.Sprintf("v1.8.0 dbos.Client Enqueue, pool %d", e.pool)
	case e.queued:
		return fmt.Sprintf("v1.8.0 queue, default polling (1s base), pool %d", e.pool)
	}
	return fmt.Sprintf("v1.8.0 direct RunWorkflow (in-process), pool %d", e.pool)
}

func (e *dbosEngine) start(_ context.Context, i int) error {
	var (
		handle dbos.WorkflowHandle[int]
		err    error
	)
	switch {
	case e.role == roleWorker:
		return errNotStarter
	case e.role == roleStarter:
		handle, err = dbos.Enqueue[int](e.client, dbosQueueName, dbosWorkflowName, i, dbos.WithEnqueueWorkflowID(workflowID(i)))
	case e.queued:
		handle, err = dbos.RunWorkflow(e.ctx, dbosThreeSteps, i, dbos.WithWorkflowID(workflowID(i)), dbos.WithQueue(e.queue))
	default:
		handle, err = dbos.RunWorkflow(e.ctx, dbosThreeSteps, i, dbos.WithWorkflowID(workflowID(i)))
	}
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

func (e *dbosEngine) stop(context.Context) error { return dbos.Shutdown(e.client, 30*time.Second) }
