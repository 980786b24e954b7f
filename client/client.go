package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/google/uuid"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/internal/closing"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/eagerstart"
	"github.com/weirhq/weir/internal/group"
	"github.com/weirhq/weir/internal/notifier"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/task"
)

const (
	// NamespaceDefault is the namespace of runs started without one.
	NamespaceDefault = "default"

	// PollIntervalDefault is how often Get re-reads a run's state when no
	// notification arrives (notifications make it return at once; polling
	// covers a lost listener connection).
	PollIntervalDefault = 2 * time.Second

	// QueueDefault is weir's default River queue ("weir", not River's
	// "default"): of workflow tasks started without a queue, and what a
	// worker serves unless configured; an application's River client on
	// River's default queue never fetches weir's jobs.
	QueueDefault = task.QueueDefault

	// MaxPayloadBytesDefault is the default cap on an encoded payload.
	MaxPayloadBytesDefault = 2 << 20
)

// WorkflowArgs are a workflow's arguments. Kind names the workflow type; it is
// persisted, so renaming it is a data migration. Like River's JobArgs.
type WorkflowArgs interface {
	Kind() string
}

// Config configures a Client. The zero value works.
//
// No setting bounds how many starts (Start) commit at once: the client
// groups them, how many groups it keeps in flight follows their latency
// (from GOMAXPROCS up to half the pool's MaxConns while latency holds, down
// to 1 while it rises), and a group's size follows the starts waiting. Size the
// pool instead.
type Config struct {
	// Codec encodes args and results. Workers must use a matching codec.
	// Defaults to JSONCodec.
	Codec Codec

	// Interceptors wrap the client's calls, the first outermost. Defaults to
	// none.
	Interceptors []Interceptor

	// MaxPayloadBytes caps the encoded size of workflow args; larger ones are
	// a *PayloadError matching ErrPayloadTooLarge. Defaults to
	// MaxPayloadBytesDefault.
	MaxPayloadBytes int

	// Logger receives the client's warnings. Defaults to discarding.
	Logger *slog.Logger

	// Namespace is used when StartOpts gives none. Defaults to
	// NamespaceDefault.
	Namespace string

	// PollInterval is how often Get re-reads a run's state without a
	// notification. Defaults to PollIntervalDefault.
	PollInterval time.Duration

	// Schema is the Postgres schema of River's and weir's tables; it must
	// match the workers'. Defaults to empty: the search_path's first.
	Schema string

	// EagerStarter is the worker, in this process, to which Start hands the
	// first workflow task of a run started with StartOpts.EagerStart: a
	// *worker.Worker on the same database and schema. Without one, or while
	// it is not started, EagerStart changes nothing. Defaults to none.
	EagerStarter EagerStarter
}

// EagerStarter runs the first workflow task of a run inside the
// transaction that starts it (StartOpts.EagerStart). *worker.Worker is the
// one implementation; its method is weir's internal contract between a
// client and a worker.
type EagerStarter interface {
	// FirstTaskTaker returns what takes the first tasks that key names, or
	// nil when the worker takes none of them now.
	FirstTaskTaker(key eagerstart.Key) eagerstart.Taker
}

