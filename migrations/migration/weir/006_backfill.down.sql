-- weir 006 down: the backfills go; their River jobs, if any still run, find
-- no row and complete.
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_backfill;
