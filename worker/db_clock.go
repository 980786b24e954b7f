package worker

import (
	"sync/atomic"
	"time"
)

// dbClock estimates the database's time from this process's clock: the
// offset between the two, as last seen when a transaction read the
// database's now() (a run's lock). A continuation that skips that read
// (stepCommitter's one-round-trip step) dates its events with the estimate,
// which trails the database's transaction time by about half a round trip.
type dbClock struct {
	offset atomic.Int64 // database time minus local time, nanoseconds
	known  atomic.Bool
}

// observe notes the database's time dbNow, read just now.
func (c *dbClock) observe(dbNow time.Time) {
	if dbNow.IsZero() {
		return
	}
	c.offset.Store(int64(time.Until(dbNow)))
	c.known.Store(true)
}

// now returns the estimated database time, at microsecond precision (the
// database's), and whether there is an estimate yet.
func (c *dbClock) now() (time.Time, bool) {
	if !c.known.Load() {
		return time.Time{}, false
	}
	return time.UnixMicro(time.Now().Add(time.Duration(c.offset.Load())).UnixMicro()), true
}
