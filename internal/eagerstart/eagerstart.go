// Package eagerstart lets a client give the first workflow task of a run it
// starts (client.StartOpts.EagerStart) to a worker in the same process,
// linked to it by client.Config.EagerStarter, which runs the task inside the
// start's transaction: the run's first events commit with the run, with no
// task job. A task that fails there is rolled back to a savepoint and
// queued through River as usual. The client asks the worker for the taker
// of each run's first task by Key.
package eagerstart

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Key is what a taker takes: first tasks of one job kind (task.Kind) in one
// queue of one schema.
type Key struct {
	Schema string
	Queue  string
	Kind   string
}

// Run is a run just inserted by a start, as its first task reads it.
type Run struct {
	Args         []byte
	Generation   int64
	ID           uuid.UUID
	Kind         string // the workflow kind
	Namespace    string
	Now          time.Time // the database's time of the start
	Queue        string
	TraceContext []byte
	WorkflowID   string

	// NextEventID, when RunFirstTaskAhead sets it, is the append point the
	// task leaves: the start inserts the run there, and the task's writes
	// then hold no write of the run's row (the insert is that write).
	NextEventID int64

	// LastInTx says that the start writes nothing in tx after the task and
	// then commits: the task's last batch may carry the COMMIT
	// (lazytx.QueueCommit), so that it costs no round trip of its own.
	LastInTx bool

	// Reserved says that the start holds room for the run (Taker.Reserve)
	// until it calls the release, after the task's Done: the taker does
	// not take room for it again.
	Reserved bool
}

// A Taker takes first tasks: of a start alone (RunFirstTask), of a group of
// starts in one transaction (RunFirstTasks), and ahead of a start, so that
// the start is one round trip: its lock, its run's insert, a guard and the
// task's writes, with BEGIN and COMMIT, in one batch (RunFirstTaskAhead).
type Taker interface {
	// RunFirstTask runs run's first workflow task in tx, the start's
	// transaction, in which run's row was just inserted. On success, once
	// the transaction ended, the caller must call done with whether it
	// committed (the taker then starts what the task scheduled, or forgets
	// it). On error, the caller must roll tx back to before the task's
	// writes and queue the task through River; ErrDeclined means the taker
	// did not run the task (it is stopping, ctx leaves too little time, or
	// it has no room for a run that is not Reserved), any other error that
	// the task failed.
	RunFirstTask(ctx context.Context, tx pgx.Tx, run *Run) (done func(committed bool), err error)

	// RunFirstTasks runs the first tasks of runs (distinct runs, each just
	// inserted in tx), one after the other, with LastInTx's promise for all
	// of them. A task that the taker declined (ErrDeclined) or that failed
	// before it wrote anything has its error in FirstTasks.Errs: the caller
	// queues it through River, as after RunFirstTask. An error means tx holds
	// partial writes: the caller rolls it back. Otherwise the caller sends
	// FirstTasks.Last (the tasks' last writes, merged) with its COMMIT, calls
	// FirstTasks.Sent once that batch ran without error, and then each of
	// FirstTasks.Done (nil for a task in Errs) with whether tx committed.
	// tx has asked for generic plans already (dbschema.GenericPlansSQL, as
	// a group of starts does with its lock), so FirstTasks.Last does not.
	RunFirstTasks(ctx context.Context, tx pgx.Tx, runs []*Run) (*FirstTasks, error)

	// RunFirstTaskAhead runs the first task of run, a run that its start
	// has yet to insert, with generation 1 (a workflow ID's first run) and
	// LastInTx's promise. The taker sets run.Now to its estimate of the
	// database's time, which the start then inserts as the run's creation
	// time. All of the task's writes are in FirstTasks.Last (Done and Errs
	// have one element; Errs[0] is nil): the caller sends it after the
	// run's insert and a guard that fails the batch unless the insert made
	// run, at generation 1, then calls FirstTasks.Sent once that batch ran
	// without error and Done[0] with whether it committed. ErrDeclined
	// means that the taker ran nothing it keeps (it has no estimate of the
	// database's time yet, is stopping, or the task would write before
	// its last batch): the caller starts as it would without this. A
	// *FailedAheadError means that the task itself failed: the caller
	// starts the run with run.ID and queues the task through River with
	// that error as its first attempt's, as after RunFirstTask's error,
	// without running it again. The start asks for generic plans first.
	RunFirstTaskAhead(ctx context.Context, run *Run) (*FirstTasks, error)

	// ObserveNow notes the database's time now(), read by a start just
	// now, for the taker's estimate.
	ObserveNow(now time.Time)

	// Reserve waits until the taker has room for one more run in flight,
	// and holds it for a start that has yet to send anything: the start
	// then marks its run Reserved and calls release once it ended, after
	// the task's Done. With ok false no room came in the time the taker
	// allows a start to wait (bounded by ctx): the start goes on without,
	// and the taker takes the task only if room freed meanwhile.
	Reserve(ctx context.Context) (release func(), ok bool)
}

// ErrDeclined is a Taker's error when it did not run the task.
var ErrDeclined = errors.New("eagerstart: the worker did not take the first task")

// FailedAheadError is RunFirstTaskAhead's error when the task ran and
// failed (its workflow code, or its budget).
type FailedAheadError struct {
	Err error // the task's error, as RunFirstTask would return it
}

func (e *FailedAheadError) Error() string { return e.Err.Error() }

func (e *FailedAheadError) Unwrap() error { return e.Err }

// FirstTasks is what RunFirstTasks did, by run (in the order of its runs).
type FirstTasks struct {
	Done []func(committed bool)
	Errs []error
	Last *pgx.Batch
	Sent func()
}
