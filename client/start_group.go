package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/group"
	"github.com/weirhq/weir/internal/handoff"
	"github.com/weirhq/weir/internal/lazytx"
	"github.com/weirhq/weir/internal/limit"
	"github.com/weirhq/weir/internal/store"
)

// Eager starts that many callers make at once are grouped into one
// transaction (internal/group), as a worker groups the outcomes of its
// activities: a start pays Postgres's costs per statement and per commit in
// full. A group of starts locks its workflow IDs, looks up and inserts its
// runs in one statement over arrays (store.QueueStartRuns), has the worker
// run every run's first task (handoff.Taker.RunFirstTasks), and sends
// their last writes, merged, with one COMMIT. Each start then returns what
// it would have returned alone.
//
// A start goes by itself (startEager) when no group is needed, and alone
// whenever its group cannot decide it: its workflow ID's lock is taken (the
// group takes locks without waiting, so it never deadlocks with a
// transaction that holds one), or the group rolled back. A start that the
// group found refused or replayed returns that at once: it wrote nothing.
// A group runs under its own deadline (startGroupTimeout), not its starts'
// contexts; one that may have committed (its connection failed after the
// COMMIT went) reports the error to each of its starts, as a start alone
// does, instead of running them again. A start alone after its group uses
// the workflow and request IDs the group used, so a retry is the same
// start. The worker declines, in a group, a first task that starts a child
// (the child's start lock is taken waiting): it goes through River.

const (
	// startGroupMembers bounds the starts in one group.
	startGroupMembers = 32

	// startGroupTimeout bounds a group's transaction.
	startGroupTimeout = time.Minute

	// startGroupsInitial is how many groups of starts (and starts by
	// themselves) a client may have in flight, each holding a connection,
	// before its limit learned from their latency per start
	// (limit.ForPool). Fewer, fuller groups cost Postgres less than more,
	// smaller ones (a group's statements are one per table over arrays,
	// whatever its size), which the limit sees as latency and backs off
	// from.
	startGroupsInitial = 2
)

// newStartGroups returns the group committer of a client's eager starts,
// one per workflow ID in a group.
func newStartGroups(c *Client) *group.Committer[string, *start] {
	return group.New(group.Config[string, *start]{
		Limit: limit.ForPool(c.pool, startGroupsInitial), Size: startGroupMembers,
		Key:     func(s *start) string { return s.key },
		Joins:   func(first, s *start) bool { return s.taker == first.taker },
		Commit:  c.commitStarts,
		Alone:   func(_ context.Context, s *start) { s.run, s.err = c.startEager(s.ctx, s) },
		HasRoom: func() bool { return limit.PoolHasRoom(c.pool) },
	})
}

// commitStarts runs a group of starts (one by itself, in its slot), gives
// each its verdict, and returns how many it decided and which run alone.
func (c *Client) commitStarts(members []*start) (decided int, alone []bool) {
	if len(members) == 1 {
		s := members[0]
		if s.run, s.err = c.startEager(s.ctx, s); s.err == nil {
			decided = 1
		}
		return decided, nil
	}
	decided = c.runStartGroup(members)
	alone = make([]bool, len(members))
	for i, s := range members {
		alone[i] = s.alone
	}
	return decided, alone
}

// runStartGroup runs one group of starts in a transaction, gives each its
// verdict, and returns how many starts it decided (not left to run alone).
func (c *Client) runStartGroup(members []*start) (decided int) {
	ctx, cancel := context.WithTimeout(context.Background(), startGroupTimeout)
	defer cancel()
	var (
		dones   []func(committed bool)
		sending bool // the batch with the COMMIT went out
	)
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil { // lazytx rolled back; the members run alone
				err = fmt.Errorf("weir: a group of starts panicked: %v", r)
			}
		}()
		return lazytx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			var err error
			dones, sending, err = c.startGroupTx(ctx, tx, members)
			return err
		})
	}()
	var pgErr *pgconn.PgError
	committed := err == nil || errors.Is(err, lazytx.ErrCommittedDespiteCallback)
	for _, done := range dones {
		done(committed)
	}
	for _, s := range members {
		switch {
		case committed:
		case sending && !errors.As(err, &pgErr):
			// The COMMIT may have run (the connection went, say): as a start
			// alone, each start reports the error rather than start again.
			s.alone, s.run, s.err = false, nil, fmt.Errorf("weir: starting workflow %s in a group of %d: %w", s.info.WorkflowID, len(members), err)
		default: // rolled back: each runs alone
			s.alone = true
		}
		if !s.alone {
			decided++
		}
	}
	return decided
}

