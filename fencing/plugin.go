package fencing

import (
	"context"
	"log/slog"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Plugin is the worker side of fencing: for each attempt it puts the lease in
// the work context (LeaseFromContext, Heartbeat), attaches the attempt's
// proof to every write River makes on the attempt's behalf, has the lease
// renewed while the attempt runs, and cancels the work context with cause
// ErrLeaseLost as soon as a renewal is refused. Get it from Driver.Plugin and
// put it first in river.Config.Plugins.
type Plugin struct {
	river.PluginDefaults

	driver   *Driver
	timeouts atomic.Pointer[clientTimeoutsOf] // of the last client seen
}

// clientTimeoutsOf caches clientTimeouts' answer for one River client: a
// client's configuration does not change once it is built.
type clientTimeoutsOf struct {
	client         *river.Client[pgx.Tx]
	timeout, stuck time.Duration
	ok             bool
}

// timeoutsOf is clientTimeouts(client), read once per client.
func (p *Plugin) timeoutsOf(client *river.Client[pgx.Tx]) (timeout, stuck time.Duration, ok bool) {
	if c := p.timeouts.Load(); c != nil && c.client == client {
		return c.timeout, c.stuck, c.ok
	}
	c := &clientTimeoutsOf{client: client}
	c.timeout, c.stuck, c.ok = clientTimeouts(client)
	p.timeouts.Store(c)
	return c.timeout, c.stuck, c.ok
}

var _ rivertype.WorkerMiddleware = (*Plugin)(nil)

// Work wraps an attempt. It is River's WorkerMiddleware hook.
func (p *Plugin) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	return p.driver.runAttempt(ctx, p.newAttempt(ctx, job), true, doInner)
}

// newAttempt sets up the attempt's state and attaches its proof to the
// attempt's metadata updates. It is apart from Work, and never inlined, so
// that Work's frame, on the job goroutine's stack while the job runs, stays
// small (fewer stack growths).
//
//go:noinline
func (p *Plugin) newAttempt(ctx context.Context, job *rivertype.JobRow) *attemptState {
	d := p.driver
	st := &attemptState{
		attempt:    job.Attempt,
		driver:     d,
		jobID:      job.ID,
		localStart: time.Now(),
		stuckAfter: river.JobStuckThresholdDefault,
	}
	if job.AttemptedAt != nil {
		st.attemptedAt = *job.AttemptedAt
	}

	client, _ := river.ClientFromContextSafely[pgx.Tx](ctx)
	if client != nil {
		st.schema = client.Schema()
	}
	if rec := d.pilot.fetchedRecord(job.ID, job.Attempt); rec != nil {
		st.schema, st.token, st.expiresAt, st.details = rec.schema, rec.token, rec.expiresAt, rec.details
		st.leaseFrom = rec.leaseFrom
	}

	// Until the work context shows the real deadline (LeaseFromContext,
	// Heartbeat), assume the client's JobTimeout as River's executor does
	// for a worker that does not override Timeout.
	if timeout, stuck, ok := p.timeoutsOf(client); ok {
		st.stuckAfter = stuck
		if timeout > 0 {
			until := st.attemptedAt.Add(timeout + stuck)
			st.renewUntil = &until
		}
	}

	if err := river.MetadataSet(ctx, proofKey, st.proof().encode()); err != nil {
		d.logger().WarnContext(ctx, "fencing: attaching lease proof", slog.String("error", err.Error()))
	}
	return st
}

// clientTimeouts reads JobTimeout and JobStuckThreshold (with River's
// defaults applied) from a River client's configuration. River exposes no
// accessor; the fencing conformance test fails if this stops working.
func clientTimeouts(client *river.Client[pgx.Tx]) (timeout, stuck time.Duration, ok bool) {
	if client == nil {
		return 0, 0, false
	}
	config := reflect.ValueOf(client).Elem().FieldByName("config")
	if !config.IsValid() || config.Kind() != reflect.Pointer || config.IsNil() {
		return 0, 0, false
	}
	config = config.Elem()
	timeoutField := config.FieldByName("JobTimeout")
	stuckField := config.FieldByName("JobStuckThreshold")
	if !timeoutField.IsValid() || timeoutField.Kind() != reflect.Int64 ||
		!stuckField.IsValid() || stuckField.Kind() != reflect.Int64 {
		return 0, 0, false
	}
	timeout = time.Duration(timeoutField.Int())
	if timeout == 0 {
		timeout = river.JobTimeoutDefault
	}
	stuck = time.Duration(stuckField.Int())
	if stuck == 0 {
		stuck = river.JobStuckThresholdDefault
	}
	return timeout, stuck, true
}
