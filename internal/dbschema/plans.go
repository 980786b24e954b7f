package dbschema

// GenericPlansSQL makes the rest of a transaction use generic plans for
// its prepared statements. Postgres plans a prepared statement over arrays
// again on every call while its custom plan, which sees the arrays, looks
// cheaper than the generic one, and it always does: the merged statements
// cost 0.2-0.6 ms of planning per call (pg_stat_statements, a burst), more
// than some of them take to run. Their generic plans take every table by key
// (TestMergedGroupWrites plans them generic), and are made once per
// connection. A generic plan made while a table is young (a new install's
// first burst, before autovacuum's first ANALYZE) costs a sequential scan
// as cheap as an index's and keeps it for the connection's life, so
// sequential scans are off too: a 3,000-workflow burst on a new database
// scanned weir_run 1,065 times (1.4M rows) and weir_activity 249 times
// without it, 14 times (2 rows) and never with it (TestGroupPlansMadeYoung).
// The groups of a worker's step committer send it ahead of their locking
// read and of merged last writes, a client's group of starts ahead of its
// lookup; it ends with the transaction.
const GenericPlansSQL = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true)"
