package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/eagerstart"
	"github.com/weirhq/weir/internal/fencingclaim"
	"github.com/weirhq/weir/internal/gopool"
	"github.com/weirhq/weir/internal/limit"
	"github.com/weirhq/weir/internal/notifier"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/task"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/workflow"
)

// goroutineIdle is how long a goroutine kept for reuse (Worker.goroutines)
// waits for its next function.
const goroutineIdle = 10 * time.Second

// Worker runs workflows and activities on a River client that uses the
// fencing driver: every workflow task and activity attempt holds a lease, so a
// stale attempt can never commit anything.
type Worker struct {
	config     *Config
	driver     *fencing.Driver
	claims     fencingclaim.Driver // driver's claim API
	eager      *claimedPool        // nil: eager dispatch off
	goroutines *gopool.Pool        // groups of outcomes and workflow code run on these, kept with their stacks
	returns    *queueReturns       // foreign namespaces' activities, returned to their queue
	histories  *historyCache
	jobIDs     *jobIDs // reserved for the activities it claims
	names      *dbschema.Names
	store      *store.Store       // weir's statements
	notifier   *notifier.Notifier // sends what committed tasks announce
	refetches  *refetcher         // announces the queues of committed groups of fetched tasks
	pool       *pgxpool.Pool

	// backfillSlice is how long one attempt of a backfill job starts
	// batches before it yields.
	backfillSlice time.Duration

	mu           sync.Mutex
	activities   map[string]struct{}
	resultTypes  map[string]reflect.Type                // of AddActivity's activities, by kind
	resultType   func(kind string) (reflect.Type, bool) // activityResultType, made once for every task's replay
	announcer    *announcer
	eagerRunners map[string]claimedRunner
	riverClient  *river.Client[pgx.Tx]
	queries      *queryResponder
	schedules    *scheduler
	riverWorkers *river.Workers
	started      bool
	takers       atomic.Pointer[map[eagerstart.Key]eagerstart.Taker] // first tasks taken from linked clients (eager start), while started
	steps        *groupCommitter                                     // nil: each outcome commits alone
	clock        dbClock                                             // the database's time, estimated
	ahead        aheadCounts                                         // first tasks run ahead of their starts
	stepGroups   *limit.Limiter                                      // groups of outcomes the step committer commits at once
	liveWorkers  atomic.Int64                                        // live workers in the schema, as last announced; 1 before that
	sweeper      *sweeper
	timers       *timerWaker
	workflows    map[string]*replay.Definition
}

// New returns a Worker over pool. Register workflows and activities, then
// Start it. A nil config means defaults.
func New(pool *pgxpool.Pool, config *Config) (*Worker, error) {
	if pool == nil {
		return nil, errors.New("worker: pool is required")
	}
	if config == nil {
		config = &Config{}
	}
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	names := dbschema.New(config.Schema)
	w := &Worker{
		activities:   make(map[string]struct{}),
		eagerRunners: make(map[string]claimedRunner),
		resultTypes:  make(map[string]reflect.Type),
		config:       config,
		goroutines:   gopool.New(goroutineIdle),
		histories:    newHistoryCache(config.MaxCachedRuns),
		refetches:    newRefetcher(config.Queues),
		jobIDs:       &jobIDs{pool: pool, schema: config.Schema},
		names:        names,
		store:        store.New(names),
		notifier:     notifier.New(pool, config.Logger),
		pool:         pool,
		riverWorkers: river.NewWorkers(),
		stepGroups:   limit.ForPool(pool),
		workflows:    make(map[string]*replay.Definition),
	}
	w.liveWorkers.Store(1)
	w.resultType = w.activityResultType
	w.returns = newQueueReturns(w)
	w.backfillSlice = backfillSlice
	// Every activity job that ends through the fencing layer turns into the
	// activity's outcome in the same transaction (for plain River workers,
	// whose Work knows nothing of workflows); user hooks still run.
	fencingConfig := &fencing.Config{}
	if config.Fencing != nil {
		fencingConfig = new(*config.Fencing)
	}
	userHook := fencingConfig.OnFinalized
	fencingConfig.OnFinalized = func(ctx context.Context, tx pgx.Tx, schema string, jobIDs []int64) error {
		if err := w.onFinalized(ctx, tx, schema, jobIDs); err != nil {
			return err
		}
		if userHook != nil {
			return userHook(ctx, tx, schema, jobIDs)
		}
		return nil
	}
	driver, err := fencing.NewDriver(pool, fencingConfig)
	if err != nil {
		return nil, err
	}
	w.driver, w.claims = driver, fencingclaim.For(driver)
	river.AddWorker(w.riverWorkers, &timeoutWorker{w: w})
	river.AddWorker(w.riverWorkers, &timerWorker{w: w})
	river.AddWorker(w.riverWorkers, &backfillWorker{w: w})
	return w, nil
}

