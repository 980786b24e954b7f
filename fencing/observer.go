package fencing

import (
	"context"
	"sync/atomic"
)

// EventKind names what happened to a lease.
type EventKind string

const (
	// EventLeaseExpired: the reaper recovered a job whose lease had expired.
	EventLeaseExpired EventKind = "lease_expired"

	// EventLeaseLost: a renewal was refused because the attempt no longer
	// held the job; its context was cancelled with cause ErrLeaseLost.
	EventLeaseLost EventKind = "lease_lost"

	// EventLeaseRenewed: a heartbeat extended a lease.
	EventLeaseRenewed EventKind = "lease_renewed"

	// EventStaleWriteRejected: a write by an attempt that no longer held the
	// job was rejected and changed nothing.
	EventStaleWriteRejected EventKind = "stale_write_rejected"
)

// Event describes one lease event, for metrics and tracing.
type Event struct {
	// Attempt is the attempt concerned (0 if unknown).
	Attempt int

	// JobID is the job concerned.
	JobID int64

	// Kind is what happened.
	Kind EventKind

	// Op is, for EventStaleWriteRejected, the write that was rejected (see
	// LeaseLostError.Op); empty otherwise.
	Op string
}

// Observer receives lease events. Implementations must be safe for
// concurrent use and must not block (a slow one delays the lease keeper's
// next renewal). An attempt whose lease is lost is cancelled, and counted
// in Stats, before the observer hears of it; the events of one renewal
// reach it once that renewal is over.
type Observer interface {
	FencingEvent(ctx context.Context, event *Event)
}

// Stats are running totals of lease events since the Driver was made.
type Stats struct {
	// LeasesExpired counts jobs the reaper recovered after their lease expired.
	LeasesExpired int64

	// LeasesLost counts attempts told by a refused renewal that they had lost
	// their job.
	LeasesLost int64

	// LeasesRenewed counts lease renewals.
	LeasesRenewed int64

	// StaleWritesRejected counts writes by attempts that no longer held their
	// job, rejected and not applied.
	StaleWritesRejected int64
}

type counters struct {
	expired  atomic.Int64
	lost     atomic.Int64
	observer Observer
	rejected atomic.Int64
	renewed  atomic.Int64
}

// emit counts event and tells the observer of it.
func (c *counters) emit(ctx context.Context, event *Event) {
	c.count(event)
	c.notify(ctx, event)
}

// count counts event in Stats.
func (c *counters) count(event *Event) {
	switch event.Kind {
	case EventLeaseExpired:
		c.expired.Add(1)
	case EventLeaseLost:
		c.lost.Add(1)
	case EventLeaseRenewed:
		c.renewed.Add(1)
	case EventStaleWriteRejected:
		c.rejected.Add(1)
	}
}

// notify tells the observer of event, counted already.
func (c *counters) notify(ctx context.Context, event *Event) {
	if c.observer != nil {
		c.observer.FencingEvent(ctx, event)
	}
}

func (c *counters) snapshot() Stats {
	return Stats{
		LeasesExpired:       c.expired.Load(),
		LeasesLost:          c.lost.Load(),
		LeasesRenewed:       c.renewed.Load(),
		StaleWritesRejected: c.rejected.Load(),
	}
}
