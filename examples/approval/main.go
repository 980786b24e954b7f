// Command approval is a human in the loop: a workflow waits for a decision
// signal or a deadline, whichever comes first, and answers a status query
// all along.
//
//	DATABASE_URL=postgres://… go run ./examples/approval -decision approve
//	DATABASE_URL=postgres://… go run ./examples/approval -decision none -deadline 5s
//
// With -decision wait, nobody decides in-process: run it with a longer
// deadline (-decision wait -deadline 5m) and send the signal yourself
// through weir dev's API:
//
//	weir workflow signal approval-<ID> approval.decision --args '{"approved":true,"by":"you"}'
//
// (it prints the command with the workflow ID of its run).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/migrations"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// ApprovalArgs start a request for approval.
type ApprovalArgs struct {
	RequestID string            `json:"request_id"`
	Requester string            `json:"requester"`
	Amount    int64             `json:"amount"`
	Deadline  workflow.Duration `json:"deadline"` // "168h" or nanoseconds
}

func (ApprovalArgs) Kind() string { return "approval" }

// Decision is the signal a human sends.
type Decision struct {
	Approved bool   `json:"approved"`
	By       string `json:"by"`
}

func (Decision) Kind() string { return "approval.decision" }

// StatusQuery asks for the request's Status.
type StatusQuery struct{}

func (StatusQuery) Kind() string { return "approval.status" }

// Status is the answer to StatusQuery, and the workflow's result.
type Status struct {
	State     string    `json:"state"` // pending, approved, rejected, expired
	DecidedBy string    `json:"decided_by,omitempty"`
	Deadline  time.Time `json:"deadline"`
}

// ApprovalWorkflow waits for a Decision until the deadline, then notifies
// the requester.
type ApprovalWorkflow struct {
	workflow.Defaults[ApprovalArgs, Status]
}

func (w *ApprovalWorkflow) Run(ctx workflow.Context, args ApprovalArgs) (Status, error) {
	// workflow.Now, not time.Now: replays must see the same time.
	status := Status{State: "pending", Deadline: workflow.Now(ctx).Add(time.Duration(args.Deadline))}
	// Register the query handler before blocking; it only reads.
	workflow.SetQueryHandler(ctx, func(StatusQuery) (Status, error) { return status, nil })

	decisions := workflow.GetSignalChannel[Decision](ctx)
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	deadline := workflow.NewTimer(timerCtx, time.Duration(args.Deadline)) // durable: survives worker restarts

	var decision *Decision
	for decision == nil && !deadline.IsReady() {
		var err error
		workflow.NewSelector(ctx).
			AddReceive(decisions, func() {
				var d Decision
				var ok bool
				if d, ok, err = decisions.TryReceive(ctx); ok && err == nil {
					decision = &d
				}
			}).
			AddFuture(deadline, func() {}).
			Select(ctx)
		if err != nil {
			// A signal that doesn't decode is dropped; keep waiting.
			workflow.GetLogger(ctx).Warn("ignoring a malformed decision", "error", err)
		}
		if ctx.Err() != nil {
			status.State = "cancelled"
			return status, ctx.Err()
		}
	}
	cancelTimer() // no-op once it fired

	switch {
	case decision == nil:
		status.State = "expired"
	case decision.Approved:
		status.State, status.DecidedBy = "approved", decision.By
	default:
		status.State, status.DecidedBy = "rejected", decision.By
	}
	_, err := workflow.ExecuteActivity[struct{}](ctx, NotifyArgs{To: args.Requester, RequestID: args.RequestID, State: status.State}, nil).Get(ctx)
	if err != nil {
		return status, fmt.Errorf("notifying %s: %w", args.Requester, err)
	}
	return status, nil
}

// NotifyArgs tell a requester the outcome.
type NotifyArgs struct {
	To        string `json:"to"`
	RequestID string `json:"request_id"`
	State     string `json:"state"`
}

func (NotifyArgs) Kind() string { return "approval.notify" }

// NotifyActivity would send an email; it records what it sent.
type NotifyActivity struct {
	activity.Defaults[NotifyArgs, struct{}]
	sent chan<- NotifyArgs
}

func (a *NotifyActivity) Execute(ctx context.Context, args NotifyArgs) (struct{}, error) {
	select {
	case a.sent <- args:
	default: // nobody listens
	}
	return struct{}{}, nil
}

