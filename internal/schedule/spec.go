// Package schedule computes when a schedule is due: cron expressions (via
// robfig/cron) or fixed intervals, in a time zone, with a deterministic
// jitter per due time.
package schedule

import (
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/robfig/cron/v3"
)

// Spec says when a schedule is due.
type Spec struct {
	// Cron is a standard five-field cron expression (or a descriptor such as
	// "@hourly"); exclusive with Every.
	Cron string

	// Every is a fixed interval, counted from the schedule's anchor;
	// exclusive with Cron.
	Every time.Duration

	// Jitter delays each start by up to this much, the same delay for a
	// given due time on every worker (so retries agree).
	Jitter time.Duration

	// TimeZone is the IANA zone cron fields are read in. Defaults to UTC.
	TimeZone string
}

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Validate checks the spec.
func (s *Spec) Validate() error {
	switch {
	case s.Cron == "" && s.Every <= 0:
		return errors.New("schedule: give a cron expression or a positive interval")
	case s.Cron != "" && s.Every != 0:
		return errors.New("schedule: give a cron expression or an interval, not both")
	case s.Jitter < 0:
		return errors.New("schedule: jitter must not be negative")
	}
	if _, err := s.location(); err != nil {
		return err
	}
	if s.Cron != "" {
		sched, err := parser.Parse(s.Cron)
		if err != nil {
			return fmt.Errorf("schedule: cron expression %q: %w", s.Cron, err)
		}
		if sched.Next(time.Now()).IsZero() {
			return fmt.Errorf("%w: cron expression %q has no due time in the next five years", ErrNeverDue, s.Cron)
		}
	}
	return nil
}

func (s *Spec) location() (*time.Location, error) {
	if s.TimeZone == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("schedule: time zone %q: %w", s.TimeZone, err)
	}
	return loc, nil
}

// Next returns the first due time strictly after after. Intervals count
// from anchor (the schedule's creation), so due times don't drift: they are
// anchor + n×Every for n ≥ 1, never anchor itself (the live schedule's first
// due time is one interval after its creation).
func (s *Spec) Next(anchor, after time.Time) (time.Time, error) {
	if s.Every > 0 {
		if after.Before(anchor) {
			after = anchor
		}
		n := after.Sub(anchor)/s.Every + 1
		return anchor.Add(n * s.Every), nil
	}
	sched, err := parser.Parse(s.Cron)
	if err != nil {
		return time.Time{}, fmt.Errorf("schedule: cron expression %q: %w", s.Cron, err)
	}
	loc, err := s.location()
	if err != nil {
		return time.Time{}, err
	}
	next := sched.Next(after.In(loc))
	if next.IsZero() {
		// The cron library looks five years ahead, then gives up.
		return time.Time{}, fmt.Errorf("%w: cron expression %q after %s", ErrNeverDue, s.Cron, after.UTC().Format(time.RFC3339))
	}
	return next.UTC(), nil
}

// ErrNeverDue is matched by Next's error for a cron expression with no due
// time in the five years after the time asked (February 30th, say).
var ErrNeverDue = errors.New("schedule: never due")

// JitterFor is the delay of the start due at due, for schedule id: the same
// on every worker.
func (s *Spec) JitterFor(id string, due time.Time) time.Duration {
	if s.Jitter <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	_, _ = h.Write([]byte(due.UTC().Format(time.RFC3339Nano)))
	return time.Duration(h.Sum64() % uint64(s.Jitter))
}

// TimeZoneOrUTC is the spec's time zone, "UTC" when unset.
func (s *Spec) TimeZoneOrUTC() string {
	if s.TimeZone == "" {
		return "UTC"
	}
	return s.TimeZone
}
