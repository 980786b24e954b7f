-- fencing 003: the attempt that finalizes a job stays on the job's row.
--
-- Every finished attempt was a row of weir_job_attempt, written in the
-- statement that ended it. For the attempt that finalizes its job
-- (completed, cancelled, discarded), that row repeats what the job's own row
-- keeps for as long as the job stays final: attempt, attempted_at (the
-- start), the last of attempted_by, lease_last_token (its token), finalized_at
-- (its end) and state (its outcome). Most jobs finish in one attempt, so the
-- log cost most jobs an insert (a heap row, an index entry, a sequence value)
-- and about a tenth of their WAL for nothing (decision 0060).
--
-- From this step, no statement logs a transition out of running into a final
-- state; the job's row is its final attempt's record. When a job leaves its
-- final state (River's JobRetry, River UI's retry, an operator's UPDATE), the
-- row is about to be overwritten, and a trigger logs the final attempt then,
-- from the row as it was. The attempts of a job are therefore its log rows
-- plus, while the job is final, its final attempt when no log row has that
-- attempt's number and start: the same attempt logged before this step (or
-- by a job cancelled while not running, whose last attempt ended earlier and
-- is logged) is never counted twice.
--
-- Two migrators may run the step at once (rivermigrate and weir's): the
-- advisory lock makes the second wait for the first (see 002).
SET LOCAL lock_timeout = '5s';

SELECT pg_advisory_xact_lock(hashtextextended('weir fencing 003', 0));

-- 001's function, except that a transition out of running into a final
-- state is not logged.
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
        IF NEW.state NOT IN ('completed', 'cancelled', 'discarded') THEN
            INSERT INTO /* TEMPLATE: schema */weir_job_attempt
                (job_id, attempt, lease_token, attempted_by, started_at, outcome)
            VALUES (OLD.id, OLD.attempt, OLD.lease_token,
                OLD.attempted_by[array_upper(OLD.attempted_by, 1)], OLD.attempted_at,
                CASE WHEN NEW.state = 'running' THEN 'superseded' ELSE NEW.state::text END);
        END IF;
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

-- Logs the final attempt of a job leaving its final state, unless the log has
-- it: an AFTER trigger, so only for an update that happened.
CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */weir_fencing_log_final_attempt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO /* TEMPLATE: schema */weir_job_attempt
        (job_id, attempt, lease_token, attempted_by, started_at, finished_at, outcome)
    SELECT OLD.id, OLD.attempt, OLD.lease_last_token, OLD.attempted_by[array_upper(OLD.attempted_by, 1)],
        OLD.attempted_at, coalesce(OLD.finalized_at, now()), OLD.state::text
    WHERE NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */weir_job_attempt a
        WHERE a.job_id = OLD.id AND a.attempt = OLD.attempt AND a.started_at = OLD.attempted_at);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER weir_fencing_job_unfinalize
    AFTER UPDATE ON /* TEMPLATE: schema */river_job
    FOR EACH ROW
    WHEN (OLD.state IN ('completed', 'cancelled', 'discarded') AND NEW.state IS DISTINCT FROM OLD.state
        AND OLD.attempt > 0 AND OLD.attempted_at IS NOT NULL)
    EXECUTE FUNCTION /* TEMPLATE: schema */weir_fencing_log_final_attempt();
