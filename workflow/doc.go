// Package workflow is the API used inside workflow code.
//
// A workflow is a typed Go type: its args have a Kind (the workflow type,
// persisted), and its Run method is ordinary Go code that orchestrates
// activities:
//
//	type OrderArgs struct{ ID string }
//
//	func (OrderArgs) Kind() string { return "order" }
//
//	type OrderWorkflow struct{ workflow.Defaults[OrderArgs, Receipt] }
//
//	func (w *OrderWorkflow) Run(ctx workflow.Context, args OrderArgs) (Receipt, error) {
//		charge, err := workflow.ExecuteActivity[Charge](ctx, ChargeArgs{Order: args.ID}, nil).Get(ctx)
//		if err != nil {
//			return Receipt{}, err
//		}
//		return Receipt{ChargeID: charge.ID}, nil
//	}
//
// Activities are River jobs: ChargeArgs is a River JobArgs (its Kind is the
// job kind), and whatever River worker or weir activity serves that kind runs
// it, with retries, outside the workflow. ExecuteActivity returns a typed
// [Future]; nothing in workflow code takes any or uses reflection.
//
// # Determinism
//
// Workflow code is not run once: every workflow task replays it from the
// start against the run's history, feeding it the recorded results, until it
// reaches the point where it has to decide something new. So workflow code
// must make the same decisions, in the same order, every time it runs:
//
//   - Reach the outside world only through activities. No I/O, no network,
//     no database, no global mutable state.
//   - Use [Now] instead of time.Now, [Sleep] and [NewTimer] instead of
//     time.Sleep and timers (they are durable), [SideEffect] for random
//     numbers and IDs, [GetLogger] for logging (it is silent while
//     replaying).
//   - Use [Go] instead of the go statement, and [Future], [Channel],
//     [Selector] and [Await] instead of Go channels, mutexes and select.
//     Coroutines started with Go run one at a time under a deterministic
//     scheduler, resumed in the order they were started; they can share
//     variables without locks.
//   - Don't iterate over maps to decide what to schedule (the order is
//     random); sort the keys first.
//
// Code that schedules different activities on replay than its history
// records fails the workflow task with a [*NonDeterminismError], retried and
// visible, rather than corrupting the run: deploy a fix (or the old code) and
// the run resumes. To change code that runs may be replaying, branch on
// [GetVersion]. A panic in workflow code fails the task the same way, with
// a [*PanicError], and so does code that blocks outside this package (a real
// channel, mutex, sleep or I/O) for more than a second. Only a returned error
// fails the workflow.
//
// # Signals
//
// A signal is a typed message sent to a running workflow (by a client, or in
// the caller's transaction): a value whose Kind names the signal type.
// [GetSignalChannel] returns the typed channel of one signal type; receive
// from it with [SignalChannel.Receive], or wait on it next to futures with
// [Selector.AddReceive]. Signals are delivered in the order they entered
// history and wait in the channel until received.
//
// # Queries
//
// [SetQueryHandler] lets callers read a run's state: a query replays the
// run's history and calls the handler, which must only read.
//
// # Cancellation
//
// When a run is asked to cancel, the Context given to Run is cancelled:
// ctx.Err() returns [ErrCanceled], [Await] returns it, and the activities
// still pending on that Context are cancelled (their futures fail with an
// [*ActivityError] wrapping ErrCanceled). Run cleanup activities on
// [NewDisconnectedContext] and return ctx.Err() to end the run as cancelled.
// [WithCancel] cancels a part of the workflow, for example the losers of a
// race.
//
// # Errors
//
// An activity's failure reaches workflow code as an [*ActivityError] whose
// cause is an [*ApplicationError] (message, type, non-retryable flag,
// details), a [*TimeoutError] or [ErrCanceled]; match them with errors.Is and
// errors.As.
package workflow