func (c *Config) withDefaults() *Config {
	out := *c
	if out.Codec == nil {
		out.Codec = JSONCodec{}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	out.Namespace = cmp.Or(out.Namespace, NamespaceDefault)
	out.PollInterval = cmp.Or(out.PollInterval, PollIntervalDefault)
	out.MaxPayloadBytes = cmp.Or(out.MaxPayloadBytes, MaxPayloadBytesDefault)
	return &out
}

func (c *Config) validate() error {
	if c.PollInterval < 0 || c.MaxPayloadBytes < 0 {
		return errors.New("client config: PollInterval and MaxPayloadBytes must not be negative")
	}
	if err := ValidateNamespace(c.Namespace); err != nil {
		return err
	}
	return nil
}

// Client starts workflow runs and awaits their results. It is safe for
// concurrent use. It owns no goroutines until the first Get, which starts the
// single listener connection all of its waiters share; Close releases it.
type Client struct {
	config *Config
	names  *dbschema.Names
	pool   *pgxpool.Pool
	river  *river.Client[pgx.Tx]
	// quiet inserts the jobs of the client's own transactions without
	// River's insert notification, a NOTIFY in the transaction: the client
	// announces their queues once it committed (announce).
	quiet    *river.Client[pgx.Tx]
	notifier *notifier.Notifier

	insertChannelMu sync.Mutex
	insertChannel   string // River's, once known (announce)

	store    *store.Store
	starts   *group.Committer[startKey, *start] // concurrent eager starts, grouped
	knownIDs *lru.Cache[startKey, struct{}]     // workflow IDs seen taken (knownIDsMax)

	listenerOnce sync.Once
	listener     *listener
}

// New returns a Client over pool. A nil config means defaults.
func New(pool *pgxpool.Pool, config *Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("client: pool is required")
	}
	config = cmp.Or(config, &Config{})
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	// An insert-only River client: it enqueues workflow tasks and runs no
	// goroutines of its own. Its FetchCooldown only paces its insert
	// notifications (one per queue per cooldown): at River's 100 ms, a start
	// that follows another within 100 ms would wake no worker and wait for
	// the next notification or poll; at the minimum every start wakes them.
	riverConfig := &river.Config{FetchCooldown: river.FetchCooldownMin, Logger: config.Logger, Schema: config.Schema}
	riverClient, err := river.NewClient(riverpgxv5.New(pool), riverConfig)
	if err != nil {
		return nil, fmt.Errorf("creating River client: %w", err)
	}
	quiet, err := river.NewClient(quietDriver{riverpgxv5.New(pool)}, riverConfig)
	if err != nil {
		return nil, fmt.Errorf("creating River client: %w", err)
	}
	names := dbschema.New(config.Schema)
	c := &Client{
		config: config, names: names, pool: pool, river: riverClient, quiet: quiet,
		notifier: notifier.New(pool, config.Logger), store: store.New(names),
	}
	if c.knownIDs, err = lru.New[startKey, struct{}](knownIDsMax); err != nil {
		return nil, err
	}
	c.starts = newStartGroups(c)
	return c, nil
}

// Close stops the client's listener, if Get started one. Waiting Gets
// return ctx-independent errors after Close. Close is idempotent.
func (c *Client) Close() error {
	c.listenerOnce.Do(func() {}) // no listener may start after Close
	if c.listener != nil {
		c.listener.close()
	}
	return c.notifier.Close(context.Background()) // its sends are bounded
}

// quietDriver is River's driver for a client whose inserts send no
// notification: River then sends none in the inserting transaction.
type quietDriver struct{ *riverpgxv5.Driver }

func (quietDriver) SupportsListenNotify() bool { return false }

// quietJobs inserts the jobs of a transaction the client began itself
// through its quiet River client, and keeps their queues for announce, as
// those of the first tasks that the transaction's run inserts queue.
type quietJobs struct {
	*river.Client[pgx.Tx]
	queues []string
}

func (j *quietJobs) InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error) {
	inserted, err := j.Client.InsertTx(ctx, tx, args, opts)
	if err == nil {
		j.queues = append(j.queues, inserted.Job.Queue)
	}
	return inserted, err
}

// ownTx is a transaction the client began itself (inTx): its jobs go
// quietly (jobsOn), announced once it committed.
type ownTx struct {
	pgx.Tx
	jobs *quietJobs
}

// jobsOn is what inserts and cancels River jobs on tx: quietly in a
// transaction of the client's own (ownTx), else the River client, whose
// notification in tx reaches the workers once the caller commits.
func (c *Client) jobsOn(tx pgx.Tx) closing.RiverClient {
	if own, ok := tx.(*ownTx); ok {
		return own.jobs
	}
	return c.river
}

