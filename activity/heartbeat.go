package activity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/attempt"
)

// Heartbeat tells weir the attempt is alive, renewing its lease at once (and
// resetting the workflow's HeartbeatTimeout for the attempt, if it set one), and
// stores details (any JSON-encodable progress marker; nil keeps what is
// stored) for this or a later attempt to read with HeartbeatDetails. Once an
// attempt has heartbeat it must heartbeat again within its HeartbeatTimeout,
// or within its lease (worker.Config.Fencing's LeaseTTL, 30 s by default)
// when it set none: an attempt that stops is recovered and re-run elsewhere
// within about that plus fencing.AttemptLimitGrace plus the reaper interval,
// even while its code still runs, and its later writes are refused. An
// attempt that never heartbeats is held to its start-to-close timeout alone
// (and to its HeartbeatTimeout, counted from its start, if it set one).
// Heartbeat returns an error matching fencing.ErrLeaseLost
// when this attempt no longer holds its job: stop working, the job belongs
// to a newer attempt (its context is cancelled too).
func Heartbeat(ctx context.Context, details any) error {
	st := attempt.From(ctx)
	if st != nil {
		st.Beat()
		if st.Heartbeat != nil {
			var data []byte
			if details != nil {
				var err error
				if data, err = json.Marshal(details); err != nil {
					return fmt.Errorf("encoding heartbeat details of activity %s: %w", st.ActivityKind, err)
				}
			}
			return st.Heartbeat(ctx, data)
		}
	}
	err := fencing.Heartbeat(ctx, details)
	if errors.Is(err, fencing.ErrNoLease) {
		return ErrNotInActivity
	}
	return err
}

// HeartbeatDetails returns the details last stored by Heartbeat, by this
// attempt or an earlier one: where to resume. ok is false when none were
// stored.
func HeartbeatDetails[T any](ctx context.Context) (details T, ok bool, err error) {
	var raw []byte
	if st := attempt.From(ctx); st != nil && st.HeartbeatDetails != nil {
		raw = st.HeartbeatDetails()
	} else {
		lease, inAttempt := fencing.LeaseFromContext(ctx)
		if !inAttempt {
			return details, false, ErrNotInActivity
		}
		raw = lease.Details
	}
	if len(raw) == 0 || string(raw) == "null" {
		return details, false, nil
	}
	if err := json.Unmarshal(raw, &details); err != nil {
		return details, false, fmt.Errorf("decoding heartbeat details: %w", err)
	}
	return details, true, nil
}
