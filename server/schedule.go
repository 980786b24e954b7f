package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/internal/schedule"
)

// ScheduleRequest is the body of POST /api/v1/namespaces/{namespace}/schedules.
type ScheduleRequest struct {
	// Args are the args of every run the schedule starts, as JSON.
	Args json.RawMessage `json:"args,omitempty"`

	// Cron is a five-field cron expression or a descriptor ("@hourly";
	// "@every" takes whole seconds, at least 1s); the zone is TimeZone, not
	// a TZ= prefix. Give Cron or Every.
	Cron string `json:"cron,omitempty"`

	// Every is a fixed interval as a Go duration ("90s"), counted from the
	// schedule's creation; give Cron or Every.
	Every string `json:"every,omitempty"`

	// Jitter delays each start by up to this much, as a Go duration.
	// Optional.
	Jitter string `json:"jitter,omitempty"`

	// Kind is the workflow kind of the runs. Required.
	Kind string `json:"kind"`

	// Note is for people. Optional.
	Note string `json:"note,omitempty"`

	// OverlapPolicy is skip (the default), buffer_one or allow_all.
	OverlapPolicy string `json:"overlap_policy,omitempty"`

	// Paused creates the schedule paused.
	Paused bool `json:"paused,omitempty"`

	// Queue is the River queue of the runs' tasks. Optional.
	Queue string `json:"queue,omitempty"`

	// ScheduleID names the schedule in the namespace. Required.
	ScheduleID string `json:"schedule_id"`

	// TimeZone is the IANA zone cron fields are read in, not Local.
	// Defaults to UTC.
	TimeZone string `json:"time_zone,omitempty"`
}

// ScheduleUpdateRequest is the body of PATCH …/schedules/{schedule_id};
// absent fields stay as they are.
type ScheduleUpdateRequest struct {
	// Note replaces the note.
	Note *string `json:"note,omitempty"`

	// OverlapPolicy replaces the overlap policy.
	OverlapPolicy *string `json:"overlap_policy,omitempty"`

	// Paused pauses (true) or resumes (false) the schedule. Resuming skips
	// the due times that passed meanwhile (a backfill starts them).
	Paused *bool `json:"paused,omitempty"`
}

// BackfillRequest is the body of POST …/schedules/{schedule_id}/backfill.
type BackfillRequest struct {
	// End is the end of the range (exclusive), an RFC 3339 time. Required.
	End string `json:"end"`

	// Start is the start of the range (inclusive), an RFC 3339 time.
	// Required.
	Start string `json:"start"`
}

// ScheduleJSON is a schedule as the API returns it.
type ScheduleJSON struct {
	CreatedAt time.Time `json:"created_at"`
	Cron      string    `json:"cron,omitempty"`
	// Every and Jitter are Go durations ("1h0m0s").
	Every          string     `json:"every,omitempty"`
	Jitter         string     `json:"jitter,omitempty"`
	LastDueAt      *time.Time `json:"last_due_at,omitempty"`
	LastRunID      *uuid.UUID `json:"last_run_id,omitempty"`
	LastWorkflowID string     `json:"last_workflow_id,omitempty"`
	Namespace      string     `json:"namespace"`
	// NextRunAt is the next due time; a paused schedule keeps it.
	NextRunAt     *time.Time `json:"next_run_at,omitempty"`
	Note          string     `json:"note"`
	OverlapPolicy string     `json:"overlap_policy"`
	Paused        bool       `json:"paused"`
	Queue         string     `json:"queue"`
	ScheduleID    string     `json:"schedule_id"`
	TimeZone      string     `json:"time_zone"`
	WorkflowKind  string     `json:"workflow_kind"`
}

// ScheduleListResponse is the body of GET /api/v1/namespaces/{namespace}/schedules.
type ScheduleListResponse struct {
	// NextCursor continues the listing (as the cursor parameter); absent on
	// the last page.
	NextCursor string `json:"next_cursor,omitempty"`

	// Schedules are the page's schedules, by ID.
	Schedules []*ScheduleJSON `json:"schedules"`
}

