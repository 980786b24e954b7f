package history

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryPolicyDelay(t *testing.T) {
	t.Parallel()
	policy := &RetryPolicy{InitialInterval: Duration(time.Second), BackoffCoefficient: 2, MaximumInterval: Duration(5 * time.Second)}
	for attempt, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 60: 5 * time.Second} {
		require.Equal(t, want, policy.Delay(attempt), "attempt %d", attempt)
	}
	flat := &RetryPolicy{InitialInterval: Duration(time.Second), BackoffCoefficient: 0.5}
	require.Equal(t, time.Second, flat.Delay(3), "a coefficient below 1 counts as 1")
}
