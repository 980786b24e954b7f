package fencing

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

// heldCheck answers the fencing check with installed, once release is
// closed (when it is not nil).
type heldCheck struct {
	installed bool
	asked     chan struct{}
	release   chan struct{}
}

func (h *heldCheck) QueryRow(context.Context, string, ...any) riverdriver.Row {
	if h.asked != nil {
		close(h.asked)
	}
	if h.release != nil {
		<-h.release
	}
	return checkRow{h.installed}
}

type checkRow struct{ installed bool }

func (r checkRow) Scan(dest ...any) error {
	*dest[0].(*bool) = r.installed
	return nil
}

// TestIsFencedKeepsTheNewerCheck: a check for the fencing migration that
// began before it and answers after a later check saw it installed does
// not put the older answer back (a fetch would then go unfenced for up to
// HeartbeatInterval after readiness reported fencing active:
// TestRollout/FencedClientAcrossMigration failed so in .ci/run).
func TestIsFencedKeepsTheNewerCheck(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	driver, err := NewDriver(dbtest.Pool(ctx, t), nil)
	require.NoError(t, err)
	p := driver.pilot

	old := &heldCheck{asked: make(chan struct{}), release: make(chan struct{})}
	answered := make(chan bool)
	go func() {
		fenced, err := p.isFenced(ctx, old, "rollout")
		if err != nil {
			t.Error(err)
		}
		answered <- fenced
	}()
	<-old.asked // the migration commits now
	fenced, err := p.isFenced(ctx, &heldCheck{installed: true}, "rollout")
	require.NoError(t, err)
	require.True(t, fenced)
	close(old.release)
	require.True(t, <-answered, "the older check returns the newer answer")
	fenced, err = p.isFenced(ctx, &heldCheck{}, "rollout")
	require.NoError(t, err)
	require.True(t, fenced, "the cache holds the newer answer")
}

// TestExtractProofAlone: updates that hold only the proof (every job that
// sets no metadata) give the proof and nothing to merge without decoding
// JSON (decision 0025); updates with more keys give the proof and the
// rest.
func TestExtractProofAlone(t *testing.T) { //nolint:paralleltest // AllocsPerRun
	want := &proof{Attempt: 3, AttemptedAt: time.UnixMicro(1_700_000_000_123_456).UTC(), Token: "0123456789abcdef"}
	alone := []byte(`{"` + proofKey + `":"` + want.encode() + `"}`)

	pr, rest, doMerge, err := extractProof(alone, true)
	require.NoError(t, err)
	require.Equal(t, want, pr)
	require.Nil(t, rest)
	require.False(t, doMerge)
	// The proof and its token: a JSON decoding makes a dozen.
	require.LessOrEqual(t, testing.AllocsPerRun(100, func() { _, _, _, _ = extractProof(alone, true) }), 2.0)

	mixed := []byte(`{"a":1,"` + proofKey + `":"` + want.encode() + `","z":"\"q"}`)
	pr, rest, doMerge, err = extractProof(mixed, true)
	require.NoError(t, err)
	require.Equal(t, want, pr)
	require.JSONEq(t, `{"a":1,"z":"\"q"}`, string(rest))
	require.True(t, doMerge)
}
