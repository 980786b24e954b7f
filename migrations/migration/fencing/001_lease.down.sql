SET LOCAL lock_timeout = '5s';

DROP TRIGGER IF EXISTS weir_fencing_job_attempt_log ON /* TEMPLATE: schema */river_job;
DROP TRIGGER IF EXISTS weir_fencing_job_lease_insert ON /* TEMPLATE: schema */river_job;
DROP TRIGGER IF EXISTS weir_fencing_job_lease_update ON /* TEMPLATE: schema */river_job;
DROP FUNCTION IF EXISTS /* TEMPLATE: schema */weir_fencing_job_attempt_log();
DROP FUNCTION IF EXISTS /* TEMPLATE: schema */weir_fencing_job_lease();
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_job_attempt;
ALTER TABLE /* TEMPLATE: schema */river_job DROP COLUMN IF EXISTS lease_details;
ALTER TABLE /* TEMPLATE: schema */river_job DROP COLUMN IF EXISTS lease_last_token;
ALTER TABLE /* TEMPLATE: schema */river_job DROP COLUMN IF EXISTS lease_expires_at;
ALTER TABLE /* TEMPLATE: schema */river_job DROP COLUMN IF EXISTS lease_token;
