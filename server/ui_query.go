package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/workflow"
)

// uiQueryTimeout bounds the wait for a query's answer from the UI, well
// inside a request's time limit.
const uiQueryTimeout = 5 * time.Second

// uiSignalKindsMax is how many received signal kinds a run's page offers.
const uiSignalKindsMax = 50

// uiStackMax bounds the stack trace a run's page shows.
const uiStackMax = 64 << 10

// uiQuery is a query sent from a run's page and its answer or error.
type uiQuery struct {
	Answer *uiPayload
	Args   string
	Error  string
	Kind   string

	// Stack is the answer of a workflow.QueryStackTrace query, as text.
	Stack          string
	StackTruncated bool
}

// uiQueryRun answers a query form: the run's page, with the answer (or the
// query's error) in its query card. A query changes nothing, so it needs
// the read role; it is a POST with the CSRF token all the same, as it makes
// a worker replay the run.
func (s *Server) uiQueryRun(w http.ResponseWriter, r *http.Request) {
	sess := s.formLogin(w, r, true)
	if sess == nil {
		return
	}
	namespace, workflowID := r.PathValue("namespace"), r.PathValue("workflow_id")
	c, runID, err := s.uiTarget(r, sess, namespace, workflowID, RoleRead)
	if err != nil {
		s.renderError(w, r, sess, namespace, err)
		return
	}
	q := &uiQuery{Kind: strings.TrimSpace(r.PostFormValue("kind")), Args: strings.TrimSpace(r.PostFormValue("args"))}
	status := http.StatusOK
	if answer, err := query(r.Context(), c, workflowID, runID, q.Kind, []byte(q.Args)); err != nil {
		apiErr := s.apiError(r, err)
		status, q.Error = apiErr.Status, apiErr.Message
	} else {
		q.Answer = newUIPayload(answer)
		if q.Kind == workflow.QueryStackTrace && json.Unmarshal(answer, &q.Stack) == nil && len(q.Stack) > uiStackMax {
			q.Stack, q.StackTruncated = strings.ToValidUTF8(q.Stack[:uiStackMax], ""), true
		}
	}
	s.renderRunPage(w, r, sess, status, "", q)
}

// query checks a query's kind and args as the API does and sends it.
func query(ctx context.Context, c *client.Client, workflowID string, runID uuid.UUID, kind string, args []byte) (json.RawMessage, error) {
	args = bytes.TrimSpace(args)
	if err := checkCall("", "query", kind, "", "", args); err != nil {
		return nil, err
	}
	// Within the request's time limit, so a slow worker is a query
	// timeout the card shows, not a request cut short.
	timeout := uiQueryTimeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(deadline)-time.Second), 100*time.Millisecond)
	}
	var answer json.RawMessage
	err := c.Query(ctx, workflowID, runID, client.RawArgs{JSON: args, KindName: kind}, &answer, &client.QueryOpts{Timeout: timeout})
	return answer, err
}

// checkForm checks a posted form's CSRF token and text, rendering the
// error page when either fails; it reports whether the form may be used.
func (s *Server) checkForm(w http.ResponseWriter, r *http.Request, sess *uiLogin, namespace string) bool {
	var err error
	if !s.checkPost(r, sess) { // parses the form
		err = newError(http.StatusForbidden, CodePermissionDenied,
			"the form's CSRF token is missing or stale, or it came from another site: reload the page and try again", nil)
	} else {
		err = checkValuesText(r.PostForm)
	}
	if err != nil {
		s.renderError(w, r, sess, namespace, err)
	}
	return err == nil
}
