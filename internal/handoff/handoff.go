// Package handoff lets a client hand the first workflow task of a run it
// starts to a worker running in the same process (eager workflow start).
//
// Without it, a start inserts the task's River job, notifies, and a worker
// fetches the job: a notification, a fetch statement and its commit between
// the start and the workflow's first line. With it, the start inserts the
// job already running, claimed by the local worker under a fenced lease, in
// the start's own transaction, and the worker runs the task as soon as that
// commits. The job is a River job like any other: if the process dies
// before the task commits, the lease expires and River runs the task
// elsewhere.
//
// Workers register what they can take (Register); a client looks a taker up
// by the pool it writes through, its schema, the run's queue and the task's
// job kind (Lookup). Sharing the pool is how a client knows the worker
// reaches the same database.
package handoff

import (
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Key is what a taker takes: first tasks of one job kind (task.Kind) in one
// queue of one schema, written through one pool.
type Key struct {
	Pool   *pgxpool.Pool
	Schema string
	Queue  string
	Kind   string
}

// Task is the first task job of a run, as the client would insert it
// through River.
type Task struct {
	// Args is the job's encoded args (task.Args).
	Args []byte

	// MaxAttempts is the job's max attempts (task.MaxAttempts).
	MaxAttempts int
}

// A Taker takes first tasks.
type Taker interface {
	// Claim queues in batch, in the start's transaction, the insert of
	// task's job already claimed by the taker, when the taker has room for
	// it now; ok is false when it has not (the caller inserts the job
	// through River as usual). Statements queued behind it find the job's
	// ID in the session's currval of river_job's ID sequence. Once the
	// transaction ended, the caller must call done with whether it
	// committed: the taker runs the task if it did and frees its room if
	// it did not.
	Claim(batch *pgx.Batch, key Key, task *Task) (done func(committed bool), ok bool, err error)
}

var (
	mu     sync.Mutex
	takers = map[Key][]Taker{}
)

// Register makes taker a taker of key until the returned func is called.
func Register(key Key, taker Taker) (unregister func()) {
	mu.Lock()
	takers[key] = append(takers[key], taker)
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			list := takers[key]
			for i, t := range list {
				if t == taker {
					list = append(list[:i:i], list[i+1:]...)
					break
				}
			}
			if len(list) == 0 {
				delete(takers, key)
			} else {
				takers[key] = list
			}
		})
	}
}

// Lookup returns the takers of key, newest first (nil when none).
func Lookup(key Key) []Taker {
	mu.Lock()
	defer mu.Unlock()
	list := takers[key]
	if len(list) == 0 {
		return nil
	}
	out := make([]Taker, len(list))
	for i, t := range list {
		out[len(list)-1-i] = t
	}
	return out
}
