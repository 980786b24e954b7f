package fencing

import "context"

// Test-only access to internals, for the external test package.

// StopHeartbeats stops this driver's lease keeper, as if the process were
// partitioned from Postgres: its attempts keep running but stop renewing.
func (d *Driver) StopHeartbeats() { d.keeper.Stop() }

// ReapNow runs the lease reaper once, as the leader would.
func (d *Driver) ReapNow(ctx context.Context) (int, error) { return d.pilot.reaper.reapAll(ctx) }

// RenewNow renews this process's leases once, as the keeper would.
func (d *Driver) RenewNow(ctx context.Context) error { return d.driverKeeper().renewAll(ctx) }

func (d *Driver) driverKeeper() *leaseKeeper { return d.keeper }

// PilotCalls returns how often River called the Pilot's fetch and state
// write.
func (d *Driver) PilotCalls() (fetch, setState int64) {
	return d.pilot.calls.fetch.Load(), d.pilot.calls.setState.Load()
}

// NoteSchema tells the pilot about a schema, as River's calls would.
func (d *Driver) NoteSchema(schema string) { d.pilot.noteSchema(schema) }

// ClientTimeouts exposes clientTimeouts.
var ClientTimeouts = clientTimeouts

// KeeperConn reports whether the lease keeper holds a connection of its
// own now, and how many it opened so far.
func (d *Driver) KeeperConn() (own bool, opened int64) {
	k := d.keeper
	k.connMu.Lock()
	defer k.connMu.Unlock()
	return k.conn != nil, k.connects.Load()
}
