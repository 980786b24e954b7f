-- fencing 004: a statement that does not prove the attempt holding a live
-- lease cannot take the job from it.
--
-- River's own statements (a plain riverpgxv5 client's completer and
-- JobCompleteTx, River's rescuer in a plain process, JobSetStateIfRunningMany
-- from any driver that is not fencing's) guard a job's state write with
-- state = 'running' only. On a job whose lease is alive they would end the
-- attempt that holds it: the trigger then moved the holder's token to
-- lease_last_token, so that the holder's own completion looked like a
-- harmless repeat and both attempts' side effects committed. From this
-- version on, the trigger refuses such a transition (out of running, or to
-- a new attempt) on a row whose lease is alive (a token, and an expiry not
-- yet past) when the statement leaves the lease columns as they were, which
-- River's statements always do. The fencing driver's statements revoke the
-- lease themselves, in the statement that proved the attempt (fencing 002),
-- and never reach this check; the lease reaper and the fencing Pilot's
-- rescuer only take jobs whose lease expired. An operator who must take a
-- job from a live attempt ends its lease explicitly (sets lease_expires_at
-- in the statement, or expires it first and lets the reaper recover it).
--
-- The refusal leaves the row unchanged and lets the statement go on with
-- its other rows (the trigger skips the row, with a NOTICE); it raises no
-- error. River's completer then gets the row back still running, emits no
-- event for it and does not retry it; River's rescuer pages on; the other
-- jobs of their batches are written. An error would fail the whole batch,
-- which River's completer retries with every later completion added, for
-- ever. River's JobCompleteTx gets the row back still running too (it
-- returns it with no error): a plain worker's transaction is not aborted,
-- which only a fenced client's is.
--
-- Rows without a live lease (fetched by plain clients, running before the
-- fencing migration, or whose lease expired) keep River's own rules.
--
-- Only the trigger function changes (catalog only). The step takes the lock
-- CREATE TRIGGER takes on river_job (SHARE ROW EXCLUSIVE, which conflicts
-- with itself and with writers) and no other, so that concurrent runs of the
-- step replace the function one after another (two at once fail with "tuple
-- concurrently updated"), and it waits, at most lock_timeout, only for the
-- transactions ahead of it.
SET LOCAL lock_timeout = '5s';

LOCK TABLE /* TEMPLATE: schema */river_job IN SHARE ROW EXCLUSIVE MODE;

CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */weir_fencing_job_transition() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ttl text;
BEGIN
    -- The guard: an unproven transition out of a live lease.
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
