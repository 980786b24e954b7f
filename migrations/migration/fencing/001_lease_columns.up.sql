-- fencing 001: lease columns on river_job.
--
-- Adding nullable columns without defaults only touches the catalog, so this is
-- instant on a large, live river_job. lock_timeout makes the step give up (and
-- the migrator report it) instead of queueing behind a long transaction and
-- blocking every worker behind it; rerun it when the table is quieter.
SET LOCAL lock_timeout = '5s';

-- The token of the attempt that currently holds the job; NULL when no attempt
-- holds it. Minted on every transition into running (see later versions).
ALTER TABLE /* TEMPLATE: schema */river_job ADD COLUMN IF NOT EXISTS lease_token uuid;

-- When the current lease ends unless renewed. Set only for jobs fetched by a
-- fenced client; NULL leaves the job to River's own rescue rules. Deliberately
-- not indexed: an index would turn every heartbeat into a non-HOT update.
ALTER TABLE /* TEMPLATE: schema */river_job ADD COLUMN IF NOT EXISTS lease_expires_at timestamptz;
