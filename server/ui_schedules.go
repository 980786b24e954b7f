package server

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/weirhq/weir/client"
)

// uiScheduleRunsLimit is how many of a schedule's recent runs its page
// lists; uiBackfillsLimit how many of its durable backfills.
const (
	uiScheduleRunsLimit = 20
	uiBackfillsLimit    = 20
)

// uiSchedulesPage is the list of a namespace's schedules.
type uiSchedulesPage struct {
	uiBase
	Schedules []*client.Schedule
}

func (s *Server) uiSchedules(w http.ResponseWriter, r *http.Request) {
	uiNamespaceList(s, w, r, "schedules", "Schedules", (*client.Client).ListSchedules, func(base uiBase, schedules []*client.Schedule) any {
		return &uiSchedulesPage{uiBase: base, Schedules: schedules}
	})
}

// schedulesURL is the schedules page of namespace.
func schedulesURL(namespace string) string {
	return uiPrefix + "/namespaces/" + url.PathEscape(namespace) + "/schedules"
}

// scheduleURL is the page of a schedule.
func scheduleURL(namespace, id string) string {
	return schedulesURL(namespace) + "/" + url.PathEscape(id)
}

// uiSchedulePage is the data of a schedule's page.
type uiSchedulePage struct {
	uiBase
	// Backfills are the schedule's newest durable backfills; MoreBackfills
	// says there are older ones the page leaves out.
	Backfills     []*client.Backfill
	MoreBackfills bool
	// CanAct reports whether the session may pause, resume, trigger and
	// backfill (the API's schedule actions need admin).
	CanAct    bool
	Flash     string
	FormError string
	Runs      []*client.RunSummary
	Schedule  *client.Schedule
	URL       string
}

// uiScheduleFlashes are the messages a redirect after a schedule action may
// show; the query names one, so no text from the request reaches the page.
var uiScheduleFlashes = map[string]string{
	"pause":    "Schedule paused: it starts no run until resumed.",
	"resume":   "Schedule resumed: due times missed while paused are skipped.",
	"trigger":  "Run started; it is listed under Recent runs.",
	"backfill": "Backfill started: its runs are listed under Recent runs.",
	"durable":  "The range is long: weir's workers start its runs in batches (see Backfills).",
}

// uiScheduleTarget checks the session's access to namespace with role need
// and the schedule ID, and returns the namespace's client.
func (s *Server) uiScheduleTarget(sess *uiLogin, namespace, id string, need Role) (*client.Client, error) {
	if err := s.uiNamespace(sess, namespace, need); err != nil {
		return nil, err
	}
	if err := checkScheduleID(id); err != nil {
		return nil, err
	}
	return s.client(namespace)
}

func (s *Server) uiSchedule(w http.ResponseWriter, r *http.Request) {
	sess := s.requireLogin(w, r)
	if sess == nil {
		return
	}
	s.renderSchedule(w, r, sess, http.StatusOK, "")
}

// renderSchedule renders a schedule's page; formError, if set, is shown
// above the actions.
func (s *Server) renderSchedule(w http.ResponseWriter, r *http.Request, sess *uiLogin, status int, formError string) {
	page, err := s.schedulePage(r, sess, formError)
	if err != nil {
		s.renderError(w, r, sess, r.PathValue("namespace"), err)
		return
	}
	s.render(w, r, status, "schedule", page)
}

