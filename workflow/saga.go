package workflow

import (
	"errors"
	"fmt"
)

// SagaOpts are options of NewSaga. A nil *SagaOpts means defaults.
type SagaOpts struct {
	// StopOnError stops compensating at the first compensation that fails.
	// Defaults to false: every compensation runs, and their errors are
	// joined.
	StopOnError bool
}

// Saga undoes completed steps when a later one fails: each step that
// succeeds registers its compensation, and Compensate runs them in reverse
// order. Compensations run on a disconnected Context, so they run even when
// the workflow is being cancelled — the case a cancellation most needs them.
//
//	saga := workflow.NewSaga(ctx, nil)
//	if _, err := workflow.ExecuteActivity[Reservation](ctx, Reserve{…}, nil).Get(ctx); err != nil {
//		return err
//	}
//	saga.AddCompensation(func(ctx workflow.Context) error {
//		_, err := workflow.ExecuteActivity[struct{}](ctx, Release{…}, nil).Get(ctx)
//		return err
//	})
//	if _, err := workflow.ExecuteActivity[Charge](ctx, ChargeCard{…}, nil).Get(ctx); err != nil {
//		return errors.Join(err, saga.Compensate())
//	}
//
// A Saga belongs to one coroutine; it is not for concurrent use (workflow
// code never runs concurrently anyway).
type Saga struct {
	compensations []compensation
	ctx           Context
	opts          SagaOpts
}

type compensation struct {
	fn   func(ctx Context) error
	step int
}

// NewSaga returns an empty Saga for the workflow whose Context is ctx.
func NewSaga(ctx Context, opts *SagaOpts) *Saga {
	s := &Saga{ctx: ctx}
	if opts != nil {
		s.opts = *opts
	}
	return s
}

// AddCompensation registers fn to undo the step that just succeeded.
func (s *Saga) AddCompensation(fn func(ctx Context) error) {
	s.compensations = append(s.compensations, compensation{fn: fn, step: len(s.compensations) + 1})
}

// Compensate runs the registered compensations, last first, on a Context
// that cancellation does not reach, and forgets them. It returns nil when
// all succeeded, else a *CompensationError per failure, joined.
func (s *Saga) Compensate() error {
	ctx := NewDisconnectedContext(s.ctx)
	var errs []error
	for i := len(s.compensations) - 1; i >= 0; i-- {
		c := s.compensations[i]
		if err := c.fn(ctx); err != nil {
			errs = append(errs, &CompensationError{Err: err, Step: c.step})
			if s.opts.StopOnError {
				break
			}
		}
	}
	s.compensations = nil
	return errors.Join(errs...)
}

// CompensationError is a compensation that failed; Step counts the
// compensations in the order they were added, from 1.
type CompensationError struct {
	Err  error
	Step int
}

func (e *CompensationError) Error() string {
	return fmt.Sprintf("workflow: compensation of step %d failed: %v", e.Step, e.Err)
}

// Unwrap returns the compensation's error.
func (e *CompensationError) Unwrap() error { return e.Err }
