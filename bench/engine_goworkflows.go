package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/backend/monoprocess"
	"github.com/cschleiden/go-workflows/backend/postgres"
	gwclient "github.com/cschleiden/go-workflows/client"
	gwworker "github.com/cschleiden/go-workflows/worker"
	gwworkflow "github.com/cschleiden/go-workflows/workflow"
)

// goWorkflowsStep is the go-workflows contender's activity.
func goWorkflowsStep(_ context.Context, v int) (int, error) { return v + 1, nil }

// goWorkflowsThreeSteps is the go-workflows contender's workflow.
func goWorkflowsThreeSteps(ctx gwworkflow.Context, input int) (int, error) {
	v := input
	for range 3 {
		var err error
		if v, err = gwworkflow.ExecuteActivity[int](ctx, gwworkflow.DefaultActivityOptions, goWorkflowsStep, v).Get(ctx); err != nil {
			return 0, err
		}
	}
	return v, nil
}

// goWorkflowsEngine is go-workflows v1.4.0 on its Postgres backend wrapped
// in the monoprocess backend (worker and client in one process, woken by
// channels), as the library's own bench runs it, with default worker
// options.
type goWorkflowsEngine struct {
	backend backend.Backend
	client  *gwclient.Client
	worker  *gwworker.Worker
	cancel  context.CancelFunc

	mu        sync.Mutex
	instances map[int]*gwworkflow.Instance
}

func newGoWorkflowsEngine(ctx context.Context, db *benchDB) (_ *goWorkflowsEngine, err error) {
	u, err := url.Parse(db.url)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return nil, fmt.Errorf("port of %s: %w", u.Redacted(), err)
	}
	password, _ := u.User.Password()
	if password == "" {
		// The backend builds a key=value DSN; "password= dbname=x" would
		// read "dbname=x" as the password.
		password = "''"
	}
	defer func() {
		// NewPostgresBackend panics when it cannot connect or migrate.
		if r := recover(); r != nil {
			err = fmt.Errorf("go-workflows postgres backend: %v", r)
		}
	}()
	pg := postgres.NewPostgresBackend(u.Hostname(), port, u.User.Username(), password, u.Path[1:],
		postgres.WithBackendOptions(backend.WithLogger(slog.New(slog.DiscardHandler))),
		postgres.WithPostgresOptions(func(db *sql.DB) {
			// A pool of 20 kept connections, like the pgxpool the others get;
			// database/sql would keep only 2 idle and reconnect all the time.
			db.SetMaxOpenConns(PoolMaxConns)
			db.SetMaxIdleConns(PoolMaxConns)
		}))
	b := monoprocess.NewMonoprocessBackend(pg)

	options := gwworker.DefaultOptions
	w := gwworker.New(b, &options)
	w.RegisterWorkflow(goWorkflowsThreeSteps)
	w.RegisterActivity(goWorkflowsStep)
	workerCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := w.Start(workerCtx); err != nil {
		cancel()
		return nil, errors.Join(err, b.Close())
	}
	return &goWorkflowsEngine{
		backend:   b,
		client:    gwclient.New(b),
		worker:    w,
		cancel:    cancel,
		instances: map[int]*gwworkflow.Instance{},
	}, nil
}

func (*goWorkflowsEngine) config() string {
	return "v1.4.0 postgres + monoprocess, default worker options, pool 20"
}

func (e *goWorkflowsEngine) start(ctx context.Context, i int) error {
	instance, err := e.client.CreateWorkflowInstance(ctx, gwclient.WorkflowInstanceOptions{InstanceID: workflowID(i)}, goWorkflowsThreeSteps, i)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.instances[i] = instance
	e.mu.Unlock()
	return nil
}

func (e *goWorkflowsEngine) result(ctx context.Context, i int) (int, error) {
	e.mu.Lock()
	instance := e.instances[i]
	e.mu.Unlock()
	if instance == nil {
		return 0, fmt.Errorf("workflow %d was not started", i)
	}
	return gwclient.GetWorkflowResult[int](ctx, e.client, instance, time.Minute)
}

func (*goWorkflowsEngine) completedSQL() string {
	return "SELECT substr(instance_id, 4)::int, completed_at FROM instances WHERE completed_at IS NOT NULL"
}

func (e *goWorkflowsEngine) stop(context.Context) error {
	e.cancel()
	return errors.Join(e.worker.WaitForCompletion(), e.backend.Close())
}
