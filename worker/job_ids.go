package worker

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirhq/weir/internal/fencingclaim"
	"github.com/weirhq/weir/internal/lazytx"
)

// jobIDBlock is how many River job IDs a worker reserves at a time.
const jobIDBlock = 128

// jobIDs hands out River job IDs this worker reserved (fencingclaim.ReserveJobIDs)
// for the activities it claims: a claim that names its job's ID merges with
// the others of its group into one statement, and the activity's row names
// the job by that ID. A refill reads the sequence through the transaction
// at hand (one round trip per block), or through the pool when that
// transaction sends nothing (a first task run ahead of its start).
type jobIDs struct {
	pool   *pgxpool.Pool
	schema string

	mu  sync.Mutex
	ids []int64
}

// take returns a reserved job ID, reserving a block through tx if none is
// left.
func (j *jobIDs) take(ctx context.Context, tx pgx.Tx) (int64, error) {
	j.mu.Lock()
	if len(j.ids) == 0 {
		j.mu.Unlock()
		var ids []int64
		reserve := func(tx pgx.Tx) (err error) {
			ids, err = fencingclaim.ReserveJobIDs(ctx, tx, j.schema, jobIDBlock)
			return err
		}
		var err error
		if _, unsent := tx.(*lazytx.NoSendTx); unsent {
			err = lazytx.BeginFunc(ctx, j.pool, reserve)
		} else {
			err = reserve(tx)
		}
		if err != nil {
			return 0, err
		}
		j.mu.Lock()
		j.ids = append(j.ids, ids...)
	}
	id := j.ids[0]
	j.ids = j.ids[1:]
	j.mu.Unlock()
	return id, nil
}
