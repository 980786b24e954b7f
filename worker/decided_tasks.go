package worker

import (
	"bytes"
	"sync"

	"github.com/google/uuid"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
)

// decidedTasks keeps, until its rerun, what an outcome's task decided in a
// group of outcomes before it found it must commit alone (a timer, a child,
// a cancellation: errRunsAlone, nothing written). The rerun, right after
// the group, locks the run and reads the same inputs at the same append
// point in the usual case: the decision is then the same, and it takes it
// (and the run's session, standing after it) instead of replaying the run's
// code from its start, which it would have to, the session having run
// ahead of history. A rerun that finds the run moved or other inputs
// decides anew, and the kept decision is dropped; so is one the rerun
// never looked for (stepCommitter.commit drops it after the rerun). The
// decision keeps its time: its events, workflow.Now and timers are dated
// when the group decided, up to the group's duration before the rerun
// commits them.
type decidedTasks struct {
	mu      sync.Mutex
	tasks   map[uuid.UUID]*decidedTask
	stopped bool
}

// decidedTask is a task's decision, kept for its rerun.
type decidedTask struct {
	inputs  []history.Event
	next    int64 // the run's append point it decided at
	outcome *replay.Outcome
	session *replay.Session // standing after the outcome's events (nil: none)
}

func newDecidedTasks() *decidedTasks {
	return &decidedTasks{tasks: map[uuid.UUID]*decidedTask{}}
}

// put keeps d for the run's rerun, in place of any other.
func (k *decidedTasks) put(runID uuid.UUID, d *decidedTask) {
	k.mu.Lock()
	old := k.tasks[runID]
	if k.stopped {
		old, d = d, nil
	}
	if d != nil {
		k.tasks[runID] = d
	}
	k.mu.Unlock()
	if old != nil {
		old.session.Close()
	}
}

// take returns the decision kept for a task of the run at append point next
// with inputs, if it is one, and drops any other kept for the run.
func (k *decidedTasks) take(runID uuid.UUID, next int64, inputs []history.Event) *decidedTask {
	k.mu.Lock()
	d := k.tasks[runID]
	delete(k.tasks, runID)
	k.mu.Unlock()
	if d == nil {
		return nil
	}
	if d.next != next || !sameInputs(d.inputs, inputs) {
		d.session.Close()
		return nil
	}
	return d
}

// drop closes the decision kept for the run, if any: its rerun did not
// take it (it found the run closed, a task queued, its lease lost, …).
func (k *decidedTasks) drop(runID uuid.UUID) {
	k.mu.Lock()
	d := k.tasks[runID]
	delete(k.tasks, runID)
	k.mu.Unlock()
	if d != nil {
		d.session.Close()
	}
}

// stop closes the sessions kept, and any kept later.
func (k *decidedTasks) stop() {
	k.mu.Lock()
	k.stopped = true
	tasks := k.tasks
	k.tasks = map[uuid.UUID]*decidedTask{}
	k.mu.Unlock()
	for _, d := range tasks {
		d.session.Close()
	}
}

// sameInputs reports whether two tasks' inputs are the same events.
func sameInputs(a, b []history.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Type != b[i].Type || !bytes.Equal(a[i].Attributes, b[i].Attributes) {
			return false
		}
	}
	return true
}