// ScheduleDeletedResponse is the body of a DELETE of a schedule.
type ScheduleDeletedResponse struct {
	Namespace  string `json:"namespace"`
	ScheduleID string `json:"schedule_id"`
}

// BackfillResponse is the body of a backfill. A range of up to 1000 due
// times starts them in the request (200): Runs are their runs, whether this
// backfill created them (created) or an earlier start of the same due time
// did. A longer range becomes a durable backfill run by weir's workers
// (202): Backfill is it, and Runs is empty.
type BackfillResponse struct {
	Backfill *BackfillJSON  `json:"backfill,omitempty"`
	Runs     []*RunResponse `json:"runs"`
}

// BackfillJSON is a durable backfill as the API returns it.
type BackfillJSON struct {
	BackfillID uuid.UUID `json:"backfill_id"`
	CreatedAt  time.Time `json:"created_at"`
	// End is the range's end (exclusive), Start its start (inclusive).
	End time.Time `json:"end"`
	// Error says why a failed backfill stopped, or what its last failed
	// batch met (it retries).
	Error     string `json:"error,omitempty"`
	Namespace string `json:"namespace"`
	// NextDueAt is the next due time to start; absent once none is left.
	NextDueAt  *time.Time `json:"next_due_at,omitempty"`
	ScheduleID string     `json:"schedule_id"`
	Start      time.Time  `json:"start"`
	// Started counts the due times whose runs have started.
	Started int64 `json:"started"`
	// State is running, completed or failed.
	State string `json:"state"`
	// Total is how many due times the range holds.
	Total     int64     `json:"total"`
	UpdatedAt time.Time `json:"updated_at"`
}

// BackfillListResponse is the body of GET …/schedules/{schedule_id}/backfills.
type BackfillListResponse struct {
	// Backfills are the schedule's durable backfills, newest first.
	Backfills []*BackfillJSON `json:"backfills"`
}

func backfillJSON(b *client.Backfill) *BackfillJSON {
	return &BackfillJSON{
		BackfillID: b.ID, CreatedAt: b.CreatedAt, End: b.End, Error: b.Error, Namespace: b.Namespace, NextDueAt: b.NextDueAt,
		ScheduleID: b.ScheduleID, Start: b.Start, Started: b.Started, State: string(b.State), Total: b.Total, UpdatedAt: b.UpdatedAt,
	}
}

// OverlapPolicies are the overlap policies a schedule may have.
var OverlapPolicies = []string{string(client.OverlapSkip), string(client.OverlapBufferOne), string(client.OverlapAllowAll)}

// scheduleEveryMin is the shortest interval a schedule may have.
const scheduleEveryMin = time.Second

// scheduleListLimit is the default page size of the schedule list; the
// largest is client.ListLimitMax.
const scheduleListLimit = 100

func scheduleJSON(s *client.Schedule) *ScheduleJSON {
	out := &ScheduleJSON{
		CreatedAt: s.CreatedAt, Cron: s.Cron, LastDueAt: s.LastDueAt, LastRunID: s.LastRunID, LastWorkflowID: s.LastWorkflowID,
		Namespace: s.Namespace, NextRunAt: s.NextRunAt, Note: s.Note, OverlapPolicy: string(s.OverlapPolicy), Paused: s.Paused,
		Queue: s.Queue, ScheduleID: s.ID, TimeZone: s.TimeZone, WorkflowKind: s.WorkflowKind,
	}
	if s.Every > 0 {
		out.Every = s.Every.String()
	}
	if s.Jitter > 0 {
		out.Jitter = s.Jitter.String()
	}
	return out
}

func runResponse(run *client.Run) *RunResponse {
	return &RunResponse{
		Created: run.Created, Generation: run.Generation, Namespace: run.Namespace, RunID: run.RunID, WorkflowID: run.WorkflowID,
	}
}

