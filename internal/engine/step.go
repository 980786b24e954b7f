// Package engine is the core of weir's workflow steps: from a run's state,
// its history, a step's inputs and what the workflow code did with them
// (the replay's outcome), it decides what the step writes, as a typed write
// set (StepWrites), and what else the step must do. It runs no statement
// and knows no queue: the worker applies a step (alone, in a group, inside
// a start's or an activity completion's transaction) through
// internal/store.
package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"

	"github.com/google/uuid"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
)

// NewInputs returns the inbox items a task took (in arrival order)
// followed by direct (outcomes handed over without the inbox) as the
// task's inputs, without the outcomes and signals history already has (W5:
// an activity's outcome enters history once, however many times it was
// reported), each drop logged. They may be direct itself, with no room to
// append in place: they are only read. The run's history is given as its
// pieces, in order (their events are the history's).
func NewInputs(ctx context.Context, runID uuid.UUID, pieces [][]history.Event, facts *Facts, inbox []InboxItem, direct []history.Event,
	logger *slog.Logger,
) ([]history.Event, error) {
	scheduled := map[int64]bool{}
	resolved := map[int64]bool{}
	signals := map[string]bool{} // request IDs of signals history has
	for _, events := range pieces {
		for _, e := range events {
			if e.Type == history.EventActivityScheduled || e.Type == history.EventTimerStarted || e.Type == history.EventChildWorkflowScheduled {
				scheduled[e.ID] = true
			}
			if id, ok := facts.ResolvedBy(e); ok {
				resolved[id] = true
			}
			if id := facts.SignalRequestID(e); id != "" {
				signals[id] = true
			}
		}
	}

	// keep reports whether e, inbox row row's event (0: direct), is an
	// input: neither history nor the inputs before it have it.
	keep := func(row int64, e history.Event) (bool, error) {
		if ResolvesEvent(e.Type) {
			id, ok := ResolvedBy(e)
			if !ok {
				return false, fmt.Errorf("inbox row %d of run %s: undecodable %s", row, runID, e.Type)
			}
			if !scheduled[id] || resolved[id] {
				logger.DebugContext(ctx, "weir: dropping an outcome history already has or never asked for",
					slog.String("run_id", runID.String()), slog.Int64("resolves_event_id", id))
				return false, nil
			}
			resolved[id] = true
		}
		if id := SignalRequestID(e); id != "" {
			if signals[id] {
				logger.DebugContext(ctx, "weir: dropping a signal history already has",
					slog.String("run_id", runID.String()), slog.String("request_id", id))
				return false, nil
			}
			signals[id] = true
		}
		return true, nil
	}
	var inputs []history.Event
	for _, r := range inbox {
		ok, err := keep(r.ID, r.Event)
		if err != nil {
			return nil, err
		}
		if ok {
			inputs = append(inputs, r.Event)
		}
	}
	fromInbox := len(inputs)
	for i, e := range direct {
		ok, err := keep(0, e)
		switch {
		case err != nil:
			return nil, err
		case !ok:
		case fromInbox == 0 && len(inputs) == i: // every input so far is direct's: no copy
			inputs = direct[: i+1 : i+1]
		default:
			inputs = append(inputs, e)
		}
	}
	return inputs, nil
}

// ResolvesEvent reports whether t is an outcome: at most one per activity
// or timer enters history (the unique index on resolves_event_id).
func ResolvesEvent(t history.EventType) bool {
	switch t {
	case history.EventActivityCompleted, history.EventActivityFailed, history.EventActivityTimedOut, history.EventActivityCanceled,
		history.EventTimerFired, history.EventChildWorkflowCompleted, history.EventChildWorkflowFailed:
		return true
	}
	return false
}

// Pending is what a closing run may leave behind.
type Pending struct {
	Activities bool // activities scheduled and not resolved
	Children   bool // child workflows started
}

// PendingWork tells, from a run's history (its pieces, in order, then
// appended, whose outcomes resolve retired), whether it started children
// and whether activities it scheduled are unresolved.
func PendingWork(pieces [][]history.Event, facts *Facts, appended []history.Event, retired []int64) Pending {
	var out Pending
	open := map[int64]bool{}
	read := func(e history.Event, committed bool) {
		switch {
		case e.Type == history.EventActivityScheduled:
			open[e.ID] = true
		case e.Type == history.EventChildWorkflowScheduled:
			out.Children = true
		case committed: // appended's outcomes are retired's
			if id, ok := facts.ResolvedBy(e); ok {
				delete(open, id)
			}
		}
	}
	for _, events := range pieces {
		for _, e := range events {
			read(e, true)
		}
	}
	for _, e := range appended {
		read(e, false)
	}
	for _, id := range retired {
		delete(open, id)
	}
	out.Activities = len(open) > 0
	return out
}

// OnlyBoundary reports whether a task's outcome records nothing but its
// WorkflowTaskStarted boundary (a run's first task records its
// WorkflowStarted too): the step then records nothing.
func OnlyBoundary(outcome *replay.Outcome) bool {
	return !outcome.Completed && len(outcome.Events) == 1 && outcome.Events[0].Type == history.EventWorkflowTaskStarted
}

