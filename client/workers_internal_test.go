package client

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTaskWorkersProblem(t *testing.T) {
	t.Parallel()
	require.Empty(t, (*TaskWorkers)(nil).Problem())
	require.Empty(t, (&TaskWorkers{Kind: "k", Namespace: "billing", Queue: "q", OnQueue: 2, Serving: 1}).Problem())
	require.Equal(t, `No live worker serves queue "q" in namespace billing: the run waits until a worker that registers workflow k polls it.`,
		(&TaskWorkers{Kind: "k", Namespace: "billing", Queue: "q"}).Problem())
	require.Equal(t, `2 live workers serve queue "q", but none registers workflow k: the run waits until one does.`,
		(&TaskWorkers{Kind: "k", Namespace: NamespaceDefault, Queue: "q", OnQueue: 2}).Problem())
}
