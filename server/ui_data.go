package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/store"
	"github.com/weirhq/weir/internal/task"
)

// uiPayload is a payload shown on a page: indented JSON, the start of the
// raw JSON when it is too large or too deeply nested to indent (the page
// links to the whole), or a note that it is not JSON (an encrypting codec,
// say).
type uiPayload struct {
	Binary    bool
	Size      int
	Text      string
	Truncated bool // Text is raw JSON, cut at uiRawPreviewBytes
}

// Rendering bounds: indenting JSON grows it by the nesting depth on every
// line, so a page indents only JSON up to a size and a depth, and shows the
// start of anything larger raw.
const (
	uiPayloadMaxBytes    = 64 << 10  // largest args or result indented
	uiAttributesMaxBytes = 8 << 10   // largest event attributes indented
	uiIndentMaxDepth     = 20        // deepest JSON indented
	uiIndentedMaxBytes   = 256 << 10 // largest indented text shown
	uiRawPreviewBytes    = 4 << 10   // raw JSON shown past the bounds
)

func newUIPayload(data []byte) *uiPayload {
	if data == nil {
		return nil
	}
	p := &uiPayload{Size: len(data)}
	if !json.Valid(data) {
		p.Binary = true
		return p
	}
	p.Text, p.Truncated = boundedIndent(data, uiPayloadMaxBytes)
	return p
}

// boundedIndent indents valid JSON data of at most maxBytes and
// uiIndentMaxDepth levels; past either bound, or when the indented text would
// exceed uiIndentedMaxBytes, it returns the start of data, raw, and true.
func boundedIndent(data []byte, maxBytes int) (string, bool) {
	if len(data) <= maxBytes && jsonDepth(data) <= uiIndentMaxDepth {
		var buf bytes.Buffer
		if json.Indent(&buf, data, "", "  ") == nil && buf.Len() <= uiIndentedMaxBytes {
			return buf.String(), false
		}
	}
	preview := data[:min(len(data), uiRawPreviewBytes)]
	return strings.ToValidUTF8(string(preview), ""), len(preview) < len(data)
}

// jsonDepth is the deepest nesting of arrays and objects in JSON data.
func jsonDepth(data []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// runPayload reads a run's args or result (which) as stored, checking that
// the run is the workflow's in namespace; nil when the run has none.
func (s *Server) runPayload(ctx context.Context, namespace, workflowID string, runID uuid.UUID, which string) ([]byte, error) {
	if which != "args" && which != "result" {
		return nil, newError(http.StatusNotFound, CodeNotFound, "no such payload: "+which, nil)
	}
	p, err := s.store.GetRunPayloads(ctx, s.pool, runID)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (p.Namespace != namespace || p.WorkflowID != workflowID)) {
		return nil, &client.RunNotFoundError{RunID: runID, WorkflowID: workflowID}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the %s of run %s: %w", which, runID, err)
	}
	if which == "args" {
		return p.Args, nil
	}
	return p.Result, nil
}

// uiGenerationsMax bounds the generations a run's page lists.
const uiGenerationsMax = 100

// uiAttempt is one attempt of one of a run's River jobs: a finished one from
// the fencing attempt log, or the one running now.
type uiAttempt store.JobAttempt

// Fenced reports whether a newer attempt replaced this one while it ran: a
// stale attempt whose writes the fencing driver refuses.
func (a *uiAttempt) Fenced() bool { return a.Outcome == "superseded" }

// Label says how the attempt ended, in the UI's words: the attempt log
// records the state it left the job in, so a job back to available,
// retryable or scheduled means the attempt errored and will be retried.
func (a *uiAttempt) Label() string {
	switch a.Outcome {
	case "superseded":
		return "fenced · stale"
	case "available", "retryable":
		return "errored · retried"
	case "scheduled":
		if a.Error != "" {
			return "errored · retried"
		}
		return "snoozed"
	case "discarded":
		return "errored · gave up"
	}
	return a.Outcome
}

// Class is the attempt's badge class.
func (a *uiAttempt) Class() string {
	switch a.Label() {
	case "fenced · stale", "errored · gave up":
		return "state-failed"
	case "errored · retried":
		return "job-retryable"
	}
	return "job-" + a.Outcome
}

// uiAttemptsMax bounds the attempts a run's page lists.
const uiAttemptsMax = 500

// errNoFencing is the attempts section's note when the fencing migration
// line is not installed.
var errNoFencing = errors.New("the fencing migration line is not installed, so there is no attempt log")

