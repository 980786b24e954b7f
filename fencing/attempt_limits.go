package fencing

import (
	"context"
	"time"
)

// AttemptLimits are time limits of one attempt that hold even when its work
// ignores its context: once the attempt passes one, its lease ends (its
// process stops renewing it and cuts it back), the lease reaper recovers the
// job, and whatever the attempt writes afterwards is refused. A zero or
// negative field sets no limit.
type AttemptLimits struct {
	// Timeout is how long the attempt may run, counted from its start
	// (River's attempted_at).
	Timeout time.Duration

	// HeartbeatTimeout is how long the attempt may go without calling
	// Heartbeat, counted from its start, then from its latest Heartbeat.
	HeartbeatTimeout time.Duration

	// HeartbeatsRequired, without a HeartbeatTimeout, holds an attempt that
	// has called Heartbeat once to call it again within every LeaseTTL: one
	// that stops is recovered as if its process had died. An attempt that
	// never calls Heartbeat is not held to it.
	HeartbeatsRequired bool
}

// AttemptLimitGrace is how long past one of its AttemptLimits an attempt's
// lease lasts: time for a work that returns when its context is cancelled at
// the limit to have its outcome written under its lease.
const AttemptLimitGrace = time.Second

// LimitAttempt tells the fencing layer the limits of the attempt whose work
// context is ctx. Without it a live process renews its attempts' leases until
// their River deadline plus River's JobStuckThreshold (see Limits in the
// package documentation), so a work that hangs keeps its job that long plus a
// LeaseTTL. With it, the job of an attempt that passes a limit without its
// work having returned is recovered within AttemptLimitGrace plus
// ReaperInterval of the limit, whatever its process does. An attempt whose
// work returned keeps its lease until its outcome is written, as without
// limits.
//
// Call it early in Work, with the context River passes to it; a later call
// replaces the limits. It returns ErrNoLease outside an attempt run with the
// fencing plugin, and does nothing for an attempt without a lease (before
// the fencing migration). An error shortening the lease at once (the
// database) is returned, and the limits hold from the lease keeper's next
// renewal anyway.
func LimitAttempt(ctx context.Context, limits AttemptLimits) error {
	st := attemptFromContext(ctx)
	if st == nil {
		return ErrNoLease
	}
	st.observeDeadline(ctx)
	st.mu.Lock()
	st.limits = limits
	end, limited := st.leaseEndAt()
	// The lease keeper caps the lease at its next renewal, within a
	// HeartbeatInterval. A lease end before that, on a lease the fetch made
	// longer, is written at once.
	nextRenewal := st.attemptedAt.Add(time.Since(st.localStart) + st.driver.config.HeartbeatInterval)
	cut := limited && st.expiresAt.After(end) && end.Before(nextRenewal)
	st.mu.Unlock()
	if st.token == "" || !cut {
		return nil
	}
	return st.driver.keeper.heartbeat(ctx, st, nil)
}

// leaseEnd is the database time past which the attempt's lease must not
// last under its limits: the earliest of its limits plus
// AttemptLimitGrace; nil if it has none. Local times are carried over to
// attempted_at as renewalEnd does. Callers hold s.mu.
func (s *attemptState) leaseEnd() *time.Time {
	end, ok := s.leaseEndAt()
	if !ok {
		return nil
	}
	return &end
}

// leaseEndAt is leaseEnd as a value; false if the attempt has no limits.
// Callers hold s.mu.
func (s *attemptState) leaseEndAt() (time.Time, bool) {
	var end time.Time
	if s.limits.Timeout > 0 {
		end = s.attemptedAt.Add(s.limits.Timeout)
	}
	beatTimeout, since := s.limits.HeartbeatTimeout, s.localStart
	if beatTimeout <= 0 && s.limits.HeartbeatsRequired && !s.lastBeat.IsZero() {
		beatTimeout = s.driver.config.LeaseTTL
	}
	if !s.lastBeat.IsZero() {
		since = s.lastBeat
	}
	if beatTimeout > 0 {
		beatEnd := s.attemptedAt.Add(since.Sub(s.localStart) + beatTimeout)
		if end.IsZero() || beatEnd.Before(end) {
			end = beatEnd
		}
	}
	if end.IsZero() {
		return time.Time{}, false
	}
	return end.Add(AttemptLimitGrace), true
}
