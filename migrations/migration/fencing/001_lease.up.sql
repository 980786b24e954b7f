-- fencing 001: lease columns on river_job, the attempt log, and the trigger
-- that mints and revokes lease tokens for writers that do not do it
-- themselves.
--
-- The fencing driver's own statements (its fetch, its state writes, its
-- claims) mint, revoke and log inline, one statement per batch and no
-- plpgsql per row. Every other writer (River's unmodified SQL from plain
-- clients, River's rescuer, the lease reaper, operators) gets all of it from
-- the trigger, which runs only when a statement left it work to do.
--
-- Adding nullable columns without defaults only touches the catalog, so this
-- is instant on a large, live river_job. ALTER TABLE takes river_job's
-- ACCESS EXCLUSIVE lock first, before any weaker one, so the step only waits
-- for the transactions ahead of it and deadlocks with none of them (a
-- worker's transaction that read river_job and then writes it). lock_timeout
-- makes the step give up (and the migrator report it) instead of queueing
-- behind a long transaction and blocking every worker behind it; rerun it
-- when the table is quieter.
SET LOCAL lock_timeout = '5s';

-- The token of the attempt that currently holds the job; NULL when no attempt
-- holds it (a job fetched by a plain River client, or running since before
-- this migration, also holds none).
ALTER TABLE /* TEMPLATE: schema */river_job ADD COLUMN IF NOT EXISTS lease_token uuid;

-- When the current lease ends unless renewed. Set only for jobs fetched by a
-- fenced client; NULL leaves the job to River's own rescue rules. Deliberately
-- not indexed: an index would turn every heartbeat into a non-HOT update.
ALTER TABLE /* TEMPLATE: schema */river_job ADD COLUMN IF NOT EXISTS lease_expires_at timestamptz;

-- The token of the attempt that held the job last, kept when the job leaves
-- running so that a repeated write by that attempt (River's executor re-sends
-- "completed" after JobCompleteTx) is told apart from a stale one.
ALTER TABLE /* TEMPLATE: schema */river_job ADD COLUMN IF NOT EXISTS lease_last_token uuid;

-- Progress details stored by fencing.Heartbeat, readable by the job's next
-- attempt. Not indexed.
ALTER TABLE /* TEMPLATE: schema */river_job ADD COLUMN IF NOT EXISTS lease_details jsonb;

-- One row per finished attempt of a job: its lease token (NULL for an attempt
-- that held none), the client that ran it, when it started (River's
-- attempted_at) and ended, and the state it left the job in ("superseded"
-- when a new attempt replaced it while it was running). The attempt that
-- holds a job now is river_job's own (lease_token, attempted_at).
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */weir_job_attempt (
    job_id bigint NOT NULL,
    id bigint GENERATED ALWAYS AS IDENTITY,
    attempt smallint NOT NULL,
    lease_token uuid,
    attempted_by text,
    started_at timestamptz,
    finished_at timestamptz NOT NULL DEFAULT now(),
    outcome text NOT NULL,
    -- One index serves both uniqueness and "the attempts of job X, in
    -- order"; it is created with the empty table, so no CONCURRENTLY is
    -- needed.
    PRIMARY KEY (job_id, id)
);

-- The row trigger function, for inserts and updates.
--
-- The guard: a statement that does not prove the attempt holding a live
-- lease cannot take the job from it. River's own statements (a plain
-- riverpgxv5 client's completer and JobCompleteTx, River's rescuer in a plain
-- process) guard a job's state write with state = 'running' only, and leave
-- the lease columns as they were; on a row whose lease is alive (a token,
-- and an expiry not yet past) the trigger refuses such a transition (out of
-- running, or to a new attempt). The refusal leaves the row unchanged and
-- lets the statement go on with its other rows (the trigger skips the row,
-- with a NOTICE); it raises no error. River's completer then gets the row
-- back still running, emits no event for it and does not retry it; River's
-- rescuer pages on; the other jobs of their batches are written. An error
-- would fail the whole batch, which River's completer retries with every
-- later completion added, for ever. The fencing driver's statements revoke
-- the lease themselves, in the statement that proved the attempt, and never
-- reach this check; the lease reaper and the fencing Pilot's rescuer only
-- take jobs whose lease expired. An operator who must take a job from a
-- live attempt ends its lease explicitly (sets lease_expires_at in the
-- statement, or expires it first and lets the reaper recover it). Rows
-- without a live lease (fetched by plain clients, running before this
-- migration, or whose lease expired) keep River's own rules.
--
-- On a transition out of running (or to a new attempt) it logs the ending
-- attempt, remembers its token as lease_last_token and revokes the lease; on
-- a transition into running (or an insert of a running row) it mints a fresh
-- token. It sets lease_expires_at only when the writing session asked for a
-- lease (setting weir.fencing_lease_ttl), so jobs fetched by plain clients
-- keep River's own rescue rules. On an insert OLD is NULL: only the minting
-- applies.
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

-- Fires only on a transition into or out of running that the statement did
-- not do itself, recognised by the row it wrote:
--
--   - into running with a fresh token (not the old token, not the last one):
--     minted inline;
--   - out of running with the old (non-NULL) token moved to lease_last_token
--     and no lease left: revoked inline, and the statement logged the attempt.
--
-- Heartbeats, metadata merges and transitions that neither enter nor leave
-- running (the scheduler's retryable -> available) pay nothing for it.
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

-- A row inserted already running gets a token, unless it is inserted in a
-- claim's shape (attempt 1, no earlier token) with a lease of its own: the
-- fencing driver's claims insert their jobs running with a token and an
-- expiry, as its fetch does. Any other insert of a running row (tests,
-- tools, rivertest, a restore of an archived row that had been running)
-- gets a fresh token. Tokens are fences, not secrets: a writer that may
-- insert into river_job may also set any lease column.
CREATE OR REPLACE TRIGGER weir_fencing_job_lease_insert
    BEFORE INSERT ON /* TEMPLATE: schema */river_job
    FOR EACH ROW
    WHEN (NEW.state = 'running' AND (NEW.lease_token IS NULL OR NEW.lease_expires_at IS NULL
        OR NEW.attempt <> 1 OR NEW.lease_last_token IS NOT NULL))
    EXECUTE FUNCTION /* TEMPLATE: schema */weir_fencing_job_transition();
