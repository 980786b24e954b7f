package fencing

import (
	"context"
	"testing"

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
