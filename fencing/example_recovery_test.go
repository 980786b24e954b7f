package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/weirhq/weir/fencing"
)

type scanArgs struct {
	Pages int `json:"pages"`
}

func (scanArgs) Kind() string { return "scan" }

// scanWorker calls a service that can hang, deaf to its context.
type scanWorker struct {
	river.WorkerDefaults[scanArgs]
	scanPage func(page int)
}

// Work tells fencing its limits first: if a page hangs for more than 30
// seconds (or the whole scan for more than 5 minutes), the job is recovered
// and runs again elsewhere, and this attempt's later writes are refused,
// while its process lives on.
func (w *scanWorker) Work(ctx context.Context, job *river.Job[scanArgs]) error {
	err := fencing.LimitAttempt(ctx, fencing.AttemptLimits{Timeout: 5 * time.Minute, HeartbeatTimeout: 30 * time.Second})
	if err != nil && !errors.Is(err, fencing.ErrNoLease) { // ErrNoLease: a client without fencing
		return err
	}
	for page := range job.Args.Pages {
		if err := fencing.Heartbeat(ctx, map[string]int{"page": page}); err != nil && !errors.Is(err, fencing.ErrNoLease) {
			return err
		}
		w.scanPage(page)
	}
	return nil
}

// Outside a job run by a fenced client there is no attempt to limit.
func ExampleLimitAttempt() {
	worker := &scanWorker{scanPage: func(int) {}}
	err := worker.Work(context.Background(), &river.Job[scanArgs]{Args: scanArgs{Pages: 3}})
	fmt.Println(err)
	err = fencing.LimitAttempt(context.Background(), fencing.AttemptLimits{Timeout: time.Minute})
	fmt.Println(errors.Is(err, fencing.ErrNoLease))
	// Output:
	// <nil>
	// true
}

// Recovering the jobs a plain River fleet left running needs an age limit:
// the operator's word that no attempt that old still runs.
func ExampleDriver_RecoverUnleased() {
	driver, err := fencing.NewDriver(nil, nil)
	if err != nil {
		panic(err)
	}
	_, err = driver.RecoverUnleased(context.Background(), &fencing.RecoverUnleasedOpts{Schema: "app"})
	var refused *fencing.RecoverRefusedError
	fmt.Println(errors.Is(err, fencing.ErrRecoverRefused), errors.As(err, &refused) && refused.Schema == "app")
	// With a pool: driver.RecoverUnleased(ctx, &fencing.RecoverUnleasedOpts{OlderThan: 10 * time.Minute})
	// returns how many jobs went back to available, were discarded or cancelled.
	// Output:
	// true true
}