// scheduleParams checks a create request and turns it into ScheduleParams.
func scheduleParams(req *ScheduleRequest) (*client.ScheduleParams, error) {
	if err := checkScheduleID(req.ScheduleID); err != nil {
		return nil, err
	}
	if !validName(req.Kind) {
		return nil, invalidArgument("kind", "invalid workflow kind %q: %s", req.Kind, nameRule)
	}
	if err := checkQueue(req.Queue); err != nil {
		return nil, err
	}
	if req.OverlapPolicy != "" && !slices.Contains(OverlapPolicies, req.OverlapPolicy) {
		return nil, invalidArgument("overlap_policy", "unknown overlap_policy %q: skip, buffer_one or allow_all", req.OverlapPolicy)
	}
	p := &client.ScheduleParams{
		Cron: req.Cron, ID: req.ScheduleID, Note: req.Note, OverlapPolicy: client.OverlapPolicy(req.OverlapPolicy),
		Paused: req.Paused, Queue: req.Queue, TimeZone: req.TimeZone,
		Workflow: client.RawArgs{JSON: req.Args, KindName: req.Kind},
	}
	var err error
	if p.Every, err = parseTiming(req.Cron, req.Every, req.TimeZone); err != nil {
		return nil, err
	}
	if p.Jitter, err = parseDuration("jitter", req.Jitter); err != nil {
		return nil, err
	}
	return p, nil
}

// parseTiming is the one check of when a schedule is due: cron or every,
// an interval (every, or cron's @every) of at least scheduleEveryMin, and
// the zone as time_zone alone, an IANA zone other than Local (a TZ= or
// CRON_TZ= prefix in cron would be followed while the schedule reports
// time_zone, so it is refused; so is Local, which is whatever zone the
// worker's machine has). It returns the interval of every.
func parseTiming(cron, every, timeZone string) (time.Duration, error) {
	interval, err := parseDuration("every", every)
	switch {
	case err != nil:
		return 0, err
	case interval != 0 && interval < scheduleEveryMin:
		return 0, invalidArgument("every", "every is %s; at least %s", interval, scheduleEveryMin)
	case cron == "" && interval == 0:
		return 0, invalidArgument("cron", "give cron or a positive every")
	case cron != "" && interval != 0:
		return 0, invalidArgument("every", "give cron or every, not both")
	}
	if timeZone != "" {
		if _, err := time.LoadLocation(timeZone); err != nil || timeZone == "Local" {
			return 0, invalidArgument("time_zone", "unknown time_zone %q: an IANA zone such as \"Europe/Berlin\" (not Local)", timeZone)
		}
	}
	if cron == "" {
		return interval, nil
	}
	field := strings.Fields(cron)
	if len(field) > 0 && (strings.HasPrefix(field[0], "TZ=") || strings.HasPrefix(field[0], "CRON_TZ=")) {
		return 0, invalidArgument("cron", "cron %q names a zone: give it as time_zone and cron without %s", cron, field[0])
	}
	if len(field) > 0 && field[0] == "@every" {
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(cron, "@every")))
		if err != nil || d < scheduleEveryMin || d%time.Second != 0 {
			return 0, invalidArgument("cron", "cron %q: @every takes whole seconds, at least %s (or give every)", cron, scheduleEveryMin)
		}
	}
	if err := (&schedule.Spec{Cron: cron}).Validate(); err != nil {
		return 0, invalidArgument("cron", "invalid cron expression %q: five fields or a descriptor such as \"@hourly\" (%v)", cron, err)
	}
	return 0, nil
}

