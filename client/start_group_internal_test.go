package client

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestHasUUID: hasUUID finds a UUID's text form as String writes it, and no
// other UUID's.
func TestHasUUID(t *testing.T) {
	for range 100 {
		id, other := uuid.New(), uuid.New()
		data := []byte(`{"run_id":"` + id.String() + `","workflow_id":"w"}`)
		require.True(t, hasUUID(data, id))
		require.False(t, hasUUID(data, other))
	}
}