// StepParams is what a step decides from.
type StepParams struct {
	Run       Run               // as the step found it, under its lock
	History   [][]history.Event // the run's committed history, as its pieces in order
	Facts     *Facts            // of History's events
	Appended  []history.Event   // the events the step appends, numbered from Run.NextEventID
	Outcome   replay.Outcome    // what the workflow code did (a copy: a caller's own stays on its stack)
	TaskJobID int64             // the task job the step runs as; 0 for none
	// Room is where the step's compare-and-swap (Step.Writes.CAS) is
	// written: the caller's, which it keeps with the step's writes and
	// empties only once they were sent; nil: a new one.
	Room *CASRoom
}

// Step is what a step decided.
type Step struct {
	// Writes are its writes to its run: its events (boundaries folded) and
	// the retirements of the activities whose outcomes they are, then, in
	// its last batch, the CAS and a closing run's rejection of pending
	// updates. The applier adds the records of the activities the events
	// schedule, once it has their jobs.
	Writes StepWrites
	// Closed is the run's new state when the step closes it.
	Closed string
	// Pending is what the run leaves behind if it closes.
	Pending Pending
	// StartsTimer and StartsChild: the events start a timer, a child.
	StartsTimer, StartsChild bool
	// CancelsOrAnswers: the step cancels activities or timers, or answers
	// updates, before its last batch.
	CancelsOrAnswers bool
	// WritesAfter: something is written after its last batch (the next run
	// of a run continued as new, updates deferred back to the inbox, a
	// closing run's parent and children told, its pending activities
	// cleared), which therefore cannot carry the COMMIT.
	WritesAfter bool
	// Alone: it cannot commit in a group of outcomes, where all of a
	// member's writes go in its last batch, on its own run and jobs: it
	// writes before that batch or reaches other runs, and holding every run
	// of a group while locking another could deadlock with another group.
	Alone bool
}

// Decide decides a step's writes from p.
func Decide(p StepParams) (Step, error) {
	next := p.Run.NextEventID
	for _, e := range p.Appended {
		if e.ID != next {
			return Step{}, fmt.Errorf("engine numbered event %d where %d was expected", e.ID, next)
		}
		next++
	}
	st := Step{Writes: StepWrites{RunID: p.Run.ID, AbandonUpdates: p.Outcome.Completed, Events: p.Appended}}
	for _, e := range p.Appended {
		if ResolvesEvent(e.Type) {
			id, ok := ResolvedBy(e)
			if !ok {
				return Step{}, fmt.Errorf("event %d: undecodable %s", e.ID, e.Type)
			}
			st.Writes.Retired = append(st.Writes.Retired, id)
		}
	}
	// W4: the append point moves only from where the step found it.
	var err error
	if st.Writes.CAS, err = runCAS(p.Room, p.Run.NextEventID, next, p.TaskJobID, &p.Outcome); err != nil {
		return Step{}, err
	}
	if c := st.Writes.CAS.Close; c != nil {
		st.Closed = c.State
	}
	o := &p.Outcome
	st.Pending = PendingWork(p.History, p.Facts, p.Appended, st.Writes.Retired)
	has := func(t history.EventType) bool {
		return slices.ContainsFunc(p.Appended, func(e history.Event) bool { return e.Type == t })
	}
	st.StartsTimer, st.StartsChild = has(history.EventTimerStarted), has(history.EventChildWorkflowScheduled)
	st.CancelsOrAnswers = len(o.CanceledActivities) > 0 || len(o.CanceledTimers) > 0 || len(o.RejectedUpdates) > 0 ||
		slices.ContainsFunc(o.Events, func(e history.Event) bool { return e.Type == history.EventUpdateCompleted })
	st.WritesAfter = o.ContinuedAsNew != nil || len(o.DeferredInputs) > 0 ||
		o.Completed && (p.Run.HasParent || st.Pending.Children || st.Pending.Activities)
	st.Alone = st.WritesAfter || st.CancelsOrAnswers || st.StartsTimer || st.StartsChild
	return st, nil
}

// runCAS is the compare-and-swap of a step that found its run at append
// point found and moves it to next, closing it if outcome completed the
// run (a closing run drops its task), in room (a new one if nil).
func runCAS(room *CASRoom, found, next, taskJobID int64, outcome *replay.Outcome) (*RunCAS, error) {
	if room == nil {
		room = new(CASRoom)
	}
	*room = CASRoom{cas: RunCAS{Found: found, Next: next, ClearTask: taskJobID}}
	cas, c := &room.cas, &room.close
	switch {
	case !outcome.Completed:
		return cas, nil
	case outcome.ContinuedAsNew != nil:
		*c = RunClose{State: "continued_as_new"}
	case outcome.Failure == nil:
		*c = RunClose{State: "completed", Result: []byte(outcome.Result)}
	default:
		failure, err := json.Marshal(outcome.Failure)
		if err != nil {
			return nil, fmt.Errorf("encoding failure: %w", err)
		}
		*c = RunClose{State: "failed", Failure: failure}
		if outcome.Canceled {
			c.State = "cancelled"
		}
	}
	cas.Close, cas.ClearTask = c, 0
	return cas, nil
}

// CASRoom is room for a step's compare-and-swap and its close, which a
// caller keeps with the rest of the step's writes (StepParams.Room).
type CASRoom struct {
	cas   RunCAS
	close RunClose
}
