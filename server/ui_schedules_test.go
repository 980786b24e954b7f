package server_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/server"
)

// TestUISchedule covers a schedule's page: its actions (admin only, behind
// the CSRF check) and the links between the schedule and its runs.
func TestUISchedule(t *testing.T) {
	t.Parallel()
	b := setupUI(t, nil)
	for _, id := range []string{"ui-nightly", "ui-nightly/sub"} {
		require.Equal(t, http.StatusCreated, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/schedules", adminSecret,
			&server.ScheduleRequest{ScheduleID: id, Kind: "echo", Every: "1h", Paused: true}, nil))
	}
	const schedPath = "/ui/namespaces/default/schedules/ui-nightly"

	// The list links to the page.
	admin := b.browser(t)
	admin.login(adminSecret)
	_, page := admin.get("/ui/namespaces/default/schedules")
	require.Contains(t, page, `<a href="`+schedPath+`">ui-nightly</a>`)

	t.Run("ActionsNeedAdminAndCSRF", func(t *testing.T) {
		writer := b.browser(t)
		writer.login(writerSecret)
		resp, page := writer.get(schedPath)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, "need <b>admin</b>")
		require.NotContains(t, page, `id="backfill-form"`)
		resp, _ = writer.do(http.MethodPost, schedPath+"/resume", url.Values{"csrf": {csrfOf(t, page)}}, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode)

		_, page = admin.get(schedPath)
		require.Contains(t, page, `id="backfill-form"`)
		resp, _ = admin.do(http.MethodPost, schedPath+"/resume", url.Values{}, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
		resp, _ = admin.do(http.MethodPost, schedPath+"/resume", url.Values{"csrf": {csrfOf(t, page)}},
			http.Header{"Origin": {"https://evil.example"}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "another origin")
		resp, _ = admin.do(http.MethodPost, schedPath+"/delete", url.Values{"csrf": {csrfOf(t, page)}}, nil)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)

		var sched server.ScheduleJSON
		require.Equal(t, http.StatusOK, b.apiCall(t, http.MethodGet, "/api/v1/namespaces/default/schedules/ui-nightly", adminSecret, nil, &sched))
		require.True(t, sched.Paused, "no refused action changed the schedule")
	})

	t.Run("PauseResumeTriggerBackfill", func(t *testing.T) {
		_, page := admin.get(schedPath)
		require.Contains(t, page, `id="schedule-resume"`)
		csrf := csrfOf(t, page)
		post := func(action string, form url.Values) (*http.Response, string) {
			t.Helper()
			if form == nil {
				form = url.Values{}
			}
			form.Set("csrf", csrf)
			return admin.do(http.MethodPost, schedPath+"/"+action, form, nil)
		}
		follow := func(resp *http.Response, flash string) string {
			t.Helper()
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			require.Equal(t, schedPath+"?flash="+flash, resp.Header.Get("Location"))
			return pageOf(t, admin, resp.Header.Get("Location"))
		}

		resp, _ := post("resume", nil)
		page = follow(resp, "resume")
		require.Contains(t, page, `id="schedule-state">active<`)
		require.Contains(t, page, `id="schedule-pause"`)
		resp, _ = post("pause", nil)
		page = follow(resp, "pause")
		require.Contains(t, page, `id="schedule-state">paused<`)

		// A trigger starts a run that the page lists and that links back.
		require.Contains(t, page, "This schedule has started no run yet.")
		resp, _ = post("trigger", nil)
		page = follow(resp, "trigger")
		manual := regexp.MustCompile(`<a href="(/ui/namespaces/default/workflows/ui-nightly%2Fmanual-[0-9a-f-]+\?run_id=[0-9a-f-]+)">ui-nightly/manual-`).FindStringSubmatch(page)
		require.NotNil(t, manual, "the triggered run is listed with a link")
		_, runPage := admin.get(manual[1])
		require.Contains(t, runPage, `<dd id="schedule"><a href="`+schedPath+`">ui-nightly</a></dd>`)

		// A run of the schedule whose ID extends this one's is not listed.
		var subRun server.RunResponse
		require.Equal(t, http.StatusCreated, b.apiCall(t, http.MethodPost, "/api/v1/namespaces/default/schedules/ui-nightly%2Fsub/trigger", adminSecret, nil, &subRun))
		_, subPage := admin.get("/ui/namespaces/default/workflows/" + url.PathEscape(subRun.WorkflowID))
		require.Contains(t, subPage, `<dd id="schedule"><a href="/ui/namespaces/default/schedules/ui-nightly%2Fsub">ui-nightly/sub</a></dd>`)

		// A backfill of three hours starts three runs.
		now := time.Now().UTC()
		resp, _ = post("backfill", url.Values{
			"start": {now.Add(time.Minute).Format("2006-01-02T15:04")},
			"end":   {now.Add(3*time.Hour + 2*time.Minute).Format("2006-01-02T15:04")},
		})
		page = follow(resp, "backfill")
		require.Equal(t, 4, strings.Count(page, `">ui-nightly/`), "the manual run and three backfilled ones")
		require.NotContains(t, page, "ui-nightly/sub")

		// A range longer than a request starts (by its length: the
		// schedule's due times count from its creation, so it holds none
		// here) becomes a durable backfill, which the page lists.
		require.NotContains(t, page, `id="backfills"`)
		resp, _ = post("backfill", url.Values{"start": {"2020-01-01T00:00"}, "end": {"2020-03-01T00:00"}})
		page = follow(resp, "durable")
		require.Contains(t, page, "weir&#39;s workers start its runs in batches")
		require.Regexp(t, `id="backfills"[\s\S]*2020-01-01 00:00:00.000 – 2020-03-01 00:00:00.000`, page)
		require.Contains(t, page, `<td>0 of 0</td>`)

		// A bad range re-renders the page with the error.
		resp, page = post("backfill", url.Values{"start": {"2026-01-02T00:00"}, "end": {"2026-01-01T00:00"}})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, page, `id="form-error"`)
		require.Contains(t, page, "a backfill needs a start and a later end")
		resp, page = post("backfill", url.Values{"start": {"yesterday"}, "end": {"2026-01-01T00:00"}})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Contains(t, page, "start is not a time")
	})

	t.Run("NoScheduleLinkForOtherRuns", func(t *testing.T) {
		b.start(t, "echo", "nosuch/2026-01-01T00:00:00Z", echoArgs{Msg: "x"})
		_, page := admin.get("/ui/namespaces/default/workflows/" + url.PathEscape("nosuch/2026-01-01T00:00:00Z"))
		require.Contains(t, page, `id="workflow-id"`)
		require.NotContains(t, page, `id="schedule"`)
	})

	t.Run("MissingSchedule", func(t *testing.T) {
		resp, page := admin.get("/ui/namespaces/default/schedules/nosuch")
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		require.Contains(t, page, "nosuch")
	})
}
