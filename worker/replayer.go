package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/workflow"
)

// ErrReplayUnknownWorkflow is matched by a Replayer's error when a history's
// workflow kind has no registered workflow.
var ErrReplayUnknownWorkflow = errors.New("worker: replayer has no workflow registered for the history's kind")

// ErrReplayInvalidHistory is matched by a Replayer's error when the history
// can't be replayed whatever the code: empty, not starting with
// WorkflowStarted, a gap in event IDs, an undecodable event.
var ErrReplayInvalidHistory = replay.ErrInvalidHistory

// ErrReplayNoPool is returned by [Replayer.ReplayRun] when the Replayer was
// made without a pool.
var ErrReplayNoPool = errors.New("worker: replayer has no Pool to load histories from")

// ReplayerConfig configures a [Replayer]. The zero value works for histories
// read from files; loading them from Postgres needs Pool.
type ReplayerConfig struct {
	// Codec decodes workflow args and results; it must be the workers'.
	// Defaults to client.JSONCodec.
	Codec client.Codec

	// DeadlockTimeout is how long workflow code may run without yielding
	// before replay fails with a deadlock; negative disables the check.
	// Defaults to 1 second, as for a Worker.
	DeadlockTimeout time.Duration

	// Namespace is the namespace of the runs ReplayRun loads. Defaults to
	// client.NamespaceDefault.
	Namespace string

	// Pool is the database ReplayRun loads histories from. Defaults to nil:
	// only histories given as JSON can be replayed.
	Pool *pgxpool.Pool

	// Schema is the Postgres schema of weir's tables, as for a Worker.
	// Defaults to empty: the search_path's first.
	Schema string
}

func (c *ReplayerConfig) withDefaults() *ReplayerConfig {
	out := *c
	if out.Codec == nil {
		out.Codec = client.JSONCodec{}
	}
	if out.Namespace == "" {
		out.Namespace = client.NamespaceDefault
	}
	return &out
}

func (c *ReplayerConfig) validate() error {
	if err := client.ValidateNamespace(c.Namespace); err != nil {
		return fmt.Errorf("replayer config: %w", err)
	}
	return nil
}

// Replayer checks that today's workflow code still replays recorded
// histories: register the workflows as on a Worker, then replay histories
// exported with client.WriteHistoryJSON (or `weir workflow history --json`),
// or loaded from Postgres by workflow ID and run ID. Run it in CI before
// deploying workflow code: a change that would break runs in flight fails
// with an error wrapping a *workflow.NonDeterminismError that names the first
// divergent event. A Replayer starts nothing and is safe for concurrent use
// once its workflows are registered.
type Replayer struct {
	config *ReplayerConfig
	store  *store.Store // the runs' histories, for ReplayRun and LoadHistory

	mu          sync.Mutex
	resultTypes map[string]reflect.Type // of the activities of AddWorkflowsOf's workers
	workflows   map[string]*replay.Definition
}

// NewReplayer returns a Replayer with no workflows. A nil config means
// defaults.
func NewReplayer(config *ReplayerConfig) (*Replayer, error) {
	if config == nil {
		config = &ReplayerConfig{}
	}
	config = config.withDefaults()
	if err := config.validate(); err != nil {
		return nil, err
	}
	return &Replayer{
		config: config, store: store.New(dbschema.New(config.Schema)),
		resultTypes: map[string]reflect.Type{}, workflows: map[string]*replay.Definition{},
	}, nil
}

// AddReplayerWorkflow registers a workflow with a Replayer, as AddWorkflow
// does with a Worker. It panics on a duplicate kind;
// AddReplayerWorkflowSafely returns the error instead.
func AddReplayerWorkflow[A workflow.Args, R any](r *Replayer, wf workflow.Workflow[A, R]) {
	if err := AddReplayerWorkflowSafely(r, wf); err != nil {
		panic(err)
	}
}

