package worker_test

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/activity"
	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/worker"
	"github.com/weirhq/weir/workflow"
)

// hungFor is how long a hung attempt blocks, ignoring its context.
const hungFor = 12 * time.Second

// hungProbe is what a test learns of HungActivity's attempts.
type hungProbe struct {
	beat     chan time.Time // when attempt 1 stopped heartbeating (or started, if it never beats)
	returned chan struct{}  // attempt 1 returned
	retried  chan time.Time // when attempt 2 started
}

var hungProbes sync.Map // by HungArgs.Key

type HungArgs struct {
	Key string `json:"key"`
	// Beat makes attempt 1 heartbeat once before it hangs.
	Beat bool `json:"beat"`
	// Block is how long attempt 1 blocks, ignoring its context.
	Block time.Duration `json:"block"`
}

func (HungArgs) Kind() string { return "hung" }

// HungActivity's attempt 1 heartbeats once (with Beat), then blocks for
// Block ignoring its context, as code stuck in a call without a deadline
// would, then returns a result; later attempts return at once.
type HungActivity struct {
	activity.Defaults[HungArgs, string]
}

func (a *HungActivity) Execute(ctx context.Context, args HungArgs) (string, error) {
	info, _ := activity.GetInfo(ctx)
	value, _ := hungProbes.Load(args.Key)
	probe := value.(*hungProbe)
	if info.Attempt > 1 {
		select {
		case probe.retried <- time.Now():
		default:
		}
		return fmt.Sprintf("attempt %d", info.Attempt), nil
	}
	if args.Beat {
		if err := activity.Heartbeat(ctx, nil); err != nil {
			return "", err
		}
	}
	probe.beat <- time.Now()
	time.Sleep(args.Block) //nolint:forbidigo // hangs, deaf to its context, on purpose
	close(probe.returned)
	return "attempt 1", nil
}

type HungWorkflowArgs struct {
	Activity         HungArgs      `json:"activity"`
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout"`
	StartToClose     time.Duration `json:"start_to_close"`
}

func (HungWorkflowArgs) Kind() string { return "hung_workflow" }

type HungWorkflow struct {
	workflow.Defaults[HungWorkflowArgs, string]
}

func (w *HungWorkflow) Run(ctx workflow.Context, args HungWorkflowArgs) (string, error) {
	return workflow.ExecuteActivity[string](ctx, args.Activity, &workflow.ActivityOpts{
		HeartbeatTimeout:    args.HeartbeatTimeout,
		RetryPolicy:         &workflow.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaximumAttempts: 5},
		StartToCloseTimeout: args.StartToClose,
	}).Get(ctx)
}

