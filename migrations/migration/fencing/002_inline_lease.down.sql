-- Back to fencing 001's triggers: the lease trigger on every change of state
-- or attempt, and the statement trigger that logs ended attempts.
SET LOCAL lock_timeout = '5s';

CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */weir_fencing_job_attempt_log() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO /* TEMPLATE: schema */weir_job_attempt
        (job_id, attempt, lease_token, attempted_by, started_at, outcome)
    SELECT o.id, o.attempt, o.lease_token,
        o.attempted_by[array_upper(o.attempted_by, 1)], o.attempted_at,
        CASE WHEN j.state = 'running' THEN 'superseded' ELSE j.state::text END
    FROM weir_old_jobs o
    CROSS JOIN LATERAL (
        SELECT state, attempt FROM /* TEMPLATE: schema */river_job WHERE id = o.id
    ) j
    WHERE o.state = 'running' AND (j.state <> 'running' OR j.attempt <> o.attempt);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER weir_fencing_job_lease_update
    BEFORE UPDATE ON /* TEMPLATE: schema */river_job
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.attempt IS DISTINCT FROM NEW.attempt)
    EXECUTE FUNCTION /* TEMPLATE: schema */weir_fencing_job_lease();

CREATE OR REPLACE TRIGGER weir_fencing_job_attempt_log
    AFTER UPDATE ON /* TEMPLATE: schema */river_job
    REFERENCING OLD TABLE AS weir_old_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION /* TEMPLATE: schema */weir_fencing_job_attempt_log();

DROP FUNCTION IF EXISTS /* TEMPLATE: schema */weir_fencing_job_transition();
