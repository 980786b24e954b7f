-- fencing 002: the lease trigger fires only when a statement left it work to
-- do, and logs ended attempts row by row instead of by a statement trigger.
--
-- The fencing driver's own fetch and completion statements mint, revoke and
-- log inline (one statement per batch, no plpgsql per row); every other
-- writer (River's unmodified SQL from unfenced clients, River's rescuer, the
-- lease reaper, operators) still gets all of it from the trigger. The trigger
-- recognises a statement that did the work itself by the row it wrote:
--
--   - into running with a fresh token (not the old token, not the last one):
--     minted inline;
--   - out of running with the old (non-NULL) token moved to lease_last_token
--     and no lease left: revoked inline, and the statement logged the attempt.
--
-- Transitions that neither enter nor leave running (the scheduler's
-- retryable -> available, for example) no longer run the trigger at all; it
-- did nothing for them. The statement trigger that logged attempts captured
-- every updated row of every statement on river_job (fetches and heartbeats
-- included) to log a few; it is replaced by the row trigger's log.
--
-- Only functions and triggers change (catalog only), under lock_timeout.
SET LOCAL lock_timeout = '5s';

-- DROP TRIGGER below needs river_job's ACCESS EXCLUSIVE lock, CREATE TRIGGER a
-- weaker one. Taken in that order, the step held the weaker lock while it
-- waited for the stronger, and a worker's transaction that had read river_job
-- and then wrote it waited for the step in turn: a deadlock, seen with a
-- fenced client running across the migration. Taking the strongest lock first
-- makes the step only wait (at most lock_timeout) for the transactions ahead
-- of it.
LOCK TABLE /* TEMPLATE: schema */river_job IN ACCESS EXCLUSIVE MODE;

-- The row trigger function: as weir_fencing_job_lease, plus the attempt log
-- entry of the attempt a transition out of running (or to a new attempt)
-- ends.
CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */weir_fencing_job_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ttl text;
BEGIN
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

CREATE OR REPLACE TRIGGER weir_fencing_job_lease_update
    BEFORE UPDATE ON /* TEMPLATE: schema */river_job
    FOR EACH ROW
    WHEN ((OLD.state IS DISTINCT FROM NEW.state OR OLD.attempt IS DISTINCT FROM NEW.attempt)
        AND (OLD.state = 'running' OR NEW.state = 'running')
        AND NOT (
            -- Minted inline.
            (OLD.state <> 'running' AND NEW.state = 'running'
                AND NEW.lease_token IS NOT NULL
                AND NEW.lease_token IS DISTINCT FROM OLD.lease_token
                AND NEW.lease_token IS DISTINCT FROM OLD.lease_last_token)
            -- Revoked (and logged) inline.
            OR (OLD.state = 'running' AND NEW.state <> 'running'
                AND OLD.lease_token IS NOT NULL
                AND NEW.lease_token IS NULL
                AND NEW.lease_expires_at IS NULL
                AND NEW.lease_last_token = OLD.lease_token)))
    EXECUTE FUNCTION /* TEMPLATE: schema */weir_fencing_job_transition();

DROP TRIGGER IF EXISTS weir_fencing_job_attempt_log ON /* TEMPLATE: schema */river_job;
DROP FUNCTION IF EXISTS /* TEMPLATE: schema */weir_fencing_job_attempt_log();
