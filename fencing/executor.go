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
	tx, err := e.Executor.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &executorTx{ExecutorTx: tx, driver: e.driver}, nil
}

func (e *executor) JobUpdate(ctx context.Context, params *riverdriver.JobUpdateParams) (*rivertype.JobRow, error) {
	return e.driver.pilot.jobUpdate(ctx, e.Executor, false, params)
}

type executorTx struct {
	riverdriver.ExecutorTx

	driver *Driver
}

func (e *executorTx) Begin(ctx context.Context) (riverdriver.ExecutorTx, error) {
	tx, err := e.ExecutorTx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &executorTx{ExecutorTx: tx, driver: e.driver}, nil
}

func (e *executorTx) JobUpdate(ctx context.Context, params *riverdriver.JobUpdateParams) (*rivertype.JobRow, error) {
	return e.driver.pilot.jobUpdate(ctx, e.ExecutorTx, true, params)
}
