package store

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/dbtest"
)

// TestListRunsIndexed: on a table of runs shaped like a system's (most
// completed, some failed or running, kinds of every size, workflow IDs
// with prefixes, two namespaces), each filter of List is read through an
// index, never by scanning the table: by kind, by state, by workflow ID
// prefix, by time, from a cursor (decision 0031 measured what each costs).
func TestListRunsIndexed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.Pool(ctx, t)
	names := dbschema.New(dbtest.FreshSchema(ctx, t))
	s := New(names)
	_, err := pool.Exec(ctx, "INSERT INTO "+names.Workflow+" (namespace, workflow_id, last_generation)"+
		" SELECT CASE WHEN i % 10 = 0 THEN 'other' ELSE 'default' END,"+
		"  CASE WHEN i % 7 = 0 THEN 'cust-' || (i % 100) || '-' || i ELSE 'order-' || i END, 1"+
		" FROM generate_series(1, 30000) i")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "INSERT INTO "+names.Run+
		" (run_id, namespace, workflow_id, generation, kind, queue, state, args, request_id, request_hash, created_at, closed_at)"+
		" SELECT gen_random_uuid(), namespace, workflow_id, 1, (ARRAY['Order', 'Order', 'Order', 'Payment', 'Ship', 'Email'])[1 + h % 6] ||"+
		"  CASE WHEN h % 97 = 0 THEN 'Rare' ELSE '' END, 'default', state, '\\x', 'r', '\\x', created,"+
		"  CASE WHEN state <> 'running' THEN created + interval '1 second' END"+
		" FROM (SELECT *, abs(hashtext(workflow_id)) AS h FROM "+names.Workflow+") w,"+
		" LATERAL (SELECT CASE WHEN h % 100 < 93 THEN 'completed' WHEN h % 100 < 96 THEN 'failed' WHEN h % 100 < 98 THEN 'running'"+
		"  ELSE 'cancelled' END AS state, now() - (h % 100000) * interval '20 seconds' AS created) v")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ANALYZE "+names.Run)
	require.NoError(t, err)

	const (
		none   = "NULL"
		cursor = "now() - interval '1 day', '00000000-0000-0000-0000-000000000000'"
	)
	for _, tc := range []struct {
		name, kind, state, like, after, before, from string
		index, cond                                  string // the index read; else what its condition bounds
	}{
		{name: "all", index: "weir_run_list_idx"},
		// A filter most runs pass may read the list index, filtering.
		{name: "kind", kind: "'Order'", cond: "namespace"},
		{name: "rare kind", kind: "'ShipRare'", index: "weir_run_list_kind_idx"},
		{name: "running", state: "'running'", index: "weir_run_list_state_idx"},
		{name: "failed", state: "'failed'", index: "weir_run_list_state_idx"},
		{name: "completed", state: "'completed'", cond: "namespace"},
		// Any index on (namespace, workflow_id) serves a prefix in a database
		// of collation C; weir_run_list_workflow_id_idx (text_pattern_ops) in
		// any.
		{name: "prefix", like: "'cust-42-%'", cond: "workflow_id"},
		{name: "time", after: "now() - interval '3 days'", before: "now() - interval '2 days'", index: "weir_run_list_idx"},
		{name: "cursor", from: cursor, index: "weir_run_list_idx"},
		{name: "rare kind from cursor", kind: "'EmailRare'", from: cursor, index: "weir_run_list_kind_idx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			or := func(v string) string { return map[bool]string{true: none, false: v}[v == ""] }
			from := or(tc.from)
			if tc.from == "" {
				from = none + ", " + none
			}
			literals := strings.Join([]string{"'default'", or(tc.kind), or(tc.state), or(tc.like), or(tc.after), or(tc.before),
				from, "100"}, ", ")
			plan := dbtest.ExplainPrepared(ctx, t, pool, "", s.listing.runs, literals)
			scans := dbtest.PlanScans(plan)
			require.Len(t, scans, 1, plan)
			require.Contains(t, scans[0].Cond, "namespace", plan)
			if tc.index == "" {
				require.NotEmpty(t, scans[0].Index, plan)
				require.Contains(t, scans[0].Cond, tc.cond, plan)
				return
			}
			require.Equal(t, tc.index, scans[0].Index, plan)
		})
	}
}
