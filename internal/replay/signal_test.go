package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

type Approve struct {
	By string `json:"by"`
}

func (Approve) Kind() string { return "approve" }

type AddNote struct {
	Note string `json:"note"`
}

func (AddNote) Kind() string { return "add_note" }

func signal(t testing.TB, kind string, args string) history.Event {
	t.Helper()
	ev, err := history.NewEvent(0, time.Time{}, &history.SignalReceivedAttributes{Kind: kind, Args: []byte(args)})
	require.NoError(t, err)
	return ev
}

// approval collects notes until it is approved, while an activity runs.
func approval(ctx workflow.Context, args OrderArgs) (Receipt, error) {
	charge := workflow.ExecuteActivity[int](ctx, ChargeArgs{Order: args.ID}, nil)
	approvals := workflow.GetSignalChannel[Approve](ctx)
	notes := workflow.GetSignalChannel[AddNote](ctx)
	var receipt Receipt
	approved, charged := false, false
	sel := workflow.NewSelector(ctx).
		AddFuture(charge, func() {
			total, err := charge.Get(ctx)
			if err == nil {
				receipt.Total = total
			}
			charged = true
		}).
		AddReceive(approvals, func() {
			a, _, err := approvals.TryReceive(ctx)
			if err != nil {
				receipt.Notes = append(receipt.Notes, "bad approval: "+err.Error())
				return
			}
			approved = true
			receipt.Notes = append(receipt.Notes, "approved by "+a.By)
		}).
		AddReceive(notes, func() {
			n, _, _ := notes.TryReceive(ctx)
			receipt.Notes = append(receipt.Notes, n.Note)
		})
	for !approved || !charged {
		sel.Select(ctx)
	}
	return receipt, nil
}

func TestExecuteSignals(t *testing.T) {
	t.Parallel()

	r := newRun(t, define(approval), OrderArgs{ID: "o-1"})
	r.task()
	out := r.task(signal(t, "add_note", `{"note":"first"}`), signal(t, "add_note", `{"note":"second"}`))
	require.False(t, out.Completed)
	require.Equal(t, []history.EventType{history.EventSignalReceived, history.EventSignalReceived, history.EventWorkflowTaskStarted}, eventTypes(out.Events))
	// Arrival order decides between the activity and the signals: the
	// note that arrived after both is never received.
	out = r.task(signal(t, "approve", `{"by":"ann"}`), completed(t, 3, 7), signal(t, "add_note", `{"note":"late"}`))
	require.Equal(t, Receipt{Total: 7, Notes: []string{"first", "second", "approved by ann"}}, decodeResult[Receipt](t, out))
	require.NoError(t, replay.Replay(context.Background(), r.def, &replay.ExecuteParams{History: r.history}))

	// Signals to a closed run are dropped.
	out = r.task(signal(t, "add_note", `{"note":"too late"}`))
	require.Len(t, out.Dropped, 1)
	require.Empty(t, out.Events)
}

func TestExecuteSignalsBufferedBeforeChannel(t *testing.T) {
	t.Parallel()

	def := define(func(ctx workflow.Context, args OrderArgs) ([]string, error) {
		if _, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{}, nil).Get(ctx); err != nil {
			return nil, err
		}
		ch := workflow.GetSignalChannel[AddNote](ctx)
		var got []string
		for len(got) < 3 {
			n, err := ch.Receive(ctx)
			if err != nil {
				got = append(got, "error: "+err.Error())
				continue
			}
			got = append(got, n.Note)
		}
		return got, nil
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task(signal(t, "add_note", `{"note":"early"}`))
	out := r.task(completed(t, 4, 1), signal(t, "add_note", `{"note":7}`))
	require.False(t, out.Completed)
	out = r.task(signal(t, "add_note", `{"note":"last"}`))
	got := decodeResult[[]string](t, out)
	require.Equal(t, "early", got[0])
	require.Contains(t, got[1], "error: decoding signal add_note")
	require.Equal(t, "last", got[2])
}

func TestExecuteSignalReceiveCanceled(t *testing.T) {
	t.Parallel()

	def := define(func(ctx workflow.Context, args OrderArgs) (Approve, error) {
		return workflow.GetSignalChannel[Approve](ctx).Receive(ctx)
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task()
	out := r.task(cancelRequested(t))
	require.True(t, out.Canceled)
}