// AddReplayerWorkflowSafely is AddReplayerWorkflow returning an error
// instead of panicking.
func AddReplayerWorkflowSafely[A workflow.Args, R any](r *Replayer, wf workflow.Workflow[A, R]) error {
	return r.add(replay.Bind(wf))
}

// AddWorkflowsOf registers every workflow registered on w, so the code that
// sets up workers can set up the Replayer too, and the result types of w's
// activities, so that workflow.ExecuteActivity decides as on w. It fails on
// a kind the Replayer already has.
func (r *Replayer) AddWorkflowsOf(w *Worker) error {
	w.mu.Lock()
	defs := slices.Collect(maps.Values(w.workflows))
	types := maps.Clone(w.resultTypes)
	w.mu.Unlock()
	r.mu.Lock()
	maps.Copy(r.resultTypes, types)
	r.mu.Unlock()
	for _, def := range defs {
		if err := r.add(def); err != nil {
			return err
		}
	}
	return nil
}

func (r *Replayer) add(def *replay.Definition) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.workflows[def.Kind]; ok {
		return fmt.Errorf("worker: replayer: workflow %s is already registered", def.Kind)
	}
	r.workflows[def.Kind] = def
	return nil
}

// WorkflowKinds lists the registered workflow kinds.
func (r *Replayer) WorkflowKinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.workflows))
}

// ReplayResult describes a history that replayed.
type ReplayResult struct {
	// Closed reports that the history ends the run (completed, failed,
	// cancelled or continued as new); an open run replays up to its last
	// recorded task.
	Closed bool

	// Events is the number of events replayed.
	Events int

	// Kind is the workflow type.
	Kind string

	// RunID identifies the run, as its WorkflowStarted event records it.
	RunID string

	// WorkflowID is the run's workflow ID.
	WorkflowID string
}

// ReplayHistory replays a history read from r: a JSON document as
// client.WriteHistoryJSON writes it (a client.HistoryExport), or a bare JSON
// array of its events. See [Replayer.ReplayEvents] for the errors.
func (r *Replayer) ReplayHistory(ctx context.Context, rd io.Reader) (*ReplayResult, error) {
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("reading history: %w", err)
	}
	events, err := decodeHistoryJSON(data)
	if err != nil {
		return nil, err
	}
	return r.ReplayEvents(ctx, events)
}

// ReplayHistoryFile replays the history in the JSON file at path, as
// [Replayer.ReplayHistory] does.
func (r *Replayer) ReplayHistoryFile(ctx context.Context, path string) (*ReplayResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening history: %w", err)
	}
	defer f.Close()
	result, err := r.ReplayHistory(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("replaying %s: %w", path, err)
	}
	return result, nil
}

// ReplayRun loads a run's history from Postgres (Pool and Schema of the
// config; the run in Namespace) and replays it. A zero runID means the
// workflow's latest run. It returns an error matching client.ErrRunNotFound
// when there is no such run, and [ErrReplayNoPool] without a pool.
func (r *Replayer) ReplayRun(ctx context.Context, workflowID string, runID uuid.UUID) (*ReplayResult, error) {
	events, err := r.LoadHistory(ctx, workflowID, runID)
	if err != nil {
		return nil, err
	}
	return r.ReplayEvents(ctx, events)
}

// LoadHistory loads a run's history from Postgres, as ReplayRun does,
// without replaying it.
func (r *Replayer) LoadHistory(ctx context.Context, workflowID string, runID uuid.UUID) ([]*client.Event, error) {
	pool := r.config.Pool
	if pool == nil {
		return nil, ErrReplayNoPool
	}
	resolved, err := r.store.ResolveRun(ctx, pool, store.RunKey{Namespace: r.config.Namespace, WorkflowID: workflowID, RunID: runID})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, &client.RunNotFoundError{RunID: runID, WorkflowID: workflowID}
	case err != nil:
		return nil, fmt.Errorf("looking up workflow %s run %s: %w", workflowID, runID, err)
	}
	stored, err := r.store.Events(ctx, pool, resolved, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("loading history of workflow %s run %s: %w", workflowID, resolved, err)
	}
	events := make([]*client.Event, len(stored))
	for i, e := range stored {
		events[i] = &client.Event{ID: e.ID, Type: client.EventType(e.Type), Attributes: e.Attributes, Time: e.Time}
	}
	return events, nil
}