// inTx runs f in a transaction of its own, committed when f succeeds, and
// then announces the queues of the jobs it inserted.
func inTx[T any](ctx context.Context, c *Client, f func(tx pgx.Tx) (T, error)) (out T, err error) {
	jobs := &quietJobs{Client: c.quiet}
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) (err error) {
		out, err = f(&ownTx{Tx: tx, jobs: jobs})
		return err
	})
	if err == nil {
		c.announce(context.WithoutCancel(ctx), jobs.queues)
	}
	return out, err
}

// inTxErr is inTx for an f that returns only an error.
func (c *Client) inTxErr(ctx context.Context, f func(tx pgx.Tx) error) error {
	_, err := inTx(ctx, c, func(tx pgx.Tx) (struct{}, error) { return struct{}{}, f(tx) })
	return err
}

// announce wakes the workers of queues, where jobs committed that the
// quiet River client inserted, as River's insert notification would have:
// after the commit, sent with others that come meanwhile (notifier), so
// that no commit waits for another's (a NOTIFY in a transaction serializes
// commits). A lost announcement costs the workers' poll.
func (c *Client) announce(ctx context.Context, queues []string) {
	if len(queues) == 0 {
		return
	}
	c.insertChannelMu.Lock()
	if c.insertChannel == "" {
		channel, err := c.store.RiverChannel(ctx, c.pool, store.RiverInsertTopic)
		if err != nil {
			c.insertChannelMu.Unlock()
			c.config.Logger.WarnContext(ctx, "weir: announcing queued jobs failed; workers poll", slog.String("error", err.Error()))
			return
		}
		c.insertChannel = channel
	}
	channel := c.insertChannel
	c.insertChannelMu.Unlock()
	for _, queue := range queues { // each once: the notifier drops repeats
		c.notifier.Notify(channel, fmt.Sprintf("{\"queue\": %q}", queue)) // River's payload
	}
}

// IDReusePolicy says whether a workflow ID whose last run has closed may
// start again.
type IDReusePolicy int

const (
	// IDReuseAllowDuplicate allows a new run once the last one closed,
	// however it ended. The default.
	IDReuseAllowDuplicate IDReusePolicy = iota

	// IDReuseAllowDuplicateFailedOnly allows a new run only if the last one
	// did not complete (it failed, was cancelled or terminated, or timed out).
	IDReuseAllowDuplicateFailedOnly

	// IDReuseRejectDuplicate never starts a workflow ID twice.
	IDReuseRejectDuplicate
)

func (p IDReusePolicy) String() string {
	switch p {
	case IDReuseAllowDuplicate:
		return "AllowDuplicate"
	case IDReuseAllowDuplicateFailedOnly:
		return "AllowDuplicateFailedOnly"
	case IDReuseRejectDuplicate:
		return "RejectDuplicate"
	}
	return fmt.Sprintf("IDReusePolicy(%d)", int(p))
}