// TestHungActivityRecovered: an activity attempt that hangs ignoring its
// context is recovered once it passes its own limits, not when its code
// returns: its job runs again within the limit plus the fencing grace plus
// one reaper interval (plus slack for a loaded machine), and its late
// completion is refused by fencing. Before, the lease keeper renewed the
// hung attempt's lease for as long as its process lived and River's
// deadline allowed, so the job ran again only when the attempt's code
// returned, or River's job timeout plus its stuck threshold plus a LeaseTTL
// later.
func TestHungActivityRecovered(t *testing.T) {
	t.Parallel()
	const (
		// longLease outlasts the hung attempt's limits and the bound on its
		// recovery by far: the lease's own expiry cannot be what recovers it.
		longLease      = 10 * time.Second
		reaperInterval = 200 * time.Millisecond
		slack          = 3 * time.Second
	)
	for _, tc := range []struct {
		name    string
		fencing *fencing.Config
		args    HungWorkflowArgs
		limit   time.Duration // the limit the hung attempt passes, from its last heartbeat (or start)
	}{
		{
			// The case: a heartbeat timeout far shorter than the lease.
			name:    "HeartbeatTimeout",
			fencing: &fencing.Config{LeaseTTL: longLease, ReaperInterval: reaperInterval},
			args:    HungWorkflowArgs{Activity: HungArgs{Beat: true, Block: hungFor}, HeartbeatTimeout: time.Second},
			limit:   time.Second,
		},
		{
			// No heartbeat timeout: an attempt that heartbeat once and then
			// stops for longer than its lease (activity.Heartbeat's doc).
			name:    "StoppedHeartbeating",
			fencing: &fencing.Config{LeaseTTL: 2 * time.Second, ReaperInterval: reaperInterval},
			args:    HungWorkflowArgs{Activity: HungArgs{Beat: true, Block: hungFor}},
			limit:   2 * time.Second,
		},
		{
			// A blocked attempt that never heartbeats is recovered after
			// its start-to-close timeout (1 minute by default), not after
			// it plus River's stuck threshold plus a LeaseTTL.
			name:    "StartToClose",
			fencing: &fencing.Config{LeaseTTL: longLease, ReaperInterval: reaperInterval},
			args:    HungWorkflowArgs{Activity: HungArgs{Block: hungFor}, StartToClose: time.Second},
			limit:   time.Second,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b := setup(ctx, t)
			waitPastRestartGrace(ctx, t, b, cmp.Or(tc.fencing.LeaseTTL, fencing.LeaseTTLDefault))
			w, err := worker.New(b.pool, &worker.Config{Fencing: tc.fencing, Schema: b.schema, SweepInterval: 50 * time.Millisecond})
			require.NoError(t, err)
			worker.AddWorkflow(w, &HungWorkflow{})
			worker.AddActivity(w, &HungActivity{})
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() {
				stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
				defer cancel()
				_ = w.Stop(stopCtx)
			})

			probe := &hungProbe{beat: make(chan time.Time, 1), returned: make(chan struct{}), retried: make(chan time.Time, 1)}
			tc.args.Activity.Key = t.Name()
			hungProbes.Store(tc.args.Activity.Key, probe)
			run, err := b.client.Start(ctx, tc.args, nil)
			require.NoError(t, err)

			beat := recvWithin(t, probe.beat, time.Minute, "attempt 1 started")
			retried := recvWithin(t, probe.retried, hungFor, "attempt 2 started while attempt 1 hung")
			took := retried.Sub(beat)
			bound := tc.limit + fencing.AttemptLimitGrace + reaperInterval + slack
			require.Less(t, took, bound, "attempt 2 started %s after attempt 1's last heartbeat", took)
			t.Logf("attempt 2 started %s after attempt 1's last heartbeat (bound %s)", took, bound)

			got, err := getWithin[string](ctx, t, run)
			require.NoError(t, err)
			require.Equal(t, "attempt 2", got)

			// Attempt 1 returns a result late: fencing refuses it.
			before := w.FencingStats().StaleWritesRejected
			recvWithin(t, probe.returned, hungFor+10*time.Second, "attempt 1 returned")
			requireEventually(t, func() bool { return w.FencingStats().StaleWritesRejected > before })
			page, err := b.client.History(ctx, run.WorkflowID, run.RunID, nil)
			require.NoError(t, err)
			completed := 0
			for _, e := range page.Events {
				if e.Type == client.EventActivityCompleted {
					completed++
				}
			}
			require.Equal(t, 1, completed, "one completion, attempt 2's")
			requireHistoryWellFormed(ctx, t, b, run)
		})
	}
}

// waitPastRestartGrace waits until the server has been up for longer than
// ttl: until then the fencing layer gives every lease a restart's grace (a
// freshly started test cluster looks like a restarted server).
func waitPastRestartGrace(ctx context.Context, t *testing.T, b *testBundle, ttl time.Duration) {
	t.Helper()
	requireEventually(t, func() bool {
		var past bool
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT greatest(pg_postmaster_start_time(), pg_stat_get_bgwriter_stat_reset_time()) + $1::interval < now()",
			ttl).Scan(&past))
		return past
	})
}

// recvWithin receives from ch within d, or fails the test saying what it
// waited for.
func recvWithin[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting until %s", d, what)
		var zero T
		return zero
	}
}
