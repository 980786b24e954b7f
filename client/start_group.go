package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/eagerstart"
	"github.com/weirhq/weir/internal/group"
	"github.com/weirhq/weir/internal/lazytx"
	"github.com/weirhq/weir/internal/limit"
	"github.com/weirhq/weir/internal/store"
)

// Starts made at once commit in groups (internal/group; see
// docs/decisions/0012-start-groups.md): each start still returns what it
// would alone. A start whose group cannot decide it (its workflow ID's lock
// is taken, or the group rolled back) runs alone after the group, with the
// same workflow and request IDs; one whose group may have committed reports
// the group's error rather than start again.

// startGroupTimeout bounds a group's transaction.
const startGroupTimeout = time.Minute

// newStartGroups returns the group committer of a client's starts, one per
// workflow ID in a group, eager starts (for one taker) and others apart.
func newStartGroups(c *Client) *group.Committer[startKey, *start] {
	return group.New(group.Config[startKey, *start]{
		Limit:   limit.ForPool(c.pool),
		Key:     (*start).key,
		Joins:   func(first, s *start) bool { return s.taker == first.taker },
		Commit:  c.commitStarts,
		Alone:   func(_ context.Context, s *start) { s.run, s.err = c.startOne(s.ctx, s) },
		HasRoom: func() bool { return limit.PoolHasRoom(c.pool) },
	})
}

// commitStarts runs a group of starts (one by itself, in its slot), gives
// each its verdict, and returns how many it decided and which run alone.
func (c *Client) commitStarts(members []*start) (decided int, alone []bool) {
	if len(members) == 1 {
		s := members[0]
		if s.run, s.err = c.startOne(s.ctx, s); s.err == nil {
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
	if members[0].taker == nil {
		sending, err = c.queueGroupTx(ctx, tx, members)
		return nil, sending, err
	}
	in, err := c.lockStarts(ctx, tx, members, nil)
	if err != nil || len(in) == 0 {
		return nil, false, err
	}
	// The lookups and inserts, one statement for all, taking its snapshot
	// after every lock was granted.
	found := make([]store.StartRunResult, len(in))
	batch := &pgx.Batch{}
	c.store.QueueStartRuns(batch, &groupRuns{starts: in, insert: true}, found)
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, false, fmt.Errorf("starting %d workflows: %w", len(in), err)
	}
	var (
		runs    []*eagerstart.Run
		started []*start // members whose run was inserted, as runs
	)
	for k, s := range in {
		switch decided, err := s.judge(c, &found[k]); {
		case err != nil:
			return nil, false, err
		case decided:
		case !found[k].Inserted:
			// Only a writer bypassing the advisory lock gets here: the start
			// runs alone, which reads the run in its way (answerCollision).
			s.alone = true
		default:
			runs = append(runs, s.eagerRun(&found[k], true))
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

// lockStarts takes each of members' workflow ID's start lock without
// waiting (W1), so that a group never waits with locks held (and never
// deadlocks): a start whose lock is taken runs alone, after the group. It
// returns the members it locked. With found set (as long as members:
// where to read what they found), the same round trip looks up every member's runs, taking its
// snapshot after every lock was granted (a lookup writes nothing: one of a
// start that runs alone is not read). The group's statements over arrays
// are planned once per connection, not on every call, and without
// sequential scans, so that a plan made while the tables are young still
// takes rows by key once they filled (as a group of outcomes asks:
// dbschema.GenericPlansSQL; TestStartRunManyTakesRunsByKey checks the
// generic plan).
func (c *Client) lockStarts(ctx context.Context, tx pgx.Tx, members []*start, found []store.StartRunResult) ([]*start, error) {
	var locked []bool
	lookups := &groupRuns{starts: members}
	batch := &pgx.Batch{}
	batch.Queue(dbschema.GenericPlansSQL)
	c.store.QueueTryStartLocks(batch, lookups, &locked)
	if found != nil {
		c.store.QueueStartRuns(batch, lookups, found)
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, fmt.Errorf("locking %d workflow IDs: %w", len(members), err)
	}
	in := make([]*start, 0, len(members))
	for i, s := range members {
		s.alone, s.run, s.err = !locked[i], nil, nil
		if locked[i] {
			in = append(in, s)
		}
	}
	return in, nil
}

// queueGroupTx is the transaction of a group of starts whose first tasks
// go to River's queue: it gives its members their verdicts, and returns
// whether it sent its last batch (with the COMMIT). Each run's insert
// queues its first task's River job in the same statement, the run naming
// it (store.StartRunParams.QueueTask); a guard in the last batch fails it,
// COMMIT included, unless every run was inserted.
func (c *Client) queueGroupTx(ctx context.Context, tx pgx.Tx, members []*start) (sending bool, err error) {
	// found serves the lookups, then the inserts of in.
	found := make([]store.StartRunResult, len(members))
	locked, err := c.lockStarts(ctx, tx, members, found)
	if err != nil {
		return false, err
	}
	in := locked[:0] // the members that insert their runs
	for i, s := range members {
		if s.alone {
			continue
		}
		switch decided, err := s.judge(c, &found[i]); {
		case err != nil:
			return false, err
		case !decided:
			in = append(in, s)
		}
	}
	if len(in) == 0 {
		return false, nil
	}
	runs := found[:len(in)]
	runIDs := make([]uuid.UUID, len(in))
	for k, s := range in {
		runIDs[k] = s.runID
	}
	batch := &pgx.Batch{}
	c.store.QueueStartRuns(batch, &groupRuns{starts: in, insert: true, queueTask: true}, runs)
	c.store.QueueStartedGuard(batch, runIDs)
	lazytx.QueueCommit(tx, batch)
	err = tx.SendBatch(ctx, batch).Close()
	if !lazytx.Committed(tx) {
		return true, err
	}
	var queues []string // each once in a row: announce sends one notification a queue
	for k, s := range in {
		if s.run = s.created(c, runs[k].Generation); !runs[k].Inserted {
			// The guard passed, so the run is in; its generation is unknown.
			s.run, s.err = nil, fmt.Errorf("weir: workflow %s started (run %s), but reading its generation failed: %w", s.info.WorkflowID, s.runID, err)
		}
		if len(queues) == 0 || queues[len(queues)-1] != s.info.Queue {
			queues = append(queues, s.info.Queue)
		}
	}
	c.announce(ctx, queues)
	return true, err
}

// judge gives s the verdict of what its lookup found: a refusal, or the
// run of its request (W2), and then reports it decided. It fails when the
// lookup's statement inserted s's run although the verdict forbids it (the
// SQL's conditions and these differ: fail closed).
func (s *start) judge(c *Client, found *store.StartRunResult) (decided bool, err error) {
	replayed, refused := s.refusal(c, found)
	switch {
	case (replayed != nil || refused != nil) && found.Inserted:
		return false, fmt.Errorf("weir: start of workflow %s inserted its run although it is refused or replays a start", s.info.WorkflowID)
	case refused != nil:
		s.err = refused
	case replayed != nil:
		s.run = replayed
	default:
		return false, nil
	}
	return true, nil
}

// groupRuns are starts as store.StartRuns: each one's runParams(insert),
// queuing its first task with its run if queueTask.
type groupRuns struct {
	starts            []*start
	insert, queueTask bool
}

func (g *groupRuns) Len() int { return len(g.starts) }

func (g *groupRuns) Params(i int) store.StartRunParams {
	p := g.starts[i].runParams(g.insert)
	p.QueueTask = g.queueTask
	return p
}
