package weirtest

import (
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

// UpdateCallbacks receive the answer to an update sent with
// [UpdateWorkflow], as a client.Update caller would get it. Any may be nil.
type UpdateCallbacks[R any] struct {
	// OnAccept runs when the update is accepted: its validator (if any)
	// passed and it is in the run's history.
	OnAccept func()

	// OnReject runs when the update is not taken: its validator refused it,
	// the workflow has no handler for it (Failure.Type "UnknownUpdate") or
	// the run closed first ("WorkflowClosed"). err is a
	// *client.UpdateRejectedError (errors.Is client.ErrUpdateRejected).
	OnReject func(err error)

	// OnComplete runs when an accepted update's handler returns: with its
	// result, or with a *client.UpdateFailedError (errors.Is
	// client.ErrUpdateFailed) wrapping the handler's error.
	OnComplete func(result R, err error)
}

// updateWaiter is one UpdateWorkflow call waiting for its answer.
type updateWaiter struct {
	accept   func()
	reject   func(*history.Failure)
	complete func(*history.UpdateCompletedAttributes)
}

// updateState is what the Env knows of one update ID.
type updateState struct {
	accepted  bool
	completed *history.UpdateCompletedAttributes
	rejected  *history.Failure
	waiters   []*updateWaiter
}

// UpdateWorkflow sends an update to the run, as client.Update does, with
// updateID as its ID ("" for a random one): it is delivered in the next
// workflow task and callbacks hear its answer. Call it from a delayed
// callback to send it at a simulated time, or before ExecuteWorkflow to send
// it with the first task (it waits, as in a worker, until the workflow's code
// has run far enough to register its handler). Sending the same updateID
// again updates nothing twice: the second call gets the first one's answer.
func UpdateWorkflow[R any](env *Env, updateID string, args workflow.UpdateArgs, callbacks *UpdateCallbacks[R]) {
	if args == nil {
		env.fatal("UpdateWorkflow: nil update args")
		return
	}
	if callbacks == nil {
		callbacks = &UpdateCallbacks[R]{}
	}
	if updateID == "" {
		updateID = uuid.NewString()
	}
	runID := env.runID(max(env.generation, 1))
	waiter := &updateWaiter{
		accept: func() {
			if callbacks.OnAccept != nil {
				callbacks.OnAccept()
			}
		},
		reject: func(f *history.Failure) {
			if callbacks.OnReject != nil {
				callbacks.OnReject(&client.UpdateRejectedError{
					Failure: clientFailure(f), RunID: runID, UpdateID: updateID, WorkflowID: env.config.WorkflowID,
				})
			}
		},
		complete: func(done *history.UpdateCompletedAttributes) {
			if callbacks.OnComplete == nil {
				return
			}
			var result R
			if done.Failure != nil {
				callbacks.OnComplete(result, &client.UpdateFailedError{
					Failure: clientFailure(done.Failure), RunID: runID, UpdateID: updateID, WorkflowID: env.config.WorkflowID,
				})
				return
			}
			if len(done.Result) > 0 {
				if err := env.config.Codec.Decode(done.Result, &result); err != nil {
					callbacks.OnComplete(result, fmt.Errorf("weirtest: decoding result of update %s as %T: %w", args.Kind(), result, err))
					return
				}
			}
			callbacks.OnComplete(result, nil)
		},
	}

	state, seen := env.updates[updateID]
	if !seen {
		state = &updateState{}
		env.updates[updateID] = state
	}
	switch {
	case state.rejected != nil:
		waiter.reject(state.rejected)
		return
	case state.completed != nil:
		waiter.accept()
		waiter.complete(state.completed)
		return
	case state.accepted:
		waiter.accept()
	}
	state.waiters = append(state.waiters, waiter)
	if seen {
		return // sent before: wait for the first call's answer
	}
	if env.executed && !env.running {
		env.rejectUpdate(updateID, "the workflow closed before the update completed")
		return
	}
	encoded, err := env.config.Codec.Encode(args)
	if err != nil {
		env.fatal("encoding update %s: %v", args.Kind(), err)
		return
	}
	env.input(&history.UpdateAcceptedAttributes{Args: encoded, Kind: args.Kind(), UpdateID: updateID})
}

// answerUpdates tells the waiting UpdateWorkflow callers what a task did
// with their updates: the updates it accepted and completed (from its events)
// and those it rejected.
func (env *Env) answerUpdates(events []history.Event, rejected []replay.RejectedUpdate) {
	for _, r := range rejected {
		if state := env.updates[r.UpdateID]; state != nil && state.rejected == nil {
			env.reject(state, r.Failure)
		}
	}
	for _, ev := range events {
		switch ev.Type {
		case history.EventUpdateAccepted:
			attrs, err := history.Decode[*history.UpdateAcceptedAttributes](ev)
			if err != nil {
				env.fatal("%v", err)
				return
			}
			if state := env.updates[attrs.UpdateID]; state != nil && !state.accepted {
				state.accepted = true
				for _, w := range state.waiters {
					w.accept()
				}
			}
		case history.EventUpdateCompleted:
			attrs, err := history.Decode[*history.UpdateCompletedAttributes](ev)
			if err != nil {
				env.fatal("%v", err)
				return
			}
			if state := env.updates[attrs.UpdateID]; state != nil && state.completed == nil {
				state.completed = attrs
				for _, w := range state.waiters {
					w.complete(attrs)
				}
				state.waiters = nil
			}
		}
	}
}

// abandonUpdates rejects every update still waiting when the run closes (or
// continues as new), as a worker does.
func (env *Env) abandonUpdates() {
	for _, id := range slices.Sorted(maps.Keys(env.updates)) {
		if state := env.updates[id]; state.completed == nil && state.rejected == nil {
			env.rejectUpdate(id, "the workflow closed before the update completed")
		}
	}
}

func (env *Env) rejectUpdate(id, reason string) {
	env.reject(env.updates[id], &history.Failure{Message: reason, Type: "WorkflowClosed"})
}

// reject records an update's rejection and tells its waiters.
func (env *Env) reject(state *updateState, failure *history.Failure) {
	state.rejected = failure
	for _, w := range state.waiters {
		w.reject(failure)
	}
	state.waiters = nil
}