func (s *Server) handleCreateSchedule(r *http.Request) (int, any, error) {
	var req ScheduleRequest
	if err := decodeBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	p, err := scheduleParams(&req)
	if err != nil {
		return 0, nil, err
	}
	c, err := s.client(r.PathValue("namespace"))
	if err != nil {
		return 0, nil, err
	}
	sched, err := c.CreateSchedule(r.Context(), p)
	if errors.Is(err, client.ErrScheduleExists) {
		return 0, nil, newError(http.StatusConflict, CodeScheduleAlreadyExists, err.Error(), map[string]any{
			"namespace": r.PathValue("namespace"), "schedule_id": req.ScheduleID,
		})
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, scheduleJSON(sched), nil
}

func (s *Server) handleListSchedules(r *http.Request) (int, any, error) {
	q := r.URL.Query()
	limit, err := parseInt(q, "limit", 1, client.ListLimitMax)
	if err != nil {
		return 0, nil, err
	}
	if limit == 0 {
		limit = scheduleListLimit
	}
	var after string
	if v := q.Get("cursor"); v != "" {
		raw, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(raw) == 0 {
			return 0, nil, invalidArgument("cursor", "invalid cursor %q: pass next_cursor as it came", v)
		}
		after = string(raw)
	}
	c, err := s.client(r.PathValue("namespace"))
	if err != nil {
		return 0, nil, err
	}
	all, err := c.ListSchedules(r.Context())
	if err != nil {
		return 0, nil, err
	}
	// The client lists by ID (Postgres's collation); page by the same order
	// in Go's, so a cursor means "after this ID" whatever the collation.
	sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
	resp := &ScheduleListResponse{Schedules: []*ScheduleJSON{}}
	for _, sched := range all {
		if after != "" && sched.ID <= after {
			continue
		}
		if len(resp.Schedules) == limit {
			resp.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(resp.Schedules[limit-1].ScheduleID))
			break
		}
		resp.Schedules = append(resp.Schedules, scheduleJSON(sched))
	}
	return http.StatusOK, resp, nil
}

// scheduleTarget reads the namespace's client and the schedule ID of a
// per-schedule route.
func (s *Server) scheduleTarget(r *http.Request) (*client.Client, string, error) {
	id := r.PathValue("schedule_id")
	if err := checkScheduleID(id); err != nil {
		return nil, "", err
	}
	c, err := s.client(r.PathValue("namespace"))
	return c, id, err
}

func checkScheduleID(id string) error {
	if id == "" || len(id) > 255 {
		return invalidArgument("schedule_id", "schedule_id must be 1 to 255 bytes")
	}
	return nil
}

