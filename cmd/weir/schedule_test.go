package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/server"
)

func TestScheduleCommand(t *testing.T) {
	t.Parallel()

	weir, _ := setupCLI(t)
	ok := func(t *testing.T, out *cliOutput) string {
		t.Helper()
		require.Equal(t, 0, out.code, out.stderr)
		return out.stdout
	}

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		id := "cli-sched-" + uuid.NewString()

		out := ok(t, weir(t, cliAdminSecret, "schedule", "create", id, "echo", "--cron", "0 * * * *", "--time-zone", "Europe/Berlin",
			"--args", `{"msg":"tick"}`, "--overlap-policy", "buffer_one", "--paused", "--note", "from the CLI"))
		require.Regexp(t, `Schedule ID:\s+`+id, out)
		require.Regexp(t, `Spec:\s+0 \* \* \* \*`, out)
		require.Regexp(t, `Time zone:\s+Europe/Berlin`, out)
		require.Regexp(t, `Paused:\s+true`, out)

		again := weir(t, cliAdminSecret, "schedule", "create", id, "echo", "--every", "1h")
		require.Equal(t, exitConflict, again.code, again.stderr)
		require.Equal(t, "weir: schedule already exists: "+id+"\n", again.stderr)

		out = ok(t, weir(t, cliReaderSecret, "schedule", "list"))
		require.Contains(t, out, "SCHEDULE ID")
		require.Contains(t, out, id)
		var list server.ScheduleListResponse
		require.NoError(t, json.Unmarshal([]byte(ok(t, weir(t, cliReaderSecret, "schedule", "list", "--all", "--limit", "1", "--json"))), &list))
		require.Empty(t, list.NextCursor)
		var found bool
		for _, s := range list.Schedules {
			found = found || s.ScheduleID == id
		}
		require.True(t, found, "the schedule is listed")

		out = ok(t, weir(t, cliReaderSecret, "schedule", "describe", id))
		require.Regexp(t, `Overlap policy:\s+buffer_one`, out)
		require.Regexp(t, `Note:\s+from the CLI`, out)
		var s server.ScheduleJSON
		require.NoError(t, json.Unmarshal([]byte(ok(t, weir(t, cliReaderSecret, "schedule", "describe", id, "--json"))), &s))
		require.Equal(t, "echo", s.WorkflowKind)
		require.True(t, s.Paused)

		require.Contains(t, ok(t, weir(t, cliAdminSecret, "schedule", "resume", id)), "resumed")
		require.NoError(t, json.Unmarshal([]byte(ok(t, weir(t, cliReaderSecret, "schedule", "describe", id, "--json"))), &s))
		require.False(t, s.Paused)
		require.Contains(t, ok(t, weir(t, cliAdminSecret, "schedule", "pause", id)), "paused")

		out = ok(t, weir(t, cliAdminSecret, "schedule", "update", id, "--note", "changed", "--overlap-policy", "allow_all"))
		require.Regexp(t, `Note:\s+changed`, out)
		require.Regexp(t, `Overlap policy:\s+allow_all`, out)
		require.Regexp(t, `Paused:\s+true`, out)

		// Trigger starts a run now, which the worker completes.
		require.JSONEq(t, `{"msg":"tick"}`, ok(t, weir(t, cliAdminSecret, "schedule", "trigger", id, "--wait")))
		var run server.RunResponse
		require.NoError(t, json.Unmarshal([]byte(ok(t, weir(t, cliAdminSecret, "schedule", "trigger", id, "--json"))), &run))
		require.True(t, strings.HasPrefix(run.WorkflowID, id+"/manual-"), run.WorkflowID)
		require.JSONEq(t, `{"msg":"tick"}`, ok(t, weir(t, cliReaderSecret, "workflow", "result", run.WorkflowID)))

		// Backfill starts one run per due time, once.
		backfill := []string{"schedule", "backfill", id, "--start", "2025-06-01T10:00:00Z", "--end", "2025-06-01T12:30:00Z"}
		out = ok(t, weir(t, cliAdminSecret, backfill...))
		require.Contains(t, out, id+"/2025-06-01T10:00:00Z")
		require.Contains(t, out, id+"/2025-06-01T12:00:00Z")
		require.Equal(t, 4, strings.Count(strings.TrimSpace(out), "\n")+1, "a header and three runs: %s", out)
		var filled server.BackfillResponse
		require.NoError(t, json.Unmarshal([]byte(ok(t, weir(t, cliAdminSecret, append(backfill, "--json")...))), &filled))
		require.Len(t, filled.Runs, 3)
		for _, r := range filled.Runs {
			require.False(t, r.Created, "backfilled before")
		}
		require.JSONEq(t, `{"msg":"tick"}`, ok(t, weir(t, cliReaderSecret, "workflow", "result", id+"/2025-06-01T11:00:00Z")))

		require.Contains(t, ok(t, weir(t, cliAdminSecret, "schedule", "delete", id)), "deleted")
		missing := weir(t, cliReaderSecret, "schedule", "describe", id)
		require.Equal(t, exitNotFound, missing.code)
		require.Equal(t, "weir: no schedule "+id+" in namespace default\n", missing.stderr)
		missing = weir(t, cliAdminSecret, "schedule", "delete", id)
		require.Equal(t, exitNotFound, missing.code)
	})

	t.Run("LongBackfillIsDurable", func(t *testing.T) {
		t.Parallel()
		id := "cli-sched-long-" + uuid.NewString()
		ok(t, weir(t, cliAdminSecret, "schedule", "create", id, "nobody_runs_this", "--cron", "0 * * * *", "--paused"))
		// 1009 hourly due times: more than a request starts, so a durable
		// backfill, submitted once and followed to its end.
		backfill := []string{"schedule", "backfill", id, "--start", "2025-01-01T00:00:00Z", "--end", "2025-02-12T01:00:00Z"}
		out := weir(t, cliAdminSecret, append(backfill, "--wait", "--json")...)
		require.Equal(t, 0, out.code, out.stderr)
		require.Contains(t, out.stderr, "1009 of 1009 due times started", out.stderr)
		var filled server.BackfillResponse
		require.NoError(t, json.Unmarshal([]byte(out.stdout), &filled))
		require.NotNil(t, filled.Backfill)
		require.Equal(t, "completed", filled.Backfill.State)
		require.EqualValues(t, 1009, filled.Backfill.Started)
		require.Empty(t, filled.Runs)

		// Sent again (as after an interrupted command): the same backfill.
		out = weir(t, cliAdminSecret, backfill...)
		require.Equal(t, 0, out.code, out.stderr)
		require.Contains(t, out.stdout, filled.Backfill.BackfillID.String())
		require.Contains(t, out.stdout, "completed")
		listed := ok(t, weir(t, cliReaderSecret, "schedule", "backfills", id))
		require.Contains(t, listed, filled.Backfill.BackfillID.String())
		require.Equal(t, 2, strings.Count(strings.TrimSpace(listed), "\n")+1, "a header and one backfill: %s", listed)
	})

	t.Run("UsageAndAuth", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"schedule", "create", "only-id"},
			{"schedule", "create", "x", "echo"}, // neither --cron nor --every
			{"schedule", "create", "x", "echo", "--cron", "@hourly", "--every", "1h"},
			{"schedule", "create", "x", "echo", "--cron", "every day"},
			{"schedule", "create", "x", "echo", "--every", "1h", "--time-zone", "Nowhere/Special"},
			{"schedule", "create", "x", "echo", "--every", "1h", "--overlap-policy", "pile_up"},
			{"schedule", "create", "x", "echo", "--every", "daily"},
			{"schedule", "create", "x", "echo", "--every", "1h", "--args", "{nope"},
			{"schedule", "update", "x"},
			{"schedule", "backfill", "x", "--start", "2025-01-01T00:00:00Z"},
			{"schedule", "list", "--limit", "5000"},
		} {
			out := weir(t, cliAdminSecret, args...)
			require.Equal(t, exitUsage, out.code, "%v: %s", args, out.stderr)
		}

		// Readers and writers may not change schedules.
		for _, token := range []string{cliReaderSecret, cliWriterSecret} {
			out := weir(t, token, "schedule", "create", "x", "echo", "--every", "1h")
			require.Equal(t, exitAuth, out.code, out.stderr)
			require.Contains(t, out.stderr, "; this needs admin")
		}
		out := weir(t, "", "schedule", "list")
		require.Equal(t, exitAuth, out.code, out.stderr)
		out = weir(t, cliAdminSecret, "schedule", "trigger", "no-such-schedule")
		require.Equal(t, exitNotFound, out.code, out.stderr)
	})
}
