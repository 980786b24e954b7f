package dbschema

// GenericPlansSQL makes the rest of a transaction use generic plans for
// its prepared statements, with sequential scans off. A statement over
// arrays otherwise gets a custom plan on every call (a custom plan sees the
// arrays, so it always looks cheaper than the generic one), which costs a
// group's merged statements more than some of them take to run; their
// generic plans take every table by key (TestMergedGroupWrites) and are made
// once per connection. A generic plan made while a table is young (a new
// install, before its first ANALYZE) would keep a sequential scan for the
// connection's life, hence enable_seqscan off (TestGroupPlansMadeYoung).
// The figures are in docs/decisions/0013 and 0004.
// The groups of a worker's step committer send it ahead of their locking
// read and of merged last writes, a client's group of starts ahead of its
// lookup; it ends with the transaction.
const GenericPlansSQL = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true)"

// HashJoinsSQL turns nested-loop joins and JIT compilation off for the
// statements a batch sends after it, until HashJoinsEndSQL restores both as
// they were. It goes around the statements that join an array's rows (a
// group's batch) to the rows they write, which a generic plan, counting ten
// elements in an array it cannot see, otherwise joins in a nested loop that
// reads the whole batch again for each row: quadratic in the group's size.
// With nested loops off the batch is hashed once, and a lookup only a nested
// loop can make (a LATERAL subquery by key) keeps one, whose penalty pushes
// the plan's estimate past jit_above_cost, hence JIT off (these statements
// take milliseconds; JIT compiles for longer). Only around such statements:
// a statement that looks rows up in a nested loop by a key it joins on
// (River's JobCancel, say) would read a whole index instead. Generic plans
// are made on a statement's first execution and kept, so each such
// statement must always run between the two (TestMergedGroupWrites,
// TestStartRunManyTakesRunsByKey; docs/decisions/0041).
const (
	HashJoinsSQL = "SELECT set_config('weir.enable_nestloop', current_setting('enable_nestloop'), true)," +
		" set_config('weir.jit', current_setting('jit'), true)," +
		" set_config('enable_nestloop', 'off', true), set_config('jit', 'off', true)"
	HashJoinsEndSQL = "SELECT set_config('enable_nestloop', current_setting('weir.enable_nestloop'), true)," +
		" set_config('jit', current_setting('weir.jit'), true)"
)
