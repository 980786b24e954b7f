package server

import (
	"net/http"
	"time"

	"github.com/google/uuid"
)

// WorkerListResponse is the body of GET
// /api/v1/namespaces/{namespace}/workers.
type WorkerListResponse struct {
	// Workers are the namespace's live workers, newest first.
	Workers []*WorkerJSON `json:"workers"`
}

// WorkerJSON is a client.WorkerInfo in a WorkerListResponse.
type WorkerJSON struct {
	ActivityKinds []string  `json:"activity_kinds"`
	ExpiresAt     time.Time `json:"expires_at"`
	ID            uuid.UUID `json:"id"`
	Identity      string    `json:"identity"`
	LastSeenAt    time.Time `json:"last_seen_at"`
	Namespace     string    `json:"namespace"`
	Queues        []string  `json:"queues"`
	StartedAt     time.Time `json:"started_at"`
	WorkflowKinds []string  `json:"workflow_kinds"`
}

func (s *Server) handleListWorkers(r *http.Request) (int, any, error) {
	c, err := s.client(r.PathValue("namespace"))
	if err != nil {
		return 0, nil, err
	}
	workers, err := c.ListWorkers(r.Context())
	if err != nil {
		return 0, nil, err
	}
	resp := &WorkerListResponse{Workers: []*WorkerJSON{}}
	for _, w := range workers {
		resp.Workers = append(resp.Workers, (*WorkerJSON)(w))
	}
	return http.StatusOK, resp, nil
}

// TaskWorkersJSON is a client.TaskWorkers in a DescribeResponse.
type TaskWorkersJSON struct {
	// OnQueue counts the live workers polling the run's queue.
	OnQueue int `json:"on_queue"`
	// Problem says in a sentence why no live worker serves the run; absent
	// when one does.
	Problem string `json:"problem,omitempty"`
	// Serving counts the live workers polling the queue with the run's
	// workflow kind registered.
	Serving int `json:"serving"`
}

// TaskFailureJSON is a client.TaskFailure in a DescribeResponse.
type TaskFailureJSON struct {
	At            time.Time  `json:"at"`
	Attempt       int        `json:"attempt"`
	JobID         int64      `json:"job_id"`
	Message       string     `json:"message"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	Stack         string     `json:"stack,omitempty"`
}

// RunRefJSON names a run in a DescribeResponse.
type RunRefJSON struct {
	RunID      uuid.UUID `json:"run_id"`
	WorkflowID string    `json:"workflow_id,omitempty"`
}

// PendingTimerJSON is a client.PendingTimer in a DescribeResponse.
type PendingTimerJSON struct {
	FireAt         time.Time `json:"fire_at"`
	StartedEventID int64     `json:"started_event_id"`
}
