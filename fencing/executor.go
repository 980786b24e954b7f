package fencing

import (
	"context"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
)

// executor is riverpgxv5's executor with JobUpdate fenced. JobUpdate is the
// one River write on a job that bypasses the Pilot (Client.JobUpdate,
// Client.JobUpdateTx, river.ResumableSetStepTx).
type executor struct {
	riverdriver.Executor

	driver *Driver
}

func (e *executor) Begin(ctx context.Context) (riverdriver.ExecutorTx, error) {
	return e.driver.wrapTx(e.Executor.Begin(ctx))
}

func (e *executor) JobUpdate(ctx context.Context, params *riverdriver.JobUpdateParams) (*rivertype.JobRow, error) {
	return e.driver.pilot.jobUpdate(ctx, e.Executor, false, params)
}

type executorTx struct {
	riverdriver.ExecutorTx

	driver *Driver
}

func (e *executorTx) Begin(ctx context.Context) (riverdriver.ExecutorTx, error) {
	return e.driver.wrapTx(e.ExecutorTx.Begin(ctx))
}

// wrapTx fences the JobUpdate of tx, River's transaction (or err).
func (d *Driver) wrapTx(tx riverdriver.ExecutorTx, err error) (riverdriver.ExecutorTx, error) {
	if err != nil {
		return nil, err
	}
	return &executorTx{ExecutorTx: tx, driver: d}, nil
}

func (e *executorTx) JobUpdate(ctx context.Context, params *riverdriver.JobUpdateParams) (*rivertype.JobRow, error) {
	return e.driver.pilot.jobUpdate(ctx, e.ExecutorTx, true, params)
}
