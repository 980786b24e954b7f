package fencing

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivershared/riverpilot"
)

// Test-only access to internals, for the external test package.

// StopHeartbeats stops this driver's lease keeper, as if the process were
// partitioned from Postgres: its attempts keep running but stop renewing.
func (d *Driver) StopHeartbeats() { d.keeper.Stop() }

// ReapNow reaps every fenced schema River has used with this client through
// the pool, whoever holds the reaper locks.
func (d *Driver) ReapNow(ctx context.Context) (int, error) {
	r := d.pilot.reaper
	return r.eachFencedSchema(ctx, func(schema string) (int, error) { return r.reapSchema(ctx, d.pool, schema) })
}

// RenewNow renews every lease of this process once, whatever its age.
func (d *Driver) RenewNow(ctx context.Context) error {
	_, err := d.driverKeeper().renewAll(ctx, 0)
	return err
}

// AgeLease makes this process take the leases of jobID's attempts for by
// older than they are.
func (d *Driver) AgeLease(jobID int64, by time.Duration) {
	d.keeper.attempts.update(jobID, func(m map[int64]*attemptState) {
		for st := m[jobID]; st != nil; st = st.sameJob {
			st.mu.Lock()
			st.leaseFrom = st.leaseFrom.Add(-by)
			st.mu.Unlock()
		}
	})
}

// RenewDue renews the leases of this process that are due, as the keeper's
// tick does.
func (d *Driver) RenewDue(ctx context.Context) error {
	k := d.driverKeeper()
	_, err := k.renewAll(ctx, k.renewalAge())
	return err
}

func (d *Driver) driverKeeper() *leaseKeeper { return d.keeper }

// PilotCalls returns how often River called the Pilot's fetch and state
// write.
func (d *Driver) PilotCalls() (fetch, setState int64) {
	return d.pilot.calls.fetch.Load(), d.pilot.calls.setState.Load()
}

// IsOwnPilot reports whether p is this driver's pilot (River's
// Client.Pilot() returns the pilot River uses).
func (d *Driver) IsOwnPilot(p riverpilot.Pilot) bool {
	own, ok := p.(*pilot)
	return ok && own == d.pilot
}

// NoteSchema tells the pilot about a schema, as River's calls would.
func (d *Driver) NoteSchema(schema string) { d.pilot.noteSchema(schema) }

// ClientLeaderElectionDisabled exposes clientLeaderElectionDisabled.
var ClientLeaderElectionDisabled = clientLeaderElectionDisabled

// ReaperHolds reports whether this driver's reaper holds the reaper lock of
// schema.
func (d *Driver) ReaperHolds(schema string) bool {
	e := &d.pilot.reaper.election
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.conn != nil && e.held[schema]
}

// RestartWatchSeen returns the server epoch this driver's restart watch saw
// last (zero: none).
func (d *Driver) RestartWatchSeen() time.Time {
	_, seen := d.pilot.reaper.restart.args()
	return seen.Time
}

// ClientTimeouts exposes clientTimeouts.
var ClientTimeouts = clientTimeouts

// TimeoutsOf exposes the plugin's per-client read of clientTimeouts.
func (p *Plugin) TimeoutsOf(client *river.Client[pgx.Tx]) (timeout, stuck time.Duration, ok bool) {
	return p.timeoutsOf(client)
}

// KeeperConn reports whether the lease keeper holds a connection of its
// own now, and how many it opened so far.
func (d *Driver) KeeperConn() (own bool, opened int64) {
	k := d.keeper
	k.connMu.Lock()
	defer k.connMu.Unlock()
	return k.conn != nil, k.connects.Load()
}

// StuckJobs returns the IDs River's rescuer would take in schema for a stuck
// horizon: its own query, minus jobs whose lease is alive.
func (d *Driver) StuckJobs(ctx context.Context, schema string, horizon time.Time) ([]int64, error) {
	jobs, err := d.pilot.JobGetStuck(ctx, d.GetExecutor(), &riverdriver.JobGetStuckParams{
		Max: 100, Schema: schema, StuckHorizon: horizon,
	})
	if err != nil {
		return nil, err
	}
	ids := make([]int64, len(jobs))
	for i, job := range jobs {
		ids[i] = job.ID
	}
	return ids, nil
}

// KeeperAttempts counts the attempts the lease keeper renews.
func (d *Driver) KeeperAttempts() int {
	n := 0
	d.keeper.attempts.each(func(_ int64, head *attemptState) {
		for st := head; st != nil; st = st.sameJob {
			n++
		}
	})
	return n
}

// ServerEpochSQL exposes serverEpochSQL.
const ServerEpochSQL = serverEpochSQL

// MintedTokensMax exposes mintedTokensMax.
const MintedTokensMax = mintedTokensMax

// KnownRepeats counts the state writes this driver's pilot answered without
// a statement: repeats of completions it was told committed.
func (d *Driver) KnownRepeats() int64 { return d.pilot.calls.known.Load() }
