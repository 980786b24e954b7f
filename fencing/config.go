package fencing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// LeaseTTLDefault is how long a lease lasts without renewal unless
	// Config.LeaseTTL says otherwise.
	LeaseTTLDefault = 30 * time.Second

	// ReaperIntervalDefault is how often the lease reaper looks for expired
	// leases unless Config.ReaperInterval says otherwise.
	ReaperIntervalDefault = 5 * time.Second

	// leaseTTLMin keeps leases longer than a round trip to Postgres.
	leaseTTLMin = 100 * time.Millisecond
)

// Config configures a Driver. The zero value (or a nil *Config) works: a
// zero field takes its default. NewDriver rejects an invalid Config with a
// *ConfigError (matching ErrInvalidConfig) that names the field.
type Config struct {
	// HeartbeatInterval is the longest a lease of an attempt a process runs
	// goes unrenewed: every half HeartbeatInterval the process renews, in
	// one batched statement, normally on a connection of its own outside the
	// pool, the leases at least half a HeartbeatInterval old (see the
	// package docs). It must be under half of LeaseTTL, so that one late
	// heartbeat does not lose a lease. Defaults to LeaseTTL / 3.
	HeartbeatInterval time.Duration

	// LeaseTTL is how long an attempt's lease lasts without renewal. Once it
	// has expired the lease reaper makes the job available again and any
	// later write by the old attempt is rejected. Defaults to LeaseTTLDefault
	// (30 seconds).
	LeaseTTL time.Duration

	// OnFinalized, if set, is called inside the transaction that moves jobs
	// to a final state (completed, discarded, cancelled) through the fencing
	// layer: River's completer, JobCompleteTx, the lease reaper and River's
	// rescuer. Whatever it writes with tx commits together with the state
	// change, or not at all; an error aborts the change (River retries it).
	// jobIDs are the jobs that just finalized; read them with tx (the table
	// is river_job in schema, "" meaning the search_path's). It is not called
	// for a repeat of a write already applied. Defaults to none.
	OnFinalized func(ctx context.Context, tx pgx.Tx, schema string, jobIDs []int64) error

	// Observer, if set, is told about lease renewals, lost and expired leases
	// and rejected stale writes, for metrics and tracing. It is called
	// synchronously and must not block. Defaults to none; Driver.Stats counts
	// the same events either way.
	Observer Observer

	// ReaperInterval is how often the fenced process that reaps a schema
	// looks for expired leases and returns their jobs to available, and how
	// often the other fenced processes try to take reaping over (see the
	// package documentation). Defaults to ReaperIntervalDefault (5 seconds).
	ReaperInterval time.Duration
}

func (c *Config) withDefaults() *Config {
	out := *c
	out.LeaseTTL = cmp.Or(c.LeaseTTL, LeaseTTLDefault)
	out.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, out.LeaseTTL/3)
	out.ReaperInterval = cmp.Or(c.ReaperInterval, ReaperIntervalDefault)
	return &out
}

// ErrInvalidConfig is matched (errors.Is) by the error NewDriver returns for
// a Config it rejects; that error is a *ConfigError naming the setting.
var ErrInvalidConfig = errors.New("fencing config: invalid")

// ConfigError is the error NewDriver returns for an invalid Config. It
// matches ErrInvalidConfig with errors.Is.
type ConfigError struct {
	// Field is the Config field whose value is invalid, e.g. "LeaseTTL".
	Field string

	// Value is the field's value after defaults were applied.
	Value time.Duration

	// Reason says what the value must be.
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("fencing config: %s (%s) %s", e.Field, e.Value, e.Reason)
}

// Is reports whether target is ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

func (c *Config) validate() error {
	switch {
	case c.LeaseTTL < leaseTTLMin:
		return &ConfigError{Field: "LeaseTTL", Value: c.LeaseTTL, Reason: fmt.Sprintf("must be at least %s", leaseTTLMin)}
	case c.HeartbeatInterval <= 0:
		return &ConfigError{Field: "HeartbeatInterval", Value: c.HeartbeatInterval, Reason: "must be positive"}
	// One missed beat must not lose the lease: 2*HeartbeatInterval < LeaseTTL,
	// written so that it cannot overflow.
	case c.HeartbeatInterval >= c.LeaseTTL-c.HeartbeatInterval:
		return &ConfigError{Field: "HeartbeatInterval", Value: c.HeartbeatInterval,
			Reason: fmt.Sprintf("must be under half of LeaseTTL (%s)", c.LeaseTTL)}
	case c.ReaperInterval <= 0:
		return &ConfigError{Field: "ReaperInterval", Value: c.ReaperInterval, Reason: "must be positive"}
	}
	return nil
}
