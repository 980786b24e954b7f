package worker

import (
	"sync"
	"time"
)

// dbClockWindow is how long a reading of the database's clock counts
// toward the estimate: readings of the current window and the one before.
const dbClockWindow = 10 * time.Second

// dbClock estimates the database's time from this process's clock: the
// offset between the two, as seen when transactions read the database's
// now() (a run's lock, a start). A continuation that skips that read
// (groupCommitter's one-round-trip step) dates its events with the estimate.
//
// now() is the reading transaction's start, so a reading is late by however
// long the transaction ran before the read: a lock wait, say, makes it late
// by the whole wait. A late reading can only make the offset look smaller,
// never larger, so the estimate is the largest offset read in the last one
// to two windows: one late reading does not date later steps early (which
// would move their ScheduleToClose deadlines earlier), and a clock that is
// stepped back is followed within two windows.
type dbClock struct {
	mu      sync.Mutex
	window  time.Time // start of the current window (local time)
	current int64     // largest offset read in it (database minus local, ns)
	prior   int64     // largest offset read in the window before
	known   bool      // current holds a reading
	had     bool      // prior holds a reading
}

// observe notes the database's time dbNow, read just now.
func (c *dbClock) observe(dbNow time.Time) {
	if dbNow.IsZero() {
		return
	}
	local := time.Now()
	offset := int64(dbNow.Sub(local))
	c.mu.Lock()
	defer c.mu.Unlock()
	switch since := local.Sub(c.window); {
	case !c.known && !c.had, since >= 2*dbClockWindow:
		c.window, c.current, c.known, c.prior, c.had = local, offset, true, 0, false
		return
	case since >= dbClockWindow:
		c.prior, c.had = c.current, c.known
		c.window, c.current, c.known = local, offset, true
		return
	}
	if !c.known || offset > c.current {
		c.current, c.known = offset, true
	}
}

// now returns the estimated database time, at microsecond precision (the
// database's), and whether there is an estimate yet.
func (c *dbClock) now() (time.Time, bool) {
	c.mu.Lock()
	offset, ok := c.current, c.known
	if c.had && (!ok || c.prior > offset) {
		offset, ok = c.prior, true
	}
	c.mu.Unlock()
	if !ok {
		return time.Time{}, false
	}
	return time.UnixMicro(time.Now().Add(time.Duration(offset)).UnixMicro()), true
}