// newRequestID is a request ID no earlier run of the example (nor weir
// dev's approval-r-1) has used: each run starts a workflow of its own.
func newRequestID() string { return "r-" + uuid.NewString()[:8] }

func main() {
	request := flag.String("request", newRequestID(), "request ID (the workflow ID is approval-<ID>; default: a new one each run)")
	decision := flag.String("decision", "approve", `"approve", "reject", "none" (let the deadline pass) or "wait" (signal it yourself)`)
	deadline := flag.Duration("deadline", 10*time.Second, "how long to wait for a decision")
	schema := flag.String("schema", os.Getenv("WEIR_SCHEMA"), "Postgres schema of weir's tables (default: the search_path's first)")
	flag.Parse()
	switch *decision {
	case "approve", "reject", "none", "wait":
	default:
		log.Fatalf("-decision %q: want approve, reject, none or wait", *decision)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		log.Fatal("DATABASE_URL is not set (start `weir dev` and use the URL it prints)")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := run(ctx, pool, *schema, os.Stdout, *request, *decision, *deadline); err != nil {
		log.Fatal(err)
	}
}

// run starts an approval request, queries its status, decides it (or not)
// and prints the outcome.
func run(ctx context.Context, pool *pgxpool.Pool, schema string, out io.Writer, requestID, decision string, deadline time.Duration) (err error) {
	migrator, err := migrations.New(pool, &migrations.Config{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := migrator.Up(ctx, nil); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}

	sent := make(chan NotifyArgs, 1)
	w, err := worker.New(pool, &worker.Config{Schema: schema})
	if err != nil {
		return err
	}
	worker.AddWorkflow(w, &ApprovalWorkflow{})
	worker.AddActivity(w, &NotifyActivity{sent: sent})
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err = errors.Join(err, w.Stop(stopCtx))
	}()

	c, err := client.New(pool, &client.Config{Schema: schema})
	if err != nil {
		return err
	}
	defer c.Close()

	run, err := c.Start(ctx, ApprovalArgs{RequestID: requestID, Requester: "alice", Amount: 1200, Deadline: workflow.Duration(deadline)},
		&client.StartOpts{WorkflowID: "approval-" + requestID})
	if err != nil {
		return fmt.Errorf("starting: %w", err)
	}
	fmt.Fprintf(out, "request %s: waiting up to %s for a decision\n", requestID, deadline)

	var status Status
	if err := c.Query(ctx, run.WorkflowID, run.RunID, StatusQuery{}, &status, nil); err != nil {
		return fmt.Errorf("querying: %w", err)
	}
	fmt.Fprintf(out, "query: %s\n", status.State)

	switch decision {
	case "approve", "reject":
		// In an application this comes from a web handler; the request ID
		// makes a retried click harmless.
		d := Decision{Approved: decision == "approve", By: "bob"}
		if err := c.Signal(ctx, run.WorkflowID, run.RunID, d, &client.SignalOpts{RequestID: "decision-" + requestID}); err != nil {
			return fmt.Errorf("signalling: %w", err)
		}
		fmt.Fprintf(out, "signal: %s by %s\n", decision, d.By)
	case "wait":
		fmt.Fprintf(out, "send the decision: weir workflow signal %s approval.decision --args '{\"approved\":true,\"by\":\"you\"}'\n", run.WorkflowID)
	}

	waitCtx, cancel := context.WithTimeout(ctx, deadline+time.Minute)
	defer cancel()
	result, err := client.GetResult[Status](waitCtx, run)
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", run.WorkflowID, err)
	}
	select {
	case n := <-sent:
		fmt.Fprintf(out, "notified %s: %s\n", n.To, n.State)
	default:
		// The activity ran in another process (a worker elsewhere).
	}
	fmt.Fprintf(out, "result: %s", result.State)
	if result.DecidedBy != "" {
		fmt.Fprintf(out, " by %s", result.DecidedBy)
	}
	fmt.Fprintln(out)

	// Closed runs answer queries too: the worker replays their history.
	if err := c.Query(ctx, run.WorkflowID, uuid.Nil, StatusQuery{}, &status, nil); err != nil {
		return fmt.Errorf("querying: %w", err)
	}
	fmt.Fprintf(out, "query after close: %s\n", status.State)
	return nil
}
