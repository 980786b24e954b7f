package workflow

import (
	"time"

	"github.com/weirhq/weir/internal/history"
)

// Duration is a time.Duration for workflow and activity args (and results)
// that people write by hand: in JSON it is a Go duration string ("168h",
// "1m30s"), and it decodes from such a string or from a number of
// nanoseconds (what a plain time.Duration field encodes), so changing a
// field from time.Duration to Duration keeps older payloads readable.
type Duration time.Duration

// MarshalJSON encodes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return history.Duration(d).MarshalJSON() }

// UnmarshalJSON decodes a Go duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(data []byte) error {
	return (*history.Duration)(d).UnmarshalJSON(data)
}

// String is the duration as time.Duration prints it.
func (d Duration) String() string { return time.Duration(d).String() }
