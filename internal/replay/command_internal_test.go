package replay

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
)

// TestKeyOfMatchesDescribe checks that replay's comparison of commands
// (keyOf) tells apart exactly the commands that describe names apart.
func TestKeyOfMatchesDescribe(t *testing.T) {
	t.Parallel()

	commands := []history.Attributes{
		&history.ActivityScheduledAttributes{Kind: "a"},
		&history.ActivityScheduledAttributes{Kind: "a", Queue: "other"},
		&history.ActivityScheduledAttributes{Kind: "b"},
		&history.MarkerRecordedAttributes{Name: history.MarkerSideEffect, Data: []byte(`1`)},
		&history.MarkerRecordedAttributes{Name: history.MarkerSideEffect, Data: []byte(`2`)},
		&history.MarkerRecordedAttributes{Name: history.MarkerVersion, Data: []byte(`{"change_id":"c","version":1}`)},
		&history.MarkerRecordedAttributes{Name: history.MarkerVersion, Data: []byte(`{"change_id":"c","version":2}`)},
		&history.MarkerRecordedAttributes{Name: history.MarkerVersion, Data: []byte(`{"change_id":"d","version":1}`)},
		&history.MarkerRecordedAttributes{Name: history.MarkerVersion, Data: []byte(`not a version`)},
		&history.ActivityCancelRequestedAttributes{ScheduledEventID: 3},
		&history.ActivityCancelRequestedAttributes{ScheduledEventID: 4},
		&history.TimerStartedAttributes{},
		&history.TimerCanceledAttributes{StartedEventID: 3},
		&history.TimerCanceledAttributes{StartedEventID: 4},
		&history.ChildWorkflowScheduledAttributes{Kind: "a", WorkflowID: "w"},
		&history.ChildWorkflowScheduledAttributes{Kind: "a", WorkflowID: "x"},
		&history.ChildWorkflowScheduledAttributes{Kind: "b", WorkflowID: "w"},
		&history.UpdateCompletedAttributes{UpdateID: "u"},
		&history.UpdateCompletedAttributes{UpdateID: "v"},
		&history.WorkflowCompletedAttributes{Result: []byte(`1`)},
		&history.WorkflowCompletedAttributes{Result: []byte(`2`)},
		&history.WorkflowFailedAttributes{},
	}
	for _, a := range commands {
		for _, b := range commands {
			require.Equal(t, describe(a) == describe(b), keyOf(a) == keyOf(b), "%s and %s", describe(a), describe(b))
		}
	}
}
