package replay

import (
	"fmt"

	"github.com/weirhq/weir/internal/history"
)

// task is one workflow task of history: its inputs, its boundary and its
// commands.
type task struct {
	boundary *history.WorkflowTaskStartedAttributes
	commands []recorded
	id       int64 // of the boundary event
	inputs   []recorded
}

// splitHistory validates events and splits them into complete tasks and the
// trailing inputs that no task has seen yet, decoding each event's
// attributes with decode (nil: history.DecodeAttributes).
func splitHistory(events []history.Event, decode func(history.Event) (history.Attributes, error)) (tasks []task, tail []recorded, err error) {
	if decode == nil {
		decode = history.DecodeAttributes
	}
	var cur task
	inCommands := false
	closed := false
	recs := make([]recorded, len(events)) // a task's inputs, and its commands, are runs of it
	first := 0                            // of the run being collected
	for i, ev := range events {
		if ev.ID != int64(i+1) {
			return nil, nil, invalid("event %d has ID %d: IDs must be 1, 2, 3… without gaps", i+1, ev.ID)
		}
		if closed {
			return nil, nil, invalid("event %d (%s) follows the end of the run", ev.ID, ev.Type)
		}
		if (ev.Type == history.EventWorkflowStarted) != (i == 0) {
			return nil, nil, invalid("event %d is %s: history must start with one %s", ev.ID, ev.Type, history.EventWorkflowStarted)
		}
		attrs, err := decode(ev)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrInvalidHistory, err)
		}
		recs[i] = recorded{event: ev, attrs: attrs}
		switch {
		case ev.Type.IsInput():
			if inCommands {
				tasks = append(tasks, cur)
				cur, inCommands = task{}, false
			}
			if cur.inputs == nil {
				first = i
			}
			cur.inputs = recs[first : i+1 : i+1]
		case ev.Type == history.EventWorkflowTaskStarted:
			if inCommands {
				tasks = append(tasks, cur)
				cur = task{}
			}
			boundary, _ := attrs.(*history.WorkflowTaskStartedAttributes)
			cur.boundary, cur.id, inCommands = boundary, ev.ID, true
			first = i + 1
		default: // a command
			if !inCommands {
				return nil, nil, invalid("command event %d (%s) has no %s before it", ev.ID, ev.Type, history.EventWorkflowTaskStarted)
			}
			cur.commands = recs[first : i+1 : i+1]
			closed = ev.Type.IsTerminal()
		}
	}
	if inCommands {
		tasks = append(tasks, cur)
	} else {
		tail = cur.inputs
	}
	return tasks, tail, nil
}