// AddWorkflow registers a workflow; the worker then runs tasks of its kind
// (the Kind() of its args). It panics on a duplicate kind or after Start, like
// river.AddWorker; AddWorkflowSafely returns the error instead.
func AddWorkflow[A workflow.Args, R any](w *Worker, wf workflow.Workflow[A, R]) {
	if err := AddWorkflowSafely(w, wf); err != nil {
		panic(err)
	}
}

// AddWorkflowSafely is AddWorkflow returning an error instead of panicking.
func AddWorkflowSafely[A workflow.Args, R any](w *Worker, wf workflow.Workflow[A, R]) error {
	var args A
	kind := args.Kind()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return fmt.Errorf("worker: registering workflow %s after Start", kind)
	}
	if _, ok := w.workflows[kind]; ok {
		return fmt.Errorf("worker: workflow %s is already registered", kind)
	}
	def := replay.Bind(wf)
	for _, namespace := range w.config.Namespaces {
		if err := addTaskWorker(w.riverWorkers, namespace, kind, &taskWorker{def: def, w: w}); err != nil {
			return fmt.Errorf("worker: registering workflow %s in namespace %s: %w", kind, namespace, err)
		}
	}
	w.workflows[kind] = def
	return nil
}

// addTaskWorker registers the task worker of one workflow kind in one
// namespace: the job kind comes from the args value, which AddWorker can't
// express.
func addTaskWorker(workers *river.Workers, namespace, kind string, tw *taskWorker) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	river.AddWorkerArgs(workers, task.NewArgs(namespace, kind, uuid.Nil, ""), river.Worker[task.Args](tw))
	return nil
}

// AddActivity registers an activity; the worker then runs jobs of its kind
// (the Kind() of its args). It panics on a duplicate kind or after Start;
// AddActivitySafely returns the error instead.
func AddActivity[A activity.Args, R any](w *Worker, a activity.Activity[A, R]) {
	if err := AddActivitySafely(w, a); err != nil {
		panic(err)
	}
}

// AddActivitySafely is AddActivity returning an error instead of panicking.
func AddActivitySafely[A activity.Args, R any](w *Worker, a activity.Activity[A, R]) error {
	aw := &activityWorker[A, R]{activity: a, encode: w.config.Codec.Encode, w: w}
	if err := addRiverWorker(w, river.Worker[A](aw)); err != nil {
		return err
	}
	var args A
	w.mu.Lock()
	w.eagerRunners[args.Kind()] = aw.runClaimed
	w.resultTypes[args.Kind()] = reflect.TypeFor[R]()
	w.mu.Unlock()
	return nil
}

// activityResultType is the result type of the activity of kind added
// with AddActivity (replay.ExecuteParams.ActivityResultType). Registration
// ends before Start, so it is read without the lock.
func (w *Worker) activityResultType(kind string) (reflect.Type, bool) {
	t, ok := w.resultTypes[kind]
	return t, ok
}

// AddRiverWorker registers a plain River worker. Its kind can be used as an
// activity: workflows schedule it with workflow.ExecuteActivity, and its job's
// end (completed, discarded, cancelled) becomes the activity's outcome. It
// keeps working for jobs inserted directly, as before. The queue, priority,
// tags and max attempts of its args' InsertOpts hold for its activity jobs
// unless the workflow's ActivityOpts say otherwise; args whose InsertOpts
// set Pending, ScheduledAt or Metadata are refused: it panics with an error
// matching ErrInsertOptsUnsupported.
func AddRiverWorker[T river.JobArgs](w *Worker, rw river.Worker[T]) {
	if err := addRiverWorker(w, rw); err != nil {
		panic(err)
	}
}

func addRiverWorker[T river.JobArgs](w *Worker, rw river.Worker[T]) error {
	var args T
	kind := args.Kind()
	if err := checkInsertOpts(args); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return fmt.Errorf("worker: registering activity %s after Start", kind)
	}
	if _, ok := w.activities[kind]; ok {
		return fmt.Errorf("worker: activity %s is already registered", kind)
	}
	if err := river.AddWorkerSafely[T](w.riverWorkers, &pendingRiverWorker[T]{Worker: rw, w: w}); err != nil {
		return fmt.Errorf("worker: registering activity %s: %w", kind, err)
	}
	w.activities[kind] = struct{}{}
	return nil
}

// ErrInsertOptsUnsupported is matched (errors.Is) by the error of
// registering an activity whose args' InsertOpts ask for what a workflow's
// activity job cannot honour.
var ErrInsertOptsUnsupported = errors.New("worker: the args' InsertOpts cannot hold for an activity")

