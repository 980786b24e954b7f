package workflow

import (
	"fmt"
	"log/slog"
	"time"
)

// Args are a workflow's arguments. Kind names the workflow type; it is
// persisted, so it must be stable. Args are encoded with the payload codec
// (JSON by default).
type Args interface {
	// Kind names the workflow type.
	Kind() string
}

// Workflow is implemented by workflow types: Run is the workflow's code,
// replayed from history, so it must be deterministic (see the package
// documentation). Embed [Defaults] to get the other methods. One value
// serves every run, concurrently, like a River worker: keep a run's state in
// Run's local variables, and use fields only for configuration.
//
// Passing a value to a function taking a Workflow[A, R] infers A and R from
// its Run method:
//
//	worker.AddWorkflow(w, &OrderWorkflow{}) // A = OrderArgs, R = Receipt
type Workflow[A Args, R any] interface {
	// Opts returns options for the workflow type; nil means defaults.
	Opts() *Opts

	// Run is the workflow's code.
	Run(ctx Context, args A) (R, error)
}

// Opts are options of a workflow type, returned by [Workflow.Opts].
type Opts struct {
	// ActivityOpts are the defaults of the workflow's activities, under
	// those of [WithActivityOpts] and of each call. Defaults to nil (the
	// package defaults).
	ActivityOpts *ActivityOpts
}

// Defaults is embedded in workflow types to provide the methods of
// [Workflow] other than Run, with default behaviour:
//
//	type OrderWorkflow struct{ workflow.Defaults[OrderArgs, Receipt] }
type Defaults[A Args, R any] struct{}

// Opts returns nil: default options.
func (Defaults[A, R]) Opts() *Opts { return nil }

// Info describes the run executing the workflow and its current task.
type Info struct {
	// Generation numbers the runs of WorkflowID: 1, 2, …
	Generation int64
	// Kind is the workflow type.
	Kind string
	// RunID identifies the run.
	RunID string
	// TaskAttempt is the attempt of the current workflow task (1 is the
	// first); 0 if unknown.
	TaskAttempt int
	// WorkflowID is the caller-chosen identity of the workflow.
	WorkflowID string
}

// GetInfo describes the run executing the workflow.
func GetInfo(ctx Context) Info {
	i := envOf(ctx).Info()
	return Info{Generation: i.Generation, Kind: i.Kind, RunID: i.RunID, TaskAttempt: i.TaskAttempt, WorkflowID: i.WorkflowID}
}

// Now returns the workflow's current time: the time recorded when the
// current workflow task started. It is the same on every replay. Use it
// instead of time.Now.
func Now(ctx Context) time.Time { return envOf(ctx).Now() }

// GetLogger returns a logger for workflow code. It is silent while the
// engine replays history, so each message is logged once, when the code
// runs for the first time.
func GetLogger(ctx Context) *slog.Logger { return envOf(ctx).Logger() }

// IsReplaying reports whether workflow code is replaying history rather than
// running for the first time. Workflow logic must not depend on it.
func IsReplaying(ctx Context) bool { return envOf(ctx).IsReplaying() }

// Go runs fn in a new coroutine of the workflow. Coroutines run one at a
// time under the engine's deterministic scheduler (never concurrently), so
// they may share variables without locks; use futures, [Selector] or [Await]
// to wait for one another. Never use the go statement in workflow code.
func Go(ctx Context, fn func(ctx Context)) {
	envOf(ctx).Go(func() { fn(ctx) })
}

// Await blocks the calling coroutine until cond returns true or ctx is
// cancelled, and then returns ctx.Err(). cond is evaluated again whenever
// other coroutines or new inputs may have changed what it reads; it must not
// block or have side effects.
func Await(ctx Context, cond func() bool) error {
	envOf(ctx).Await(func() bool { return cond() || ctx.Err() != nil })
	if cond() {
		return nil
	}
	return ctx.Err()
}

// ContinueAsNew returns the error with which a workflow ends its run and
// starts over as a new run of the same workflow ID, with args and an empty
// history: the way to run forever (a loop per period) without a history that
// grows forever.
//
//	return Result{}, workflow.ContinueAsNew(ctx, OrderArgs{ID: args.ID, Round: args.Round + 1})
//
// Pending activities and timers are abandoned, and updates not yet
// completed are rejected (WorkflowClosed). Signals the run received but its
// code never took, and signals that arrive meanwhile, carry over to the next
// run, oldest first: none is lost. It returns another error if args can't be
// encoded.
func ContinueAsNew[A Args](ctx Context, args A) error {
	e := envOf(ctx)
	encoded, err := e.Codec().Encode(args)
	if err != nil {
		return fmt.Errorf("encoding args to continue as new: %w", err)
	}
	if err := checkPayload(e.MaxPayloadBytes(), encoded, func() string { return "args to continue as new" }); err != nil {
		return err
	}
	return &ContinueAsNewError{Args: encoded, Kind: args.Kind()}
}

// DefaultVersion is the version [GetVersion] returns for a run that passed
// the change before the change existed.
const DefaultVersion = -1

// GetVersion lets workflow code change while runs are in flight. Wrap each
// change in a branch on the version of a change ID:
//
//	v := workflow.GetVersion(ctx, "charge-in-cents", workflow.DefaultVersion, 1)
//	if v == workflow.DefaultVersion {
//		// the old code, for runs that passed here before the change
//	} else {
//		// the new code
//	}
//
// A run reaching the call for the first time records maxSupported in history
// and gets it; a run replaying gets the version it recorded, or
// DefaultVersion if it passed this point before the call existed. Raise
// maxSupported for each further change; raise minSupported once no run
// needs the old branches (a run that does then fails its task with a
// [*NonDeterminismError] rather than taking a wrong branch). Once no run
// uses any old branch, the call can be removed: replay skips its markers.
func GetVersion(ctx Context, changeID string, minSupported, maxSupported int) int {
	return envOf(ctx).GetVersion(changeID, minSupported, maxSupported)
}

// SideEffect runs fn once and records its result in history; on replay it
// returns the recorded result without running fn. Use it for small
// non-deterministic values (a random number, a UUID). fn must not fail; if
// its result can't be encoded, is too large or the recorded one can't be
// decoded, SideEffect panics and the workflow task fails.
func SideEffect[T any](ctx Context, fn func() T) T {
	e := envOf(ctx)
	codec := e.Codec()
	data, err := e.SideEffect(func() ([]byte, error) {
		data, err := codec.Encode(fn())
		if err != nil {
			return nil, err
		}
		return data, checkPayload(e.MaxPayloadBytes(), data, func() string { return "value of a side effect" })
	})
	if err != nil {
		panic(fmt.Errorf("workflow.SideEffect: %w", err))
	}
	var value T
	if err := codec.Decode(data, &value); err != nil {
		panic(fmt.Errorf("workflow.SideEffect: decoding recorded value as %T: %w", value, err))
	}
	return value
}