// startGroupTx is a group's transaction: it gives its members their
// verdicts, and returns what to tell the worker once the transaction ended,
// and whether it sent its last batch (with the COMMIT).
func (c *Client) startGroupTx(ctx context.Context, tx pgx.Tx, members []*start) (dones []func(bool), sending bool, err error) {
	// W1: each workflow ID's start lock, taken without waiting, so that a
	// group never waits with locks held (and never deadlocks): a start whose
	// lock is taken runs alone, after the group. Its statements over arrays
	// are planned once per connection, not on every call, and without
	// sequential scans, so that a plan made while the tables are young still
	// takes rows by key once they filled (as a group of outcomes asks:
	// dbschema.GenericPlansSQL; TestStartRunManyTakesRunsByKey checks the
	// generic plan).
	ids := make([]string, len(members))
	for i, s := range members {
		ids[i] = s.key
	}
	var locked []bool
	batch := &pgx.Batch{}
	batch.Queue(dbschema.GenericPlansSQL)
	c.store.QueueTryStartLocks(batch, ids, &locked)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, false, fmt.Errorf("locking %d workflow IDs: %w", len(ids), err)
	}
	var in []*start // members to look up and insert
	var params []store.StartRunParams
	for i, s := range members {
		s.alone, s.run, s.err = !locked[i], nil, nil
		if locked[i] {
			in = append(in, s)
			params = append(params, s.runParams(true))
		}
	}
	if len(in) == 0 {
		return nil, false, nil
	}

	// The lookups and inserts, one statement for all, taking its snapshot
	// after every lock was granted.
	found := make([]store.StartRunResult, len(in))
	batch = &pgx.Batch{}
	c.store.QueueStartRuns(batch, params, found)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, false, fmt.Errorf("starting %d workflows: %w", len(in), err)
	}
	var (
		runs    []*handoff.Run
		started []*start // members whose run was inserted, as runs
	)
	for k, s := range in {
		replayed, refused := s.refusal(c, &found[k])
		switch {
		case (replayed != nil || refused != nil) && found[k].Inserted: // the SQL's conditions and these differ: fail closed
			return nil, false, fmt.Errorf("weir: start of workflow %s inserted its run although it is refused or replays a start", s.info.WorkflowID)
		case refused != nil:
			s.err = refused
		case replayed != nil:
			s.run = replayed
		case !found[k].Inserted:
			// Only a writer bypassing the advisory lock gets here: the start
			// runs alone, which reads the run in its way (answerCollision).
			s.alone = true
		default:
			runs = append(runs, s.handoffRun(&found[k], true))
			started = append(started, s)
			s.run = s.created(c, found[k].Generation)
		}
	}
	if len(runs) == 0 {
		return nil, false, nil
	}

	// The first tasks, their last writes merged; those that failed before
	// writing go through River, as a start alone queues them.
	tasks, err := started[0].taker.RunFirstTasks(ctx, tx, runs)
	if err != nil {
		return nil, false, err
	}
	for _, done := range tasks.Done {
		if done != nil {
			dones = append(dones, done)
		}
	}
	for k, s := range started {
		if taskErr := tasks.Errs[k]; taskErr != nil {
			if err := c.queueFailedFirstTask(ctx, tx, s, taskErr); err != nil {
				return dones, false, fmt.Errorf("queueing the first task of workflow %s through River (%w): %w", s.info.WorkflowID, taskErr, err)
			}
		}
	}
	lazytx.QueueCommit(tx, tasks.Last)
	err = tx.SendBatch(ctx, tasks.Last).Close()
	if err == nil || errors.Is(err, lazytx.ErrCommittedDespiteCallback) {
		tasks.Sent() // committed: what the batch read is recorded
	}
	return dones, true, err
}