// attempts lists the attempts of a run's jobs, oldest first: its workflow
// tasks (River args {"run_id": …}) and its activities (River metadata
// {"weir": {"run_id": …}}), found through River's GIN indexes on args and
// metadata.
func (s *Server) attempts(ctx context.Context, runID uuid.UUID) ([]*uiAttempt, error) {
	args := fmt.Sprintf(`{"run_id": %q}`, runID)
	rows, err := s.store.JobAttempts(ctx, s.pool, store.JobAttemptsParams{
		Metadata: []byte(`{"weir": ` + args + `}`), Args: []byte(args), TaskKindPrefix: task.KindPrefix, Limit: uiAttemptsMax,
	})
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703") {
		return nil, errNoFencing // undefined table or column
	}
	if err != nil {
		return nil, fmt.Errorf("reading the attempt log of run %s: %w", runID, err)
	}
	out := make([]*uiAttempt, len(rows))
	for i, a := range rows {
		out[i] = (*uiAttempt)(a)
	}
	return out, nil
}

// knownNamespaces are the namespaces the header offers: the token's own, or
// (for a token of every namespace) default and those registered in
// weir_namespace, plus current.
func (s *Server) knownNamespaces(r *http.Request, sess *uiLogin, current string) []string {
	var out []string
	if sess.allNamespaces() {
		out = append(out, "default")
		if more, err := s.store.NamespaceNames(r.Context(), s.pool, 200); err == nil {
			out = append(out, more...)
		}
	} else {
		out = append(out, sess.token.Namespaces...)
	}
	if current != "" {
		out = append(out, current)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// uiEvent is a history event on a run's page: the event, a one-line summary
// and its attributes indented.
type uiEvent struct {
	*client.Event
	Attributes string
	// AttributesTruncated: Attributes are the start of the raw JSON (see
	// boundedIndent); the API's history has them whole.
	AttributesTruncated bool
	Category            string // css class: workflow, activity, timer, signal, marker, update, failure
	Offset              string // since the run was created
	Summary             string
}

// describeEvents summarizes events for the timeline.
func describeEvents(events []*client.Event, start time.Time) []*uiEvent {
	out := make([]*uiEvent, 0, len(events))
	for _, e := range events {
		ue := &uiEvent{Event: e, Offset: "+" + humanDuration(e.Time.Sub(start))}
		if json.Valid(e.Attributes) {
			ue.Attributes, ue.AttributesTruncated = boundedIndent(e.Attributes, uiAttributesMaxBytes)
		}
		var attrs struct {
			Attempt          int             `json:"attempt"`
			Duration         json.RawMessage `json:"duration"`
			Failure          *client.Failure `json:"failure"`
			Kind             string          `json:"kind"`
			Name             string          `json:"name"`
			Now              time.Time       `json:"now"`
			Queue            string          `json:"queue"`
			Reason           string          `json:"reason"`
			ScheduledEventID int64           `json:"scheduled_event_id"`
			StartedEventID   int64           `json:"started_event_id"`
			TimeoutType      string          `json:"timeout_type"`
			UpdateID         string          `json:"update_id"`
		}
		_ = json.Unmarshal(e.Attributes, &attrs) // best effort: the raw attributes are shown too
		typ := string(e.Type)
		failure := ""
		if attrs.Failure != nil {
			failure = attrs.Failure.Error() // with its causes: a wrapping error's message is its own words alone
		}
		var parts []string
		for _, part := range []struct {
			ok   bool
			text string
		}{
			{attrs.Kind != "", attrs.Kind},
			{attrs.Queue != "", "queue " + attrs.Queue},
			{attrs.ScheduledEventID > 0, fmt.Sprintf("for #%d", attrs.ScheduledEventID)},
			{attrs.StartedEventID > 0, fmt.Sprintf("timer #%d", attrs.StartedEventID)},
			{attrs.Attempt > 1 || (attrs.Attempt == 1 && strings.HasPrefix(typ, "Activity")), fmt.Sprintf("attempt %d", attrs.Attempt)},
			{attrs.TimeoutType != "", attrs.TimeoutType + " timeout"},
			{len(attrs.Duration) > 0, strings.Trim(string(attrs.Duration), `"`)},
			{attrs.Name != "", attrs.Name},
			{attrs.UpdateID != "", "update " + attrs.UpdateID},
			{attrs.Reason != "", strconv.Quote(attrs.Reason)},
			{failure != "", failure},
		} {
			if part.ok {
				parts = append(parts, part.text)
			}
		}
		ue.Summary = strings.Join(parts, " · ")
		switch {
		case strings.HasSuffix(typ, "Failed") || strings.HasSuffix(typ, "TimedOut") || typ == "WorkflowCanceled":
			ue.Category = "failure"
		case strings.HasPrefix(typ, "Activity"):
			ue.Category = "activity"
		case strings.HasPrefix(typ, "Timer"):
			ue.Category = "timer"
		case strings.HasPrefix(typ, "Signal") || typ == "CancelRequested":
			ue.Category = "signal"
		case strings.HasPrefix(typ, "Update"):
			ue.Category = "update"
		case strings.HasPrefix(typ, "Marker"):
			ue.Category = "marker"
		case typ == "WorkflowTaskStarted":
			ue.Category = "task"
		default:
			ue.Category = "workflow"
		}
		out = append(out, ue)
	}
	return out
}