// onSchedule serves a per-schedule route: call's result, as out makes it,
// with status.
func onSchedule[T, U any](s *Server, r *http.Request, status int, call func(*client.Client, context.Context, string) (T, error), out func(T) U) (int, any, error) {
	c, id, err := s.scheduleTarget(r)
	if err != nil {
		return 0, nil, err
	}
	v, err := call(c, r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return status, out(v), nil
}

func (s *Server) handleDescribeSchedule(r *http.Request) (int, any, error) {
	return onSchedule(s, r, http.StatusOK, (*client.Client).DescribeSchedule, scheduleJSON)
}

func (s *Server) handleUpdateSchedule(r *http.Request) (int, any, error) {
	var req ScheduleUpdateRequest
	if err := decodeBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	u := &client.ScheduleUpdate{Note: req.Note, Paused: req.Paused}
	if req.OverlapPolicy != nil {
		if !slices.Contains(OverlapPolicies, *req.OverlapPolicy) {
			return 0, nil, invalidArgument("overlap_policy", "unknown overlap_policy %q: skip, buffer_one or allow_all", *req.OverlapPolicy)
		}
		u.OverlapPolicy = new(client.OverlapPolicy(*req.OverlapPolicy))
	}
	update := func(c *client.Client, ctx context.Context, id string) (*client.Schedule, error) {
		return c.UpdateSchedule(ctx, id, u)
	}
	return onSchedule(s, r, http.StatusOK, update, scheduleJSON)
}

func (s *Server) handlePauseSchedule(r *http.Request) (int, any, error) {
	return onSchedule(s, r, http.StatusOK, (*client.Client).PauseSchedule, scheduleJSON)
}

func (s *Server) handleResumeSchedule(r *http.Request) (int, any, error) {
	return onSchedule(s, r, http.StatusOK, (*client.Client).ResumeSchedule, scheduleJSON)
}

func (s *Server) handleTriggerSchedule(r *http.Request) (int, any, error) {
	return onSchedule(s, r, http.StatusCreated, (*client.Client).TriggerSchedule, runResponse)
}

// backfillInlineMax is the most due times a backfill request starts
// itself: few enough to start within a request's time limit. A longer range
// (up to client.BackfillMax) becomes a durable backfill that weir's workers
// run; the request answers 202 at once.
const backfillInlineMax = 1000

func (s *Server) handleBackfillSchedule(r *http.Request) (int, any, error) {
	c, id, err := s.scheduleTarget(r)
	if err != nil {
		return 0, nil, err
	}
	var req BackfillRequest
	if err := decodeBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	var start, end time.Time
	for name, v := range map[string]struct {
		dst *time.Time
		val string
	}{"start": {&start, req.Start}, "end": {&end, req.End}} {
		if *v.dst, err = time.Parse(time.RFC3339Nano, v.val); err != nil {
			return 0, nil, invalidArgument(name, "%s is not an RFC 3339 time: %q", name, v.val)
		}
	}
	if !start.Before(end) {
		return 0, nil, invalidArgument("end", "end (%s) must be after start (%s)", req.End, req.Start)
	}
	runs, bf, err := backfill(r.Context(), c, id, start, end)
	if err != nil {
		return 0, nil, err
	}
	if bf != nil {
		return http.StatusAccepted, &BackfillResponse{Backfill: backfillJSON(bf), Runs: []*RunResponse{}}, nil
	}
	resp := &BackfillResponse{Runs: []*RunResponse{}}
	for _, run := range runs {
		resp.Runs = append(resp.Runs, runResponse(run))
	}
	return http.StatusOK, resp, nil
}

// backfill starts the schedule's runs of [start, end) itself when the range
// holds at most backfillInlineMax due times (and returns them), or hands a
// longer range to weir's workers as a durable backfill (and returns it).
func backfill(ctx context.Context, c *client.Client, id string, start, end time.Time) ([]*client.Run, *client.Backfill, error) {
	sched, err := c.DescribeSchedule(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	inline, err := fitsInline(sched, start, end)
	if err != nil {
		return nil, nil, err
	}
	if !inline {
		bf, err := c.CreateBackfill(ctx, id, start, end)
		return nil, bf, err
	}
	runs, err := c.BackfillSchedule(ctx, id, start, end)
	return runs, nil, err
}

// fitsInline reports, before any run starts, whether a range holds at most
// backfillInlineMax due times.
func fitsInline(sched *client.Schedule, start, end time.Time) (bool, error) {
	if sched.Every > 0 {
		// Intervals count from the schedule's anchor; from start is at
		// least as many. Sub saturates for spans past 292 years and the
		// count is ceil(span/every) without adding to span, so nothing
		// wraps.
		span := end.Sub(start)
		n := span / sched.Every
		if span%sched.Every != 0 {
			n++
		}
		return n <= backfillInlineMax, nil
	}
	spec := &schedule.Spec{Cron: sched.Cron, TimeZone: sched.TimeZone}
	n, err := spec.Count(start, start, end, backfillInlineMax)
	return n <= backfillInlineMax, err
}

func (s *Server) handleListBackfills(r *http.Request) (int, any, error) {
	return onSchedule(s, r, http.StatusOK, (*client.Client).ListBackfills, func(list []*client.Backfill) *BackfillListResponse {
		resp := &BackfillListResponse{Backfills: []*BackfillJSON{}}
		for _, b := range list {
			resp.Backfills = append(resp.Backfills, backfillJSON(b))
		}
		return resp
	})
}

func (s *Server) handleDescribeBackfill(r *http.Request) (int, any, error) {
	c, id, err := s.scheduleTarget(r)
	if err != nil {
		return 0, nil, err
	}
	backfillID, err := uuid.Parse(r.PathValue("backfill_id"))
	if err != nil {
		return 0, nil, invalidArgument("backfill_id", "backfill_id is not a UUID: %q", r.PathValue("backfill_id"))
	}
	bf, err := c.DescribeBackfill(r.Context(), backfillID)
	if err == nil && bf.ScheduleID != id {
		err = &client.BackfillNotFoundError{ID: backfillID, Namespace: r.PathValue("namespace")}
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, backfillJSON(bf), nil
}

func (s *Server) handleDeleteSchedule(r *http.Request) (int, any, error) {
	del := func(c *client.Client, ctx context.Context, id string) (string, error) {
		return id, c.DeleteSchedule(ctx, id)
	}
	return onSchedule(s, r, http.StatusOK, del, func(id string) *ScheduleDeletedResponse {
		return &ScheduleDeletedResponse{Namespace: r.PathValue("namespace"), ScheduleID: id}
	})
}
