package main

// This file is the existing River application's jobs and workers. The
// upgrade changed one line here: the driver type parameter of
// river.JobCompleteTx (riverpgxv5.Driver became fencing.Driver).

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/weirhq/weir/fencing"
)

// SendEmailArgs is a plain River job.
type SendEmailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (SendEmailArgs) Kind() string { return "send_email" }

// Mailer sends email.
type Mailer interface {
	Send(ctx context.Context, to, subject string) error
}

// SendEmailWorker is a plain river.Worker.
type SendEmailWorker struct {
	river.WorkerDefaults[SendEmailArgs]
	Mailer Mailer
}

func (w *SendEmailWorker) Work(ctx context.Context, job *river.Job[SendEmailArgs]) error {
	return w.Mailer.Send(ctx, job.Args.To, job.Args.Subject)
}

// GenerateInvoiceArgs is a plain River job.
type GenerateInvoiceArgs struct {
	OrderID string `json:"order_id"`
	Cents   int64  `json:"cents"`
}

func (GenerateInvoiceArgs) Kind() string { return "generate_invoice" }

// GenerateInvoiceWorker writes an invoice row and completes its job in the
// same transaction. With the fencing driver that transaction cannot commit
// for a stale attempt (one whose job was rescued and given to another
// worker), so each invoice is written exactly once.
type GenerateInvoiceWorker struct {
	river.WorkerDefaults[GenerateInvoiceArgs]
	Pool     *pgxpool.Pool
	Invoices string // the invoices table, schema-qualified and quoted
}

func (w *GenerateInvoiceWorker) Work(ctx context.Context, job *river.Job[GenerateInvoiceArgs]) error {
	tx, err := w.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // a no-op after Commit

	if _, err := tx.Exec(ctx, "INSERT INTO "+w.Invoices+" (order_id, cents) VALUES ($1, $2)", job.Args.OrderID, job.Args.Cents); err != nil {
		return fmt.Errorf("inserting the invoice of order %s: %w", job.Args.OrderID, err)
	}
	// Was river.JobCompleteTx[*riverpgxv5.Driver]: the one change in this file.
	if _, err := river.JobCompleteTx[*fencing.Driver](ctx, tx, job); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// createInvoices creates the application's invoices table.
func createInvoices(ctx context.Context, pool *pgxpool.Pool, schema string) (string, error) {
	ident := pgx.Identifier{"invoices"}
	if schema != "" {
		ident = pgx.Identifier{schema, "invoices"}
	}
	table := ident.Sanitize()
	_, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+" (order_id text PRIMARY KEY, cents bigint NOT NULL)")
	return table, err
}
