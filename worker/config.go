package worker

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
)

const (
	// FetchCooldownDefault is River's default (100 ms) cut to 5 ms: a run's
	// first task, and every step that is not run eagerly, waits for a fetch,
	// so the cooldown adds up along a run. It also paces the insert
	// notifications of the jobs this worker inserts.
	FetchCooldownDefault = 5 * time.Millisecond

	// MaxEagerActivitiesDefault is Config.MaxEagerActivities's default: as
	// many as a Temporal worker runs at once by default.
	MaxEagerActivitiesDefault = 1000

	// MaxCachedRunsDefault is Config.MaxCachedRuns's default.
	MaxCachedRunsDefault = 4096

	// MaxWorkersDefault is the River MaxWorkers of the default queue: as
	// many jobs as the worker runs claimed activities at once by default
	// (MaxEagerActivitiesDefault). A fetched workflow task holds its slot
	// until its group commits, so the slots bound how many tasks wait for
	// the group committer, whose adaptive limit (and the run cache) bounds
	// the load on Postgres; with Postgres a network hop away a group takes
	// longer and more tasks must wait at once to keep it busy
	// (docs/decisions/0026-task-slots-and-refetch.md).
	MaxWorkersDefault = MaxEagerActivitiesDefault

	// RetentionDefault is how long closed runs are kept by default.
	RetentionDefault = 30 * 24 * time.Hour

	// SweepIntervalDefault is Config.SweepInterval's default: the fleet of
	// workers on one database sweeps about this often, each worker once
	// every SweepIntervalDefault × the live workers, jittered. A sweep looks
	// for runs with unread inbox rows and no queued task, for activities
	// whose job ended without writing an outcome or that are past their
	// deadline, and for runs past retention.
	SweepIntervalDefault = 5 * time.Second

	// TaskTimeoutDefault bounds one workflow task (replay and commit).
	TaskTimeoutDefault = time.Minute

	// AnnounceIntervalDefault is Config.AnnounceInterval's default.
	AnnounceIntervalDefault = 10 * time.Second

	// AnnounceExpiry is how many announce intervals a worker's announcement
	// stays live after it was last renewed: a worker that misses that many
	// is taken for gone.
	AnnounceExpiry = 3
)

