-- Undoes fencing 003: every finished attempt is logged again when it ends,
-- and the final attempts kept only on their jobs' rows are logged now. The
-- lock first, so that no job finalizes between the two.
SET LOCAL lock_timeout = '5s';

LOCK TABLE /* TEMPLATE: schema */river_job IN SHARE ROW EXCLUSIVE MODE;

DROP TRIGGER IF EXISTS weir_fencing_job_unfinalize ON /* TEMPLATE: schema */river_job;
DROP FUNCTION IF EXISTS /* TEMPLATE: schema */weir_fencing_log_final_attempt();

-- 001's function.
CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */weir_fencing_job_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ttl text;
BEGIN
    IF OLD.state = 'running'
        AND OLD.lease_token IS NOT NULL
        AND OLD.lease_expires_at >= now()
        AND NEW.lease_token IS NOT DISTINCT FROM OLD.lease_token
        AND NEW.lease_expires_at IS NOT DISTINCT FROM OLD.lease_expires_at
    THEN
        RAISE NOTICE 'fencing: job % left running: attempt % holds a live lease (until %) that the statement does not prove',
            OLD.id, OLD.attempt, OLD.lease_expires_at
            USING HINT = 'Write the job through a fenced client (fencing.NewDriver), or end the lease in the statement.';
        RETURN NULL;
    END IF;

    IF OLD.state = 'running' THEN
        INSERT INTO /* TEMPLATE: schema */weir_job_attempt
            (job_id, attempt, lease_token, attempted_by, started_at, outcome)
        VALUES (OLD.id, OLD.attempt, OLD.lease_token,
            OLD.attempted_by[array_upper(OLD.attempted_by, 1)], OLD.attempted_at,
            CASE WHEN NEW.state = 'running' THEN 'superseded' ELSE NEW.state::text END);
        NEW.lease_last_token := OLD.lease_token;
        NEW.lease_token := NULL;
        NEW.lease_expires_at := NULL;
    END IF;

    IF NEW.state = 'running' THEN
        NEW.lease_token := gen_random_uuid();
        ttl := current_setting('weir.fencing_lease_ttl', true);
        IF ttl IS NOT NULL AND ttl <> '' THEN
            NEW.lease_expires_at := now() + ttl::interval;
        ELSE
            NEW.lease_expires_at := NULL;
        END IF;
    END IF;

    RETURN NEW;
END
$$;

INSERT INTO /* TEMPLATE: schema */weir_job_attempt
    (job_id, attempt, lease_token, attempted_by, started_at, finished_at, outcome)
SELECT j.id, j.attempt, j.lease_last_token, j.attempted_by[array_upper(j.attempted_by, 1)],
    j.attempted_at, coalesce(j.finalized_at, now()), j.state::text
FROM /* TEMPLATE: schema */river_job j
WHERE j.state IN ('completed', 'cancelled', 'discarded') AND j.attempt > 0 AND j.attempted_at IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */weir_job_attempt a
        WHERE a.job_id = j.id AND a.attempt = j.attempt AND a.started_at = j.attempted_at)
ORDER BY j.finalized_at, j.id;
