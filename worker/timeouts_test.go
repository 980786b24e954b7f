package worker_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// SlowArgs configure SlowActivity.
type SlowArgs struct {
	// SlowAttempts are the attempts that stall (until their context ends).
	SlowAttempts int  `json:"slow_attempts"`
	Heartbeat    bool `json:"heartbeat"`
}

func (SlowArgs) Kind() string { return "slow" }

// SlowActivity stalls its first SlowAttempts attempts; with Heartbeat it
// heartbeats while it stalls.
type SlowActivity struct {
	activity.Defaults[SlowArgs, int]
}

func (a *SlowActivity) Execute(ctx context.Context, args SlowArgs) (int, error) {
	info, _ := activity.GetInfo(ctx)
	if info.Attempt > args.SlowAttempts {
		return info.Attempt, nil
	}
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-ticker.C:
			if args.Heartbeat {
				if err := activity.Heartbeat(ctx, nil); err != nil {
					return 0, err
				}
			}
		}
	}
}

type TimeoutsArgs struct {
	Activity SlowArgs `json:"activity"`
	// Which timeout the workflow sets on the activity.
	StartToClose     time.Duration `json:"start_to_close"`
	ScheduleToClose  time.Duration `json:"schedule_to_close"`
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout"`
	MaxAttempts      int           `json:"max_attempts"`
}

func (TimeoutsArgs) Kind() string { return "timeouts" }

type TimeoutsWorkflow struct {
	workflow.Defaults[TimeoutsArgs, string]
}

// Run reports the attempt that succeeded, or the timeout type that ended
// the activity.
func (w *TimeoutsWorkflow) Run(ctx workflow.Context, args TimeoutsArgs) (string, error) {
	attemptNum, err := workflow.ExecuteActivity[int](ctx, args.Activity, &workflow.ActivityOpts{
		HeartbeatTimeout:       args.HeartbeatTimeout,
		RetryPolicy:            &workflow.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaximumAttempts: args.MaxAttempts},
		ScheduleToCloseTimeout: args.ScheduleToClose,
		StartToCloseTimeout:    args.StartToClose,
	}).Get(ctx)
	if err != nil {
		var timeout *workflow.TimeoutError
		if errors.As(err, &timeout) {
			return "timed out: " + timeout.TimeoutType, nil
		}
		return "", err
	}
	return "succeeded on attempt " + strconv.Itoa(attemptNum), nil
}

func TestActivityTimeouts(t *testing.T) {
	t.Parallel()

	start := func(ctx context.Context, t *testing.T, b *testBundle, fetched bool) {
		t.Helper()
		config := &worker.Config{Schema: b.schema, SweepInterval: 50 * time.Millisecond}
		if fetched {
			config.MaxEagerActivities = -1
		}
		w, err := worker.New(b.pool, config)
		require.NoError(t, err)
		worker.AddWorkflow(w, &TimeoutsWorkflow{})
		worker.AddActivity(w, &SlowActivity{})
		require.NoError(t, w.Start(ctx))
		t.Cleanup(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(stopCtx))
		})
	}

	for _, tc := range []struct {
		name    string
		args    TimeoutsArgs
		fetched bool // the activity's attempts go through River's fetch
		want    string
	}{
		{
			name: "StartToCloseRetries",
			// The timeout runs from the attempt's start and covers its
			// outcome transaction too: 200 ms, then 1 s, were too tight for
			// attempt 2 on a loaded 2-CPU machine running other packages'
			// tests with -race.
			args: TimeoutsArgs{Activity: SlowArgs{SlowAttempts: 1}, StartToClose: 2 * time.Second},
			want: "succeeded on attempt 2",
		},
		{
			name: "HeartbeatTimeoutRetries",
			args: TimeoutsArgs{Activity: SlowArgs{SlowAttempts: 1}, HeartbeatTimeout: 200 * time.Millisecond},
			want: "succeeded on attempt 2",
		},
		{
			name: "HeartbeatingAttemptKeepsRunning",
			// Attempt 1 heartbeats well within its heartbeat timeout, so
			// only start-to-close (6× the heartbeat timeout) ends it.
			args: TimeoutsArgs{Activity: SlowArgs{SlowAttempts: 1, Heartbeat: true}, HeartbeatTimeout: 400 * time.Millisecond, StartToClose: 1500 * time.Millisecond},
			want: "succeeded on attempt 2",
		},
		{
			name: "HeartbeatTimeoutOnLastAttempt",
			args: TimeoutsArgs{Activity: SlowArgs{SlowAttempts: 5}, HeartbeatTimeout: 200 * time.Millisecond, MaxAttempts: 1},
			want: "timed out: Heartbeat",
		},
		{
			// The attempt's context has ended; its timeout is recorded all
			// the same.
			name: "StartToCloseOnLastAttempt",
			args: TimeoutsArgs{Activity: SlowArgs{SlowAttempts: 5}, StartToClose: 300 * time.Millisecond, MaxAttempts: 1},
			want: "timed out: StartToClose",
		},
		{
			name:    "StartToCloseOnLastFetchedAttempt",
			args:    TimeoutsArgs{Activity: SlowArgs{SlowAttempts: 5}, StartToClose: 300 * time.Millisecond, MaxAttempts: 1},
			fetched: true,
			want:    "timed out: StartToClose",
		},
		{
			name: "ScheduleToCloseEndsAllAttempts",
			args: TimeoutsArgs{Activity: SlowArgs{SlowAttempts: 100}, ScheduleToClose: 500 * time.Millisecond, StartToClose: time.Hour},
			want: "timed out: ScheduleToClose",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := setup(ctx, t)
			start(ctx, t, b, tc.fetched)

			run, err := b.client.Start(ctx, tc.args, nil)
			require.NoError(t, err)
			got, err := getWithin[string](ctx, t, run)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			requireHistoryWellFormed(ctx, t, b, run)
		})
	}
}