func (s *Server) schedulePage(r *http.Request, sess *uiLogin, formError string) (*uiSchedulePage, error) {
	namespace, id := r.PathValue("namespace"), r.PathValue("schedule_id")
	c, err := s.uiScheduleTarget(sess, namespace, id, RoleRead)
	if err != nil {
		return nil, err
	}
	sched, err := c.DescribeSchedule(r.Context(), id)
	if err != nil {
		return nil, err
	}
	runs, err := scheduleRuns(r, c, id)
	if err != nil {
		return nil, err
	}
	backfills, err := c.ListBackfills(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return &uiSchedulePage{
		uiBase:        s.base(r, sess, namespace, id+" · schedule"),
		Backfills:     backfills[:min(len(backfills), uiBackfillsLimit)],
		MoreBackfills: len(backfills) > uiBackfillsLimit,
		CanAct:        sess.permit(namespace, RoleAdmin) == nil,
		Flash:         uiScheduleFlashes[r.URL.Query().Get("flash")],
		FormError:     formError,
		Runs:          runs,
		Schedule:      sched,
		URL:           scheduleURL(namespace, id),
	}, nil
}

// scheduleRuns returns the schedule's recent runs, newest first: those
// whose workflow ID is the schedule's ID, a slash and a due time or a
// manual start's name (client.ScheduleWorkflowID, TriggerSchedule). A run
// of a schedule whose ID extends this one's ("id/x") is not one of them.
func scheduleRuns(r *http.Request, c *client.Client, id string) ([]*client.RunSummary, error) {
	res, err := c.List(r.Context(), &client.ListOpts{WorkflowIDPrefix: id + "/", Limit: uiScheduleRunsLimit})
	if err != nil {
		return nil, err
	}
	var runs []*client.RunSummary
	for _, run := range res.Runs {
		if scheduleOf(run.WorkflowID) == id {
			runs = append(runs, run)
		}
	}
	return runs, nil
}

// scheduleOf returns the ID of the schedule whose run has workflowID, or ""
// when the ID has not the shape of a schedule's run.
func scheduleOf(workflowID string) string {
	i := strings.LastIndexByte(workflowID, '/')
	if i <= 0 {
		return ""
	}
	rest := workflowID[i+1:]
	if _, err := time.Parse(time.RFC3339Nano, rest); err != nil && !strings.HasPrefix(rest, "manual-") {
		return ""
	}
	return workflowID[:i]
}

func (s *Server) uiScheduleAction(w http.ResponseWriter, r *http.Request) {
	namespace, id, action := r.PathValue("namespace"), r.PathValue("schedule_id"), r.PathValue("action")
	_, known := uiScheduleFlashes[action]
	sess := s.formLogin(w, r, known && action != "durable")
	if sess == nil {
		return
	}
	c, err := s.uiScheduleTarget(sess, namespace, id, RoleAdmin)
	if err != nil {
		s.renderError(w, r, sess, namespace, err)
		return
	}
	flash, err := scheduleAction(r, c, id, action)
	s.actionDone(w, r, sess, err, scheduleURL(namespace, id)+"?flash="+flash, func(status int, formError string) {
		s.renderSchedule(w, r, sess, status, formError)
	})
}

// scheduleAction runs a schedule action of the UI and returns the flash to
// show after it.
func scheduleAction(r *http.Request, c *client.Client, id, action string) (string, error) {
	ctx := r.Context()
	var err error
	switch action {
	case "pause":
		_, err = c.PauseSchedule(ctx, id)
	case "resume":
		_, err = c.ResumeSchedule(ctx, id)
	case "trigger":
		_, err = c.TriggerSchedule(ctx, id)
	case "backfill":
		var start, end time.Time
		if start, err = parseUITime("start", r.PostFormValue("start")); err != nil {
			return "", err
		}
		if end, err = parseUITime("end", r.PostFormValue("end")); err != nil {
			return "", err
		}
		if start.IsZero() || end.IsZero() || !start.Before(end) {
			return "", invalidArgument("end", "a backfill needs a start and a later end")
		}
		var bf *client.Backfill
		if _, bf, err = backfill(ctx, c, id, start, end); err == nil && bf != nil {
			return "durable", nil
		}
	}
	return action, err
}

// uiRunSchedule is the schedule link of a run's page.
type uiRunSchedule struct {
	ID  string
	URL string
}

// scheduleLink returns the link to the schedule that started the run of
// workflowID, or nil when none did (or it was deleted since).
func scheduleLink(r *http.Request, c *client.Client, namespace, workflowID string) (*uiRunSchedule, error) {
	id := scheduleOf(workflowID)
	if id == "" || len(id) > 255 {
		return nil, nil
	}
	_, err := c.DescribeSchedule(r.Context(), id)
	switch {
	case errors.Is(err, client.ErrScheduleNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &uiRunSchedule{ID: id, URL: scheduleURL(namespace, id)}, nil
}
