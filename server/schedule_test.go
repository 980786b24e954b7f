package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/client"
	"github.com/weirhq/weir/server"
)

func schedulesPath(namespace string) string { return "/api/v1/namespaces/" + namespace + "/schedules" }

func schedulePath(namespace, id, suffix string) string {
	return schedulesPath(namespace) + "/" + url.PathEscape(id) + suffix
}

func createSchedule(t *testing.T, b *apiBundle, namespace string, req *server.ScheduleRequest) *server.ScheduleJSON {
	t.Helper()
	return callJSON[server.ScheduleJSON](t, b, http.StatusCreated, http.MethodPost, schedulesPath(namespace), adminSecret, req)
}

func TestScheduleAPI(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, nil)

	t.Run("CreateDescribeDelete", func(t *testing.T) {
		t.Parallel()
		id := "sched-crud-" + uuid.NewString()
		created := createSchedule(t, b, "default", &server.ScheduleRequest{
			Args: json.RawMessage(`{"msg":"x"}`), Every: "1h", Jitter: "5s", Kind: "echo", Note: "hourly echo",
			OverlapPolicy: "buffer_one", Paused: true, Queue: "default", ScheduleID: id,
		})
		require.Equal(t, id, created.ScheduleID)
		require.Equal(t, "default", created.Namespace)
		require.Equal(t, "1h0m0s", created.Every)
		require.Equal(t, "5s", created.Jitter)
		require.Empty(t, created.Cron)
		require.Equal(t, "UTC", created.TimeZone)
		require.Equal(t, "echo", created.WorkflowKind)
		require.Equal(t, "buffer_one", created.OverlapPolicy)
		require.True(t, created.Paused)
		require.Equal(t, "hourly echo", created.Note)
		require.NotNil(t, created.NextRunAt)
		require.WithinDuration(t, created.CreatedAt.Add(time.Hour), *created.NextRunAt, time.Second)

		// The ID is taken.
		e := callError(t, b, http.StatusConflict, server.CodeScheduleAlreadyExists, http.MethodPost, schedulesPath("default"), adminSecret,
			&server.ScheduleRequest{Cron: "@daily", Kind: "echo", ScheduleID: id})
		require.Equal(t, id, e.Data["schedule_id"])
		require.Equal(t, "default", e.Data["namespace"])

		// Readers describe.
		described := callJSON[server.ScheduleJSON](t, b, http.StatusOK, http.MethodGet, schedulePath("default", id, ""), readerSecret, nil)
		require.Equal(t, created, described)

		deleted := callJSON[server.ScheduleDeletedResponse](t, b, http.StatusOK, http.MethodDelete, schedulePath("default", id, ""), adminSecret, nil)
		require.Equal(t, &server.ScheduleDeletedResponse{Namespace: "default", ScheduleID: id}, deleted)
		for _, method := range []string{http.MethodGet, http.MethodDelete} {
			e := callError(t, b, http.StatusNotFound, server.CodeNotFound, method, schedulePath("default", id, ""), adminSecret, nil)
			require.Equal(t, id, e.Data["schedule_id"])
		}
		for _, suffix := range []string{"/pause", "/resume", "/trigger"} {
			callError(t, b, http.StatusNotFound, server.CodeNotFound, http.MethodPost, schedulePath("default", id, suffix), adminSecret, nil)
		}
		callError(t, b, http.StatusNotFound, server.CodeNotFound, http.MethodPatch, schedulePath("default", id, ""), adminSecret,
			&server.ScheduleUpdateRequest{})
		callError(t, b, http.StatusNotFound, server.CodeNotFound, http.MethodPost, schedulePath("default", id, "/backfill"), adminSecret,
			&server.BackfillRequest{Start: "2020-01-01T00:00:00Z", End: "2020-01-02T00:00:00Z"})
	})

	t.Run("CronTimeZoneAndSlashInID", func(t *testing.T) {
		t.Parallel()
		id := "sched/tz/" + uuid.NewString()
		created := createSchedule(t, b, "default", &server.ScheduleRequest{
			Cron: "30 9 * * 1-5", Kind: "echo", Paused: true, ScheduleID: id, TimeZone: "Europe/Berlin",
		})
		require.Equal(t, "30 9 * * 1-5", created.Cron)
		require.Equal(t, "Europe/Berlin", created.TimeZone)
		require.Equal(t, "skip", created.OverlapPolicy)
		require.Equal(t, client.QueueDefault, created.Queue)
		berlin, err := time.LoadLocation("Europe/Berlin")
		require.NoError(t, err)
		next := created.NextRunAt.In(berlin)
		require.Equal(t, 9, next.Hour())
		require.Equal(t, 30, next.Minute())
		got := callJSON[server.ScheduleJSON](t, b, http.StatusOK, http.MethodGet, schedulePath("default", id, ""), readerSecret, nil)
		require.Equal(t, id, got.ScheduleID)
	})

	t.Run("ListPages", func(t *testing.T) {
		t.Parallel()
		namespace := "sched-list-" + uuid.NewString()[:8]
		for _, id := range []string{"c", "a", "b"} {
			createSchedule(t, b, namespace, &server.ScheduleRequest{Every: "24h", Kind: "echo", Paused: true, ScheduleID: id})
		}
		var ids []string
		cursor := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 3)
			path := schedulesPath(namespace) + "?limit=2"
			if cursor != "" {
				path += "&cursor=" + url.QueryEscape(cursor)
			}
			page := callJSON[server.ScheduleListResponse](t, b, http.StatusOK, http.MethodGet, path, adminSecret, nil)
			require.LessOrEqual(t, len(page.Schedules), 2)
			for _, s := range page.Schedules {
				ids = append(ids, s.ScheduleID)
				require.Equal(t, namespace, s.Namespace)
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		require.Equal(t, []string{"a", "b", "c"}, ids)

		all := callJSON[server.ScheduleListResponse](t, b, http.StatusOK, http.MethodGet, schedulesPath(namespace), adminSecret, nil)
		require.Len(t, all.Schedules, 3)
		require.Empty(t, all.NextCursor)

		empty := callJSON[server.ScheduleListResponse](t, b, http.StatusOK, http.MethodGet, schedulesPath("sched-empty"), adminSecret, nil)
		require.NotNil(t, empty.Schedules)
		require.Empty(t, empty.Schedules)

		for _, query := range []string{"?limit=0", "?limit=1001", "?limit=x", "?cursor=%21%21"} {
			callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodGet, schedulesPath(namespace)+query, adminSecret, nil)
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		t.Parallel()
		good := func() *server.ScheduleRequest {
			return &server.ScheduleRequest{Every: "1h", Kind: "echo", ScheduleID: "sched-invalid-" + uuid.NewString()}
		}
		for name, tc := range map[string]struct {
			field  string
			mutate func(*server.ScheduleRequest)
		}{
			"NoID":          {"schedule_id", func(r *server.ScheduleRequest) { r.ScheduleID = "" }},
			"LongID":        {"schedule_id", func(r *server.ScheduleRequest) { r.ScheduleID = strings.Repeat("x", 256) }},
			"NoKind":        {"kind", func(r *server.ScheduleRequest) { r.Kind = "" }},
			"BadKind":       {"kind", func(r *server.ScheduleRequest) { r.Kind = "no spaces" }},
			"BadCron":       {"cron", func(r *server.ScheduleRequest) { r.Every, r.Cron = "", "61 * * * *" }},
			"SixFieldCron":  {"cron", func(r *server.ScheduleRequest) { r.Every, r.Cron = "", "0 0 * * * *" }},
			"NeitherSpec":   {"cron", func(r *server.ScheduleRequest) { r.Every = "" }},
			"BothSpecs":     {"every", func(r *server.ScheduleRequest) { r.Cron = "@hourly" }},
			"BadEvery":      {"every", func(r *server.ScheduleRequest) { r.Every = "hourly" }},
			"NegativeEvery": {"every", func(r *server.ScheduleRequest) { r.Every = "-1h" }},
			"TinyEvery":     {"every", func(r *server.ScheduleRequest) { r.Every = "10ms" }},
			"BadJitter":     {"jitter", func(r *server.ScheduleRequest) { r.Jitter = "a bit" }},
			"BadTimeZone":   {"time_zone", func(r *server.ScheduleRequest) { r.TimeZone = "Mars/Olympus" }},
			"LocalTimeZone": {"time_zone", func(r *server.ScheduleRequest) { r.TimeZone = "Local" }},
			"AtEveryZero":   {"cron", func(r *server.ScheduleRequest) { r.Every, r.Cron = "", "@every 0s" }},
			"AtEveryNeg":    {"cron", func(r *server.ScheduleRequest) { r.Every, r.Cron = "", "@every -1s" }},
			"AtEveryTiny":   {"cron", func(r *server.ScheduleRequest) { r.Every, r.Cron = "", "@every 1ns" }},
			"AtEveryPart":   {"cron", func(r *server.ScheduleRequest) { r.Every, r.Cron = "", "@every 1500ms" }},
			"AtEveryJunk":   {"cron", func(r *server.ScheduleRequest) { r.Every, r.Cron = "", "@every often" }},
			"TZPrefix":      {"cron", func(r *server.ScheduleRequest) { r.Every, r.Cron = "", "TZ=Europe/Berlin 0 9 * * *" }},
			"CronTZPrefix":  {"cron", func(r *server.ScheduleRequest) { r.Every, r.Cron = "", "CRON_TZ=Local 0 9 * * *" }},
			"TZAndTimeZone": {"cron", func(r *server.ScheduleRequest) { r.Every, r.Cron, r.TimeZone = "", "TZ=UTC @hourly", "UTC" }},
			"BadOverlap":    {"overlap_policy", func(r *server.ScheduleRequest) { r.OverlapPolicy = "queue_all" }},
			"BadQueue":      {"queue", func(r *server.ScheduleRequest) { r.Queue = "Not A Queue" }},
		} {
			req := good()
			tc.mutate(req)
			e := callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodPost, schedulesPath("default"), adminSecret, req)
			require.Equal(t, tc.field, e.Data["field"], "%s: %s", name, e.Message)
		}
		createSchedule(t, b, "default", &server.ScheduleRequest{Cron: "@every 90s", Kind: "echo", Paused: true, ScheduleID: "sched-at-every-" + uuid.NewString()})
		for _, body := range []string{"", "[]", `{"schedule_id":"x","kind":"echo","every":"1h","bogus":1}`, `{"schedule_id":"x","kind":"echo","every":"1h","args":{`} {
			e := callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodPost, schedulesPath("default"), adminSecret, body)
			require.Equal(t, "body", e.Data["field"], body)
		}

		id := "sched-invalid-" + uuid.NewString()
		createSchedule(t, b, "default", &server.ScheduleRequest{Every: "1h", Kind: "echo", Paused: true, ScheduleID: id})
		bad := "sometimes"
		e := callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodPatch, schedulePath("default", id, ""), adminSecret,
			&server.ScheduleUpdateRequest{OverlapPolicy: &bad})
		require.Equal(t, "overlap_policy", e.Data["field"])
		callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodPatch, schedulePath("default", id, ""), adminSecret, `{"paused":"yes"}`)
		for _, tc := range []struct {
			field string
			req   *server.BackfillRequest
		}{
			{"start", &server.BackfillRequest{Start: "yesterday", End: "2020-01-01T00:00:00Z"}},
			{"end", &server.BackfillRequest{Start: "2020-01-01T00:00:00Z"}},
			{"end", &server.BackfillRequest{Start: "2020-01-02T00:00:00Z", End: "2020-01-01T00:00:00Z"}},
			{"end", &server.BackfillRequest{Start: "0001-01-01T00:00:00Z", End: "9999-12-31T00:00:00Z"}}, // > client.BackfillMax hours
		} {
			e := callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodPost, schedulePath("default", id, "/backfill"), adminSecret, tc.req)
			require.Equal(t, tc.field, e.Data["field"], e.Message)
		}
	})

	t.Run("Auth", func(t *testing.T) {
		t.Parallel()
		id := "sched-auth-" + uuid.NewString()
		createSchedule(t, b, "default", &server.ScheduleRequest{Every: "1h", Kind: "echo", Paused: true, ScheduleID: id})

		// Without a token: 401 everywhere.
		callError(t, b, http.StatusUnauthorized, server.CodeUnauthenticated, http.MethodGet, schedulesPath("default"), "", nil)
		callError(t, b, http.StatusUnauthorized, server.CodeUnauthenticated, http.MethodGet, schedulePath("default", id, ""), "", nil)

		// Readers (and writers) read, but change nothing: that needs admin.
		for _, token := range []string{readerSecret, writerSecret} {
			callJSON[server.ScheduleListResponse](t, b, http.StatusOK, http.MethodGet, schedulesPath("default"), token, nil)
			callJSON[server.ScheduleJSON](t, b, http.StatusOK, http.MethodGet, schedulePath("default", id, ""), token, nil)
			callJSON[server.BackfillListResponse](t, b, http.StatusOK, http.MethodGet, schedulePath("default", id, "/backfills"), token, nil)
			for _, rt := range []struct{ method, path string }{
				{http.MethodPost, schedulesPath("default")},
				{http.MethodPatch, schedulePath("default", id, "")},
				{http.MethodDelete, schedulePath("default", id, "")},
				{http.MethodPost, schedulePath("default", id, "/pause")},
				{http.MethodPost, schedulePath("default", id, "/resume")},
				{http.MethodPost, schedulePath("default", id, "/trigger")},
				{http.MethodPost, schedulePath("default", id, "/backfill")},
			} {
				e := callError(t, b, http.StatusForbidden, server.CodePermissionDenied, rt.method, rt.path, token, nil)
				require.Equal(t, "admin", e.Data["required_role"], rt.method+" "+rt.path)
			}
		}
		// Outside the token's namespaces.
		callError(t, b, http.StatusForbidden, server.CodePermissionDenied, http.MethodGet, schedulesPath("default"), otherSecret, nil)

		// Schedules are per namespace: the ID is unknown elsewhere.
		callError(t, b, http.StatusNotFound, server.CodeNotFound, http.MethodGet, schedulePath("billing", id, ""), adminSecret, nil)
	})

	t.Run("PauseResumeUpdate", func(t *testing.T) {
		t.Parallel()
		id := "sched-pause-" + uuid.NewString()
		created := createSchedule(t, b, "default", &server.ScheduleRequest{Every: "1h", Kind: "echo", ScheduleID: id})
		require.False(t, created.Paused)

		paused := callJSON[server.ScheduleJSON](t, b, http.StatusOK, http.MethodPost, schedulePath("default", id, "/pause"), adminSecret, nil)
		require.True(t, paused.Paused)
		require.Equal(t, created.NextRunAt, paused.NextRunAt, "a paused schedule keeps its next due time")
		again := callJSON[server.ScheduleJSON](t, b, http.StatusOK, http.MethodPost, schedulePath("default", id, "/pause"), adminSecret, nil)
		require.True(t, again.Paused)

		resumed := callJSON[server.ScheduleJSON](t, b, http.StatusOK, http.MethodPost, schedulePath("default", id, "/resume"), adminSecret, nil)
		require.False(t, resumed.Paused)
		require.NotNil(t, resumed.NextRunAt)

		note, policy, pause := "changed", "allow_all", true
		updated := callJSON[server.ScheduleJSON](t, b, http.StatusOK, http.MethodPatch, schedulePath("default", id, ""), adminSecret,
			&server.ScheduleUpdateRequest{Note: &note, OverlapPolicy: &policy, Paused: &pause})
		require.Equal(t, "changed", updated.Note)
		require.Equal(t, "allow_all", updated.OverlapPolicy)
		require.True(t, updated.Paused)
		require.Equal(t, "1h0m0s", updated.Every, "what the update does not name stays")

		// An empty update changes nothing.
		same := callJSON[server.ScheduleJSON](t, b, http.StatusOK, http.MethodPatch, schedulePath("default", id, ""), adminSecret, "{}")
		require.Equal(t, updated, same)
	})

	t.Run("TriggerAndBackfill", func(t *testing.T) {
		t.Parallel()
		id := "sched-run-" + uuid.NewString()
		createSchedule(t, b, "default", &server.ScheduleRequest{
			Args: json.RawMessage(`{"msg":"scheduled"}`), Cron: "0 * * * *", Kind: "echo", Paused: true, ScheduleID: id,
		})

		run := callJSON[server.RunResponse](t, b, http.StatusCreated, http.MethodPost, schedulePath("default", id, "/trigger"), adminSecret, nil)
		require.True(t, run.Created)
		require.True(t, strings.HasPrefix(run.WorkflowID, id+"/manual-"), run.WorkflowID)
		res := awaitResult(t, b, "default", run.WorkflowID)
		require.Equal(t, "completed", res.State)
		require.JSONEq(t, `{"msg":"scheduled"}`, string(res.Result))

		req := &server.BackfillRequest{Start: "2020-01-01T00:00:00Z", End: "2020-01-01T03:00:00Z"}
		filled := callJSON[server.BackfillResponse](t, b, http.StatusOK, http.MethodPost, schedulePath("default", id, "/backfill"), adminSecret, req)
		require.Len(t, filled.Runs, 3)
		for i, r := range filled.Runs {
			due := time.Date(2020, 1, 1, i, 0, 0, 0, time.UTC)
			require.Equal(t, client.ScheduleWorkflowID(id, due), r.WorkflowID)
			require.True(t, r.Created)
		}
		require.Equal(t, "completed", awaitResult(t, b, "default", filled.Runs[2].WorkflowID).State)

		// A due time starts one run however often it is backfilled.
		again := callJSON[server.BackfillResponse](t, b, http.StatusOK, http.MethodPost, schedulePath("default", id, "/backfill"), adminSecret, req)
		require.Len(t, again.Runs, 3)
		for i, r := range again.Runs {
			require.False(t, r.Created)
			require.Equal(t, filled.Runs[i].RunID, r.RunID)
		}

		// A range of more due times than a backfill covers is refused before
		// any starts, however long: spans past 292 years saturate, and the
		// count must not wrap (0001–2100 of an hourly schedule did).
		every := "sched-every-" + uuid.NewString()
		createSchedule(t, b, "default", &server.ScheduleRequest{Every: "1h", Kind: "echo", Paused: true, ScheduleID: every})
		for _, tc := range []struct{ id, start, end string }{
			{every, "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"},
			{every, "2020-01-01T00:00:00Z", "2400-01-01T00:00:00Z"},
			{id, "1000-01-01T00:00:00Z", "2100-01-01T00:00:00Z"},
		} {
			e := callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodPost, schedulePath("default", tc.id, "/backfill"),
				adminSecret, &server.BackfillRequest{Start: tc.start, End: tc.end})
			require.InDelta(t, client.BackfillMax, e.Data["max_due_times"], 0, "the error says to split the range")
		}
		list := callJSON[server.ListResponse](t, b, http.StatusOK, http.MethodGet,
			workflowsPath("default")+"?workflow_id_prefix="+url.QueryEscape(every), adminSecret, nil)
		require.Empty(t, list.Runs, "a refused backfill starts nothing")
		backfills := callJSON[server.BackfillListResponse](t, b, http.StatusOK, http.MethodGet, schedulePath("default", every, "/backfills"), adminSecret, nil)
		require.Empty(t, backfills.Backfills, "nor stores anything")

		// More than a request starts: a durable backfill (202), run by the
		// workers, its progress readable; sent again, the same backfill.
		long := &server.BackfillRequest{Start: "2020-01-01T00:00:00Z", End: "2020-02-12T00:00:00Z"} // 1008 hours
		accepted := callJSON[server.BackfillResponse](t, b, http.StatusAccepted, http.MethodPost, schedulePath("default", id, "/backfill"), adminSecret, long)
		require.NotNil(t, accepted.Backfill)
		require.Empty(t, accepted.Runs)
		require.EqualValues(t, 1008, accepted.Backfill.Total)
		require.Equal(t, id, accepted.Backfill.ScheduleID)
		fillPath := schedulePath("default", id, "/backfills/"+accepted.Backfill.BackfillID.String())
		done := callJSON[server.BackfillJSON](t, b, http.StatusOK, http.MethodGet, fillPath, readerSecret, nil)
		for deadline := time.Now().Add(2 * time.Minute); done.State != "completed"; {
			require.Equal(t, "running", done.State, done.Error)
			require.True(t, time.Now().Before(deadline), "the backfill never completed: %+v", done)
			time.Sleep(50 * time.Millisecond) //nolint:forbidigo // polling progress with a deadline
			done = callJSON[server.BackfillJSON](t, b, http.StatusOK, http.MethodGet, fillPath, readerSecret, nil)
		}
		require.EqualValues(t, 1008, done.Started)
		require.Nil(t, done.NextDueAt)
		resent := callJSON[server.BackfillResponse](t, b, http.StatusAccepted, http.MethodPost, schedulePath("default", id, "/backfill"), adminSecret, long)
		require.Equal(t, accepted.Backfill.BackfillID, resent.Backfill.BackfillID)
		require.Equal(t, "completed", resent.Backfill.State)
		backfills = callJSON[server.BackfillListResponse](t, b, http.StatusOK, http.MethodGet, schedulePath("default", id, "/backfills"), readerSecret, nil)
		require.Len(t, backfills.Backfills, 1)

		// A backfill is found under its own schedule only.
		callError(t, b, http.StatusNotFound, server.CodeNotFound, http.MethodGet,
			schedulePath("default", every, "/backfills/"+accepted.Backfill.BackfillID.String()), readerSecret, nil)
		callError(t, b, http.StatusNotFound, server.CodeNotFound, http.MethodGet,
			schedulePath("default", id, "/backfills/"+uuid.NewString()), readerSecret, nil)
		callError(t, b, http.StatusBadRequest, server.CodeInvalidArgument, http.MethodGet,
			schedulePath("default", id, "/backfills/not-a-uuid"), readerSecret, nil)

		// A range without due times starts nothing.
		none := callJSON[server.BackfillResponse](t, b, http.StatusOK, http.MethodPost, schedulePath("default", id, "/backfill"), adminSecret,
			&server.BackfillRequest{Start: "2020-01-01T00:10:00Z", End: "2020-01-01T00:50:00Z"})
		require.NotNil(t, none.Runs)
		require.Empty(t, none.Runs)
	})
}