// Config configures a Worker. The zero value works.
//
// No setting bounds the worker's concurrency against Postgres: it commits
// activity outcomes in groups, and how many groups it keeps in flight
// follows their latency, up to half the pool's MaxConns while latency
// holds, down to 1 while it rises. It starts at GOMAXPROCS divided by the
// live workers announced in its schema (at least 1), so a fleet that starts
// together begins where one worker would. Size the pool instead.
type Config struct {
	// AnnounceInterval is how often the worker announces itself in the
	// database (weir_worker): its identity, namespaces, queues and kinds.
	// Its announcement is live for AnnounceExpiry intervals after the last
	// one; describe, the CLI and the UI use the live ones to say when no
	// worker serves a run. Defaults to AnnounceIntervalDefault.
	AnnounceInterval time.Duration

	// Codec encodes workflow args and results and activity results; it must
	// read what the clients' codecs write. Defaults to client.JSONCodec.
	Codec client.Codec

	// DeadlockTimeout is how long workflow code may run without yielding to
	// the engine (blocked on a real channel, a sleep, I/O) before its task
	// fails and is retried; negative disables the check. Defaults to
	// replay.DeadlockTimeoutDefault (1 second).
	DeadlockTimeout time.Duration

	// MaxEagerActivities bounds the activities this worker runs claimed at
	// once: an activity that a workflow task here schedules, of a kind and
	// queue this worker serves, is inserted already claimed by this worker
	// (under a lease, like a fetched job) and started once the task
	// commits, without a fetch; its outcome then continues the run in the
	// transaction that completes its job. It counts from its claim until its
	// code returns.
	//
	// The same switch runs the first workflow task of a run that a linked
	// client (client.Config.EagerStarter) starts with StartOpts.EagerStart
	// inside the start's transaction, for at most DeadlockTimeout; a first
	// task that fails there, or on a worker with the deadlock check off,
	// goes through River.
	//
	// Beyond the limit and on workers with Interceptors, activities go
	// through River's fetch; so do first tasks on workers with
	// Interceptors, and those whose start found no room in the run cache
	// for another run in flight in the time it waits (MaxCachedRuns).
	// Claimed activities do not count
	// against River's MaxWorkers (Queues). Negative disables claiming and
	// eager start. Defaults to MaxEagerActivitiesDefault.
	MaxEagerActivities int

	// MaxCachedRuns is how many cached runs this worker keeps between their
	// workflow tasks (Temporal's sticky cache): the history its last task
	// of the run committed, and the run's workflow code, blocked where that
	// task left it. The run's next task here then reads no history and
	// replays nothing, as long as this worker's last task is still the
	// run's last; otherwise it replays, as on any other worker.
	//
	// Each cached run holds its code's goroutines (its deferred calls run
	// when it leaves the cache). Beyond the limit the run used least
	// recently, of those not in flight, leaves. The limit also bounds the
	// runs in flight (those whose claimed activities run here, and tasks of
	// runs new to the cache): beyond it a fetched task of a run the cache
	// does not hold waits until a run in flight settles or closes, for at
	// most half of TaskTimeout, then goes back to its queue without using
	// an attempt (River's JobSnooze); an eager start waits the same way
	// (after such tasks), before it sends anything, and only while its ctx
	// would leave its first task twice DeadlockTimeout, then queues the
	// task through River (client.StartOpts.EagerStart). Negative caches
	// nothing and bounds nothing. Defaults to MaxCachedRunsDefault.
	MaxCachedRuns int

	// FetchCooldown is the least time between two fetches of a queue (River's
	// FetchCooldown). Every workflow step is a fetch away from the previous
	// one, so it bounds how fast a run advances. Defaults to
	// FetchCooldownDefault.
	FetchCooldown time.Duration

	// Fencing configures leases of workflow tasks and activities. Defaults
	// to fencing's defaults.
	Fencing *fencing.Config

	// Identity names the worker for people in the list of workers.
	// Defaults to "pid@hostname".
	Identity string

	// Interceptors wrap workflow tasks and activity attempts, the first
	// outermost. Defaults to none.
	Interceptors []Interceptor

	// Logger receives the worker's logs (River's too); workflow code's
	// logger (workflow.GetLogger) writes here as well, silent while the code
	// replays history it already ran. Defaults to slog.Default() as it is
	// when New is called; slog.New(slog.DiscardHandler) silences it.
	Logger *slog.Logger

	// MaxPayloadBytes caps the encoded size of activity results; a larger
	// result fails the activity for good (a PayloadTooLarge failure).
	// Defaults to client.MaxPayloadBytesDefault.
	MaxPayloadBytes int

	// Namespaces are the namespaces whose workflows and activities this
	// worker runs: a workflow task of another namespace is never fetched
	// here, so workflow code and history never cross namespaces. Activities
	// are River jobs of their kind in the queue the workflow names: one of
	// another namespace that this worker fetches (its kind is registered
	// here too) is handed back unexecuted, snoozed for a second, for that
	// namespace's workers; give namespaces their own queues to spare the
	// round trip. Defaults to client.NamespaceDefault alone.
	Namespaces []string

	// Queues are the River queues this worker serves, with their
	// concurrency. Workflow tasks and activities go to the queue their
	// options name; a queue's MaxWorkers bounds both the activities fetched
	// from it and the workflow tasks fetched from it that wait for their
	// group to commit (see MaxWorkersDefault). Defaults to weir's default
	// queue (client.QueueDefault, "weir") with MaxWorkersDefault.
	Queues map[string]river.QueueConfig

	// Retention is how long closed runs (and their history) are kept in
	// namespaces that set none (client.RegisterNamespace); then the
	// sweepers delete them, in small batches. Generations stay monotonic:
	// the per-workflow-ID counters are never deleted. Negative keeps runs
	// forever. Defaults to RetentionDefault.
	Retention time.Duration

	// Schema is the Postgres schema of River's and weir's tables; it must
	// match the clients'. Defaults to empty: the search_path's first.
	Schema string

	// SweepInterval is how often the fleet of workers on one database
	// sweeps, about: any worker's sweep repairs every run of the schema, so
	// each worker sweeps when it starts, then once every SweepInterval ×
	// the live workers it counts (see AnnounceInterval), jittered by ±25%.
	// Defaults to SweepIntervalDefault.
	SweepInterval time.Duration

	// TaskTimeout bounds one workflow task. Defaults to TaskTimeoutDefault.
	TaskTimeout time.Duration
}

func (c *Config) withDefaults() *Config {
	out := *c
	if out.Codec == nil {
		out.Codec = client.JSONCodec{}
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if len(out.Namespaces) == 0 {
		out.Namespaces = []string{client.NamespaceDefault}
	}
	if out.Queues == nil {
		out.Queues = map[string]river.QueueConfig{client.QueueDefault: {MaxWorkers: MaxWorkersDefault}}
	}
	out.AnnounceInterval = cmp.Or(out.AnnounceInterval, AnnounceIntervalDefault)
	if out.Identity == "" {
		out.Identity = defaultIdentity()
	}
	out.FetchCooldown = cmp.Or(out.FetchCooldown, FetchCooldownDefault)
	out.MaxEagerActivities = cmp.Or(out.MaxEagerActivities, MaxEagerActivitiesDefault)
	out.MaxCachedRuns = cmp.Or(out.MaxCachedRuns, MaxCachedRunsDefault)
	out.MaxPayloadBytes = cmp.Or(out.MaxPayloadBytes, client.MaxPayloadBytesDefault)
	out.Retention = cmp.Or(out.Retention, RetentionDefault)
	out.SweepInterval = cmp.Or(out.SweepInterval, SweepIntervalDefault)
	out.TaskTimeout = cmp.Or(out.TaskTimeout, TaskTimeoutDefault)
	return &out
}

func (c *Config) validate() error {
	if len(c.Queues) == 0 {
		return errors.New("worker config: Queues must name at least one queue")
	}
	for _, namespace := range c.Namespaces {
		if err := client.ValidateNamespace(namespace); err != nil {
			return fmt.Errorf("worker config: %w", err)
		}
	}
	if c.AnnounceInterval < 0 {
		return fmt.Errorf("worker config: AnnounceInterval (%s) must not be negative", c.AnnounceInterval)
	}
	if c.SweepInterval < 0 || c.TaskTimeout < 0 {
		return fmt.Errorf("worker config: SweepInterval (%s) and TaskTimeout (%s) must not be negative", c.SweepInterval, c.TaskTimeout)
	}
	return nil
}