// StartOpts are options of Start. A nil *StartOpts means defaults.
type StartOpts struct {
	// EagerStart asks Start (not StartTx) to hand the run's first workflow
	// task to the client's linked worker (Config.EagerStarter), if it
	// serves the workflow in the run's queue (eager workflow start, as
	// Temporal's EnableEagerStart). That worker runs the task inside the
	// start's transaction: the run's first events, and the activities they
	// schedule (claimed by the worker, started once the start commits),
	// commit with the run, with no task job or fetch. Start then also runs
	// the task's workflow code, for at most the worker's DeadlockTimeout; a
	// task that fails or runs out of that time is rolled back and queued
	// through River, which retries it (the start itself succeeds). While
	// the worker has as many runs in flight as it caches
	// (worker.Config.MaxCachedRuns), Start first waits for one to settle,
	// before it sends anything: for at most half of the worker's
	// TaskTimeout, and only while ctx would leave the task twice its
	// DeadlockTimeout. Without such a worker, with too little time left on
	// ctx, or with no room once that wait is over, Start queues the task as
	// usual. Many eager starts made at once share transactions, as Start
	// says. See
	// docs/decisions/0011-eager-workflow-start.md for the round trips a
	// start costs.
	// Defaults to false.
	EagerStart bool

	// ExecutionTimeout bounds the workflow across all its runs (a
	// continued-as-new chain); past it the run ends timed_out. Defaults to
	// none.
	ExecutionTimeout time.Duration

	// IDReusePolicy says whether the workflow ID may start again after its
	// last run closed. Defaults to IDReuseAllowDuplicate.
	IDReusePolicy IDReusePolicy

	// Namespace isolates workflow IDs. Defaults to the client's Namespace.
	Namespace string

	// Queue is the River queue of the run's workflow tasks; workers serving
	// the queue run it. Defaults to QueueDefault.
	Queue string

	// RunTimeout bounds this run; past it the run ends timed_out and Get
	// returns a *WorkflowFailedError matching ErrWorkflowTimedOut. Defaults
	// to none.
	RunTimeout time.Duration

	// RequestID makes the start idempotent: starting again with the same
	// request ID and the same request returns the run the first start
	// created (Created false), whatever state it is in now; the same
	// request ID with a different request is a *RequestConflictError. The
	// request is the workflow kind, the args as canonical JSON (the order
	// of object keys and whitespace do not matter), Queue, RunTimeout,
	// ExecutionTimeout and IDReusePolicy. Namespace and WorkflowID scope the
	// request ID; EagerStart and interceptors' headers are not part of it.
	// Defaults to a random ID (every start is new).
	RequestID string

	// WorkflowID is the run's stable identity, chosen by the caller (an
	// order ID, say). At most one run per workflow ID is live at a time.
	// Defaults to a random UUID.
	WorkflowID string
}

// Run identifies a workflow run. Its identity never changes, however many
// times its tasks and activities are retried or recovered.
type Run struct {
	// Created is true when this call created the run, false when it
	// returned the run an earlier start with the same request ID created.
	Created bool

	// Generation counts the runs of this workflow ID: 1, 2, … Monotonic even
	// after old runs are deleted.
	Generation int64

	// Namespace is the run's namespace.
	Namespace string

	// RunID is the run's unique ID.
	RunID uuid.UUID

	// WorkflowID is the run's workflow ID.
	WorkflowID string

	client *Client
}

var (
	nameRE      = regexp.MustCompile(`\A[\w][\w\-\[\]<>\/.·:+]*\z`)
	namespaceRE = regexp.MustCompile(`\A[A-Za-z0-9][A-Za-z0-9_.\-]*\z`)
)

// ValidateNamespace reports whether name can be a namespace: 1–128 letters,
// digits, '_', '.' and '-', starting with a letter or digit.
func ValidateNamespace(name string) error {
	if len(name) == 0 || len(name) > 128 || !namespaceRE.MatchString(name) {
		return fmt.Errorf("weir: invalid namespace %q: 1–128 letters, digits, '_', '.' and '-', starting with a letter or digit", name)
	}
	return nil
}

// queueRE is River's rule for a queue's name (river.validateQueueName), up
// to 64 bytes: a start queues its first task's job itself, which River's
// workers fetch by queue.
var queueRE = regexp.MustCompile(`\A[a-z0-9]+(?:[_|\-]?[a-z0-9]+)*\z`)

func validateQueue(name string) error {
	if len(name) > 64 || !queueRE.MatchString(name) {
		return fmt.Errorf("weir: invalid queue %q: up to 64 lowercase letters and digits, separated by single '_', '|' or '-'", name)
	}
	return nil
}

func validateName(what, name string) error {
	if len(name) == 0 || len(name) > 128 || !nameRE.MatchString(name) {
		return fmt.Errorf("weir: invalid %s %q: 1–128 characters of letters, digits and _-[]<>/.·:+, starting with a letter, digit or _", what, name)
	}
	return nil
}