// ReplayEvents replays a history against the registered workflow of its
// kind (read from its first event, WorkflowStarted). The error wraps a
// *workflow.NonDeterminismError (matching workflow.ErrNonDeterminism) when
// the code no longer makes the recorded decisions: its EventID is the first
// divergent event. Other errors match [ErrReplayUnknownWorkflow], an
// [ErrReplayInvalidHistory],
// workflow.ErrPanic, or a deadlock of the workflow code.
func (r *Replayer) ReplayEvents(ctx context.Context, events []*client.Event) (*ReplayResult, error) {
	hist := make([]history.Event, len(events))
	for i, e := range events {
		if e == nil {
			return nil, fmt.Errorf("%w: event %d is null", ErrReplayInvalidHistory, i+1)
		}
		hist[i] = history.Event{ID: e.ID, Type: history.EventType(e.Type), Attributes: e.Attributes, Time: e.Time}
	}
	if len(hist) == 0 {
		return nil, fmt.Errorf("%w: the history is empty", replay.ErrInvalidHistory)
	}
	started, err := history.Decode[*history.WorkflowStartedAttributes](hist[0])
	if err != nil {
		return nil, fmt.Errorf("%w: the first event must be WorkflowStarted: %w", ErrReplayInvalidHistory, err)
	}
	result := &ReplayResult{
		Closed: hist[len(hist)-1].Type.IsTerminal(), Events: len(hist), Kind: started.Kind,
		RunID: started.RunID, WorkflowID: started.WorkflowID,
	}
	r.mu.Lock()
	def, ok := r.workflows[started.Kind]
	known := slices.Sorted(maps.Keys(r.workflows))
	r.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q (registered: %v)", ErrReplayUnknownWorkflow, started.Kind, known)
	}
	err = replay.Replay(ctx, def, &replay.ExecuteParams{
		ActivityResultType: r.activityResultType,
		Codec:              r.config.Codec,
		DeadlockTimeout:    r.config.DeadlockTimeout,
		History:            hist,
		Info: replay.Info{
			Generation: started.Generation, Kind: started.Kind, RunID: started.RunID, TaskAttempt: 1, WorkflowID: started.WorkflowID,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("replaying workflow %s run %s (%s): %w", started.WorkflowID, started.RunID, started.Kind, err)
	}
	return result, nil
}

// decodeHistoryJSON reads a client.HistoryExport document or a bare array
// of events.
func decodeHistoryJSON(data []byte) ([]*client.Event, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		var events []*client.Event
		if err := json.Unmarshal(trimmed, &events); err != nil {
			return nil, fmt.Errorf("%w: decoding history events: %w", ErrReplayInvalidHistory, err)
		}
		return events, nil
	}
	var export client.HistoryExport
	decoder := json.NewDecoder(bytes.NewReader(trimmed))
	if err := decoder.Decode(&export); err != nil {
		return nil, fmt.Errorf("%w: decoding history export: %w", ErrReplayInvalidHistory, err)
	}
	if export.Events == nil {
		return nil, fmt.Errorf("%w: the document has no \"events\"", replay.ErrInvalidHistory)
	}
	return export.Events, nil
}

// activityResultType is the result type of an activity of the workers whose
// workflows the Replayer took (replay.ExecuteParams.ActivityResultType).
func (r *Replayer) activityResultType(kind string) (reflect.Type, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.resultTypes[kind]
	return t, ok
}
