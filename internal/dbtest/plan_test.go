package dbtest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

func TestPlanScans(t *testing.T) {
	t.Parallel()
	plan := `Append  (cost=0.15..139.18 rows=12 width=100)
  ->  Hash Join  (cost=4.50..10.92 rows=1 width=100)
        Hash Cond: ((r_1.namespace = v_2.namespace) AND (r_1.workflow_id = v_2.workflow_id))
        ->  Bitmap Heap Scan on weir_run r_1  (cost=4.15..10.55 rows=2 width=120)
              Recheck Cond: (state = 'running'::text)
              ->  Bitmap Index Scan on weir_run_live_idx  (cost=0.00..4.15 rows=2 width=0)
        ->  Hash  (cost=0.20..0.20 rows=10 width=72)
              ->  CTE Scan on v v_2  (cost=0.00..0.20 rows=10 width=72)
  ->  Nested Loop  (cost=0.15..82.07 rows=10 width=100)
        ->  Seq Scan on weir_workflow w  (cost=0.00..0.20 rows=10 width=72)
        ->  Limit  (cost=0.15..8.17 rows=1 width=56)
              ->  Index Scan Backward using weir_run_generation_idx on weir_run r_2  (cost=0.15..8.17 rows=1 width=56)
                    Index Cond: ((namespace = v_3.namespace) AND (workflow_id = v_3.workflow_id))
                    Filter: (x > 1)`
	require.Equal(t, []dbtest.PlanScan{
		{Line: "->  Bitmap Index Scan on weir_run_live_idx  (cost=0.00..4.15 rows=2 width=0)", Index: "weir_run_live_idx"},
		{Line: "->  Seq Scan on weir_workflow w  (cost=0.00..0.20 rows=10 width=72)", Table: "weir_workflow"},
		{
			Line:  "->  Index Scan Backward using weir_run_generation_idx on weir_run r_2  (cost=0.15..8.17 rows=1 width=56)",
			Index: "weir_run_generation_idx", Table: "weir_run",
			Cond: "((namespace = v_3.namespace) AND (workflow_id = v_3.workflow_id))",
		},
	}, dbtest.PlanScans(plan))
}

func TestFilteredLoops(t *testing.T) {
	t.Parallel()
	plan := `Aggregate  (cost=12.86..12.88 rows=1 width=4)
  CTE u
    ->  Update on weir_run r  (cost=4.46..12.83 rows=1 width=62)
          ->  Nested Loop  (cost=4.46..12.83 rows=1 width=62)
                Join Filter: ((r.run_id = v.run_id) AND (r.next_event_id = v.found))
                ->  Bitmap Heap Scan on weir_run r  (cost=4.35..12.31 rows=1 width=30)
                      Recheck Cond: (run_id = ANY ($1))
                      ->  Bitmap Index Scan on weir_run_pkey  (cost=0.00..4.35 rows=10 width=0)
                            Index Cond: (run_id = ANY ($1))
                ->  Function Scan on v  (cost=0.11..0.31 rows=10 width=88)
  ->  Nested Loop  (cost=0.15..82.07 rows=10 width=100)
        ->  CTE Scan on v v_3  (cost=0.00..0.20 rows=10 width=72)
        ->  Limit  (cost=0.15..8.17 rows=1 width=56)
              ->  Index Scan Backward using weir_run_generation_idx on weir_run r_2  (cost=0.15..8.17 rows=1 width=56)
                    Index Cond: ((namespace = v_3.namespace) AND (workflow_id = v_3.workflow_id))
                    Filter: (x > 1)`
	require.Equal(t, []string{
		"->  Nested Loop  (cost=4.46..12.83 rows=1 width=62) / Join Filter: ((r.run_id = v.run_id) AND (r.next_event_id = v.found))",
	}, dbtest.FilteredLoops(plan))
}