// checkInsertOpts refuses args whose InsertOpts (River's
// JobArgsWithInsertOpts) set what a workflow's activity job cannot honour:
// the workflow decides when its job is inserted (ScheduledAt, Pending) and
// weir owns the job's metadata. Queue, priority, tags and max attempts are
// honoured (workflow.ActivityOpts); UniqueOpts are ignored, as documented.
func checkInsertOpts(args river.JobArgs) (err error) {
	withOpts, ok := args.(river.JobArgsWithInsertOpts)
	if !ok {
		return nil
	}
	defer func() {
		if recover() != nil { // InsertOpts of a nil *T: River's insert would call it on a value
			err = nil
		}
	}()
	insert := withOpts.InsertOpts()
	var set string
	switch {
	case insert.Pending:
		set = "Pending"
	case !insert.ScheduledAt.IsZero():
		set = "ScheduledAt"
	case len(insert.Metadata) > 0:
		set = "Metadata"
	default:
		return nil
	}
	return fmt.Errorf("%w: activity %s: InsertOpts set %s (a workflow schedules its activities' jobs and owns their metadata); drop it from InsertOpts",
		ErrInsertOptsUnsupported, args.Kind(), set)
}

// Start starts the River client and the sweeper. Workflows and activities
// must be registered before. It refuses a schema whose migration lines
// (River's main, fencing, weir) are behind this build with a
// *migrations.SchemaBehindError (errors.Is migrations.ErrSchemaBehind)
// naming each line behind and its versions: the check of weir server's
// readiness (migrations.Migrator.Verify). Migrate first (`weir migrate up`).
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("worker: already started")
	}
	if len(w.workflows) == 0 && len(w.activities) == 0 {
		return errors.New("worker: nothing registered; add workflows or activities before Start")
	}
	migrator, err := migrations.New(w.pool, &migrations.Config{Schema: w.config.Schema})
	if err == nil {
		err = migrator.Verify(ctx)
	}
	if err != nil {
		return fmt.Errorf("worker: checking the schema: %w", err)
	}

	riverClient, err := river.NewClient(w.driver, &river.Config{
		FetchCooldown:       w.config.FetchCooldown,
		FetchOnlyKnownKinds: true,
		JobTimeout:          w.config.TaskTimeout,
		Logger:              w.config.Logger,
		Middleware:          []rivertype.Middleware{w.refetches},
		Plugins:             []rivertype.Plugin{w.driver.Plugin()},
		Queues:              w.config.Queues,
		Schema:              w.config.Schema,
		Workers:             w.riverWorkers,
	})
	if err != nil {
		return fmt.Errorf("worker: creating River client: %w", err)
	}
	w.steps = newGroupCommitter(w, w.stepGroups) // before River's workers can run
	w.schedules = newScheduler(w)                // its clients start backfills' runs
	if err := riverClient.Start(ctx); err != nil {
		return fmt.Errorf("worker: starting River client: %w", err)
	}
	w.riverClient = riverClient
	if w.config.MaxEagerActivities > 0 && len(w.config.Interceptors) == 0 {
		w.eager = newEagerPool(w, w.config.MaxEagerActivities)
	}
	w.sweeper = newSweeper(w)
	w.sweeper.run(w.sweeper.loop)
	w.timers = newTimerWaker(w)
	w.timers.run(w.timers.loop)
	w.schedules.run(w.schedules.loop)
	if len(w.workflows) > 0 {
		w.queries = newQueryResponder(w)
		w.queries.run(w.queries.loop)
	}
	w.announcer = newAnnouncer(w)
	w.announcer.start(ctx)
	if w.eager != nil {
		// Last: a first task run for a client's start settles through all
		// of the above.
		takers := w.firstTaskTakers()
		w.takers.Store(&takers)
	}
	w.started = true
	return nil
}

// Stop stops fetching work, waits for running tasks and activities to finish
// (until ctx ends; then they are cancelled and River retries them elsewhere)
// and stops the sweeper.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	riverClient, sweeper, queries, timers, schedules, eager := w.riverClient, w.sweeper, w.queries, w.timers, w.schedules, w.eager
	announcer := w.announcer
	w.mu.Unlock()
	defer w.goroutines.Close()
	if riverClient == nil {
		return nil
	}
	// Once every task has returned: no run's code outlives the worker.
	defer w.histories.closeCachedRuns()
	w.takers.Store(nil) // new starts queue their first task through River
	// First: it serves nothing new from here on.
	announcer.stop(context.WithoutCancel(ctx))
	w.returns.stop()
	// Eager attempts first, while River (and its lease keeper) still runs;
	// from here on new activities go through River.
	eagerErr := eager.stop(ctx)
	sweeper.stop()
	timers.stop()
	schedules.stop()
	if queries != nil {
		queries.stop()
	}
	err := riverClient.Stop(ctx)
	notifyCtx := ctx
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// ctx is over: the notifier gets the sends it has in flight (each
		// bounded to a few seconds).
		notifyCtx = context.WithoutCancel(ctx)
		err = errors.Join(err, riverClient.StopAndCancel(notifyCtx))
	}
	// Last: every task has settled, and sent or queued its notifications.
	return errors.Join(eagerErr, err, w.notifier.Close(notifyCtx))
}

// FencingStats are the running totals of the worker's lease events: renewals,
// expiries, lost leases and rejected stale writes.
func (w *Worker) FencingStats() fencing.Stats { return w.driver.Stats() }

// WorkflowKinds lists the registered workflow kinds.
func (w *Worker) WorkflowKinds() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.workflows))
}
