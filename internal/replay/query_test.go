package replay_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/workflow"
)

type StatusQuery struct {
	Verbose bool `json:"verbose"`
}

func (StatusQuery) Kind() string { return "status" }

type BadQuery struct{}

func (BadQuery) Kind() string { return "bad" }

type BlockingQuery struct{}

func (BlockingQuery) Kind() string { return "blocking" }

type FailingQuery struct{}

func (FailingQuery) Kind() string { return "failing" }

func TestQuery(t *testing.T) {
	t.Parallel()

	def := define(func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		status := "started"
		charged := 0
		workflow.SetQueryHandler(ctx, func(q StatusQuery) (string, error) {
			if q.Verbose {
				return status + " after " + string(rune('0'+charged)) + " charges", nil
			}
			return status, nil
		})
		workflow.SetQueryHandler(ctx, func(BadQuery) (int, error) {
			workflow.ExecuteActivity[int](ctx, ChargeArgs{}, nil) // not allowed
			return 0, nil
		})
		workflow.SetQueryHandler(ctx, func(BlockingQuery) (int, error) {
			return 0, workflow.Await(ctx, func() bool { return false })
		})
		workflow.SetQueryHandler(ctx, func(FailingQuery) (int, error) { return 0, errors.New("not today") })
		for step := 1; step <= 3; step++ {
			status = "charging"
			if _, err := workflow.ExecuteActivity[int](ctx, ChargeArgs{Step: step}, nil).Get(ctx); err != nil {
				return Receipt{}, err
			}
			charged++
		}
		status = "done"
		return Receipt{Total: charged}, nil
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task()
	r.task(completed(t, 3, 1))

	query := func(kind string, args any) (string, error) {
		encoded, err := json.Marshal(args)
		require.NoError(t, err)
		result, err := replay.Query(context.Background(), r.def, &replay.QueryParams{
			Args: encoded, ExecuteParams: replay.ExecuteParams{History: r.history}, Kind: kind,
		})
		return string(result), err
	}

	got, err := query("status", StatusQuery{})
	require.NoError(t, err)
	require.JSONEq(t, `"charging"`, got)
	got, err = query("status", StatusQuery{Verbose: true})
	require.NoError(t, err)
	require.JSONEq(t, `"charging after 1 charges"`, got)

	_, err = query("bad", BadQuery{})
	require.ErrorIs(t, err, workflow.ErrQueryCommand)
	_, err = query("blocking", BlockingQuery{})
	require.ErrorIs(t, err, workflow.ErrQueryCommand)
	_, err = query("failing", FailingQuery{})
	require.EqualError(t, err, "not today")
	_, err = query("nope", struct{}{})
	require.ErrorIs(t, err, replay.ErrUnknownQuery)
	require.ErrorContains(t, err, "bad, blocking, failing, status")

	// A query changes nothing: the run goes on, and closed runs answer too.
	r.task(completed(t, 6, 1))
	out := r.task(completed(t, 9, 1))
	require.Equal(t, Receipt{Total: 3}, decodeResult[Receipt](t, out))
	require.Equal(t, history.EventWorkflowCompleted, r.history[len(r.history)-1].Type)
	got, err = query("status", StatusQuery{})
	require.NoError(t, err)
	require.JSONEq(t, `"done"`, got)
}

// waitForApproval parks its coroutine where a stack trace can name it.
func waitForApproval(ctx workflow.Context, approved *bool) error {
	return workflow.Await(ctx, func() bool { return *approved })
}

// TestQueryStackTrace: workflow.QueryStackTrace answers, with no handler,
// where each of a running run's coroutines waits; nothing once it closed.
func TestQueryStackTrace(t *testing.T) {
	t.Parallel()

	def := define(func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		approved := false
		workflow.Go(ctx, func(ctx workflow.Context) {
			_, _ = workflow.ExecuteActivity[int](ctx, ChargeArgs{Step: 1}, nil).Get(ctx)
			approved = true
		})
		if err := waitForApproval(ctx, &approved); err != nil {
			return Receipt{}, err
		}
		return Receipt{Total: 1}, nil
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task()

	stackTrace := func() string {
		result, err := replay.Query(context.Background(), r.def, &replay.QueryParams{
			ExecuteParams: replay.ExecuteParams{History: r.history}, Kind: workflow.QueryStackTrace,
		})
		require.NoError(t, err)
		var trace string
		require.NoError(t, json.Unmarshal(result, &trace))
		return trace
	}
	trace := stackTrace()
	require.Contains(t, trace, "replay_test.waitForApproval", "the run's own coroutine")
	require.Equal(t, 2, strings.Count(trace, " [running]:\n"), "Run and the Go coroutine: %s", trace)

	out := r.task(completed(t, 3, 1))
	require.Equal(t, Receipt{Total: 1}, decodeResult[Receipt](t, out))
	require.Empty(t, stackTrace(), "a closed run waits nowhere")
}

// TestQueryHandlers: workflow.QueryHandlers answers, with no handler, the
// query, update and signal kinds the code registered by the end of its
// history.
func TestQueryHandlers(t *testing.T) {
	t.Parallel()

	def := define(func(ctx workflow.Context, args OrderArgs) (Receipt, error) {
		workflow.SetQueryHandler(ctx, func(StatusQuery) (string, error) { return "waiting", nil })
		workflow.SetUpdateHandler(ctx, func(workflow.Context, AddItem) (int, error) { return 1, nil }, nil)
		if _, err := workflow.GetSignalChannel[Approve](ctx).Receive(ctx); err != nil {
			return Receipt{}, err
		}
		return Receipt{}, nil
	})
	r := newRun(t, def, OrderArgs{ID: "o-1"})
	r.task()
	result, err := replay.Query(context.Background(), r.def, &replay.QueryParams{
		ExecuteParams: replay.ExecuteParams{History: r.history}, Kind: workflow.QueryHandlers,
	})
	require.NoError(t, err)
	require.JSONEq(t, `{"queries":["status"],"signals":["approve"],"updates":["add_item"]}`, string(result))
}
