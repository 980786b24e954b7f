// Package schedule computes when a schedule is due: cron expressions (via
// robfig/cron) or fixed intervals, in a time zone, with a deterministic
// jitter per due time.
package schedule

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/big"
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
	if s.Cron == "" {
		_, err := s.location()
		return err
	}
	sched, _, err := s.cron()
	if err == nil && sched.Next(time.Now()).IsZero() {
		err = fmt.Errorf("%w: cron expression %q has no due time in the next five years", ErrNeverDue, s.Cron)
	}
	return err
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

// cron is the spec's cron schedule and the time zone it is read in.
func (s *Spec) cron() (cron.Schedule, *time.Location, error) {
	sched, err := parser.Parse(s.Cron)
	if err != nil {
		return nil, nil, fmt.Errorf("schedule: cron expression %q: %w", s.Cron, err)
	}
	loc, err := s.location()
	return sched, loc, err
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
	sched, loc, err := s.cron()
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

// Count returns how many due times lie in [from, to), or limit+1 when more
// than limit do: the count never overflows, however long the range, and a
// cron spec is walked at most limit+1 steps.
func (s *Spec) Count(anchor, from, to time.Time, limit int64) (int64, error) {
	if !from.Before(to) {
		return 0, nil
	}
	if s.Every > 0 {
		return min(s.countEvery(anchor, from, to), limit+1), nil
	}
	sched, loc, err := s.cron()
	if err != nil {
		return 0, err
	}
	var n int64
	for due := cronNext(sched, from.Add(-time.Nanosecond).In(loc), to); !due.IsZero(); due = cronNext(sched, due, to) {
		if n++; n > limit {
			break
		}
	}
	return n, nil
}

// NextBefore returns the first due time strictly after after and before
// before, or an error matching ErrNeverDue when there is none. Unlike Next
// it looks past the cron library's five-year horizon: a range starting
// years before a cron expression's first due time still finds it.
func (s *Spec) NextBefore(anchor, after, before time.Time) (time.Time, error) {
	if s.Every > 0 {
		next, err := s.Next(anchor, after)
		if err == nil && !next.Before(before) {
			err = fmt.Errorf("%w: no due time before %s", ErrNeverDue, before.UTC().Format(time.RFC3339Nano))
		}
		return next, err
	}
	sched, loc, err := s.cron()
	if err != nil {
		return time.Time{}, err
	}
	next := cronNext(sched, after.In(loc), before)
	if next.IsZero() {
		return time.Time{}, fmt.Errorf("%w: cron expression %q after %s and before %s", ErrNeverDue, s.Cron,
			after.UTC().Format(time.RFC3339), before.UTC().Format(time.RFC3339))
	}
	return next.UTC(), nil
}

// cronHorizon is less than how far the cron library looks ahead (the rest of
// the year of its start and four more) before it gives up.
const cronHorizon = 4 * 365 * 24 * time.Hour

// cronNext is sched's first due time after after and before before, or zero:
// where the library gives up, it goes on from one horizon later.
func cronNext(sched cron.Schedule, after, before time.Time) time.Time {
	for after.Before(before) {
		next := sched.Next(after)
		if !next.IsZero() {
			if next.Before(before) {
				return next
			}
			return time.Time{}
		}
		after = after.Add(cronHorizon)
	}
	return time.Time{}
}

// countEvery counts the n ≥ 1 with from ≤ anchor + n×Every < to in
// arbitrary precision: spans past 292 years do not fit a time.Duration.
func (s *Spec) countEvery(anchor, from, to time.Time) int64 {
	nanos := func(t time.Time) *big.Int {
		v := big.NewInt(t.Unix())
		v.Mul(v, big.NewInt(int64(time.Second)))
		return v.Add(v, big.NewInt(int64(t.Nanosecond())))
	}
	every := big.NewInt(int64(s.Every))
	// ceilDiv is ⌈(t − anchor) / Every⌉: the first n with anchor + n×Every ≥ t.
	ceilDiv := func(t time.Time) *big.Int {
		d := new(big.Int).Sub(nanos(anchor), nanos(t)) // −(t − anchor)
		d.Div(d, every)                                // Euclidean: ⌊−x/e⌋ for e > 0
		return d.Neg(d)
	}
	first := ceilDiv(from)
	if first.Sign() < 1 {
		first.SetInt64(1)
	}
	n := new(big.Int).Sub(ceilDiv(to), first) // n in [first, ⌈(to − anchor)/e⌉)
	if n.Sign() < 0 {
		return 0
	}
	if !n.IsInt64() {
		return math.MaxInt64
	}
	return n.Int64()
}
