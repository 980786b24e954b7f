-- Removes everything fencing 001 installed. The strongest lock first, so the
-- step only waits (at most lock_timeout) for the transactions ahead of it.
SET LOCAL lock_timeout = '5s';

LOCK TABLE /* TEMPLATE: schema */river_job IN ACCESS EXCLUSIVE MODE;

DROP TRIGGER IF EXISTS weir_fencing_job_lease_insert ON /* TEMPLATE: schema */river_job;
DROP TRIGGER IF EXISTS weir_fencing_job_lease_update ON /* TEMPLATE: schema */river_job;
DROP FUNCTION IF EXISTS /* TEMPLATE: schema */weir_fencing_job_transition();
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_job_attempt;
ALTER TABLE /* TEMPLATE: schema */river_job DROP COLUMN IF EXISTS lease_details;
ALTER TABLE /* TEMPLATE: schema */river_job DROP COLUMN IF EXISTS lease_last_token;
ALTER TABLE /* TEMPLATE: schema */river_job DROP COLUMN IF EXISTS lease_expires_at;
ALTER TABLE /* TEMPLATE: schema */river_job DROP COLUMN IF EXISTS lease_token;
