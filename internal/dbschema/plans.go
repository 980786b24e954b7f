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
