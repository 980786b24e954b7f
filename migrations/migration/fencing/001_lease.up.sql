-- fencing 001: lease columns on river_job, the attempt log, and the trigger
-- that mints and revokes lease tokens.
--
-- Adding nullable columns without defaults only touches the catalog, so this is
-- instant on a large, live river_job. lock_timeout makes the step give up (and
-- the migrator report it) instead of queueing behind a long transaction and
-- blocking every worker behind it; rerun it when the table is quieter.
SET LOCAL lock_timeout = '5s';

-- The token of the attempt that currently holds the job; NULL when no attempt
-- holds it. Minted on every transition into running (by the trigger below).
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
-- that started before fencing was installed), the client that ran it, when it
-- started (River's attempted_at) and ended, and the state it left the job in
-- ("superseded" when a new attempt replaced it while it was running). The
-- attempt that holds a job now is river_job's own (lease_token, attempted_at).
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

-- The row trigger function. On a transition out of running (or to a new
-- attempt) it remembers the ending attempt's token as lease_last_token and
-- revokes the lease; on a transition into running it mints a fresh token. It
-- sets lease_expires_at only when the fetching session asked for a lease (the
-- fencing Pilot sets weir.fencing_lease_ttl for its fetch transaction), so
-- jobs fetched by unfenced clients keep River's own rescue rules.
CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */weir_fencing_job_lease() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ttl text;
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.state = 'running' THEN
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
    ELSIF TG_OP = 'INSERT' THEN
        NEW.lease_token := NULL;
        NEW.lease_expires_at := NULL;
    END IF;

    RETURN NEW;
END
$$;

-- The statement trigger function: logs, in one INSERT per statement, every
-- attempt the statement ended (River completes, fetches and rescues jobs in
-- batches, so a row-by-row log would cost an INSERT per job). It captures
-- only the rows as they were before the statement and looks each ended
-- attempt's job up by primary key for the state it left it in.
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

-- Fires only when the state or the attempt changes, so heartbeats and metadata
-- merges pay nothing for it.
CREATE OR REPLACE TRIGGER weir_fencing_job_lease_update
    BEFORE UPDATE ON /* TEMPLATE: schema */river_job
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.attempt IS DISTINCT FROM NEW.attempt)
    EXECUTE FUNCTION /* TEMPLATE: schema */weir_fencing_job_lease();

-- Rows inserted already running (tests, tools) get a token too.
CREATE OR REPLACE TRIGGER weir_fencing_job_lease_insert
    BEFORE INSERT ON /* TEMPLATE: schema */river_job
    FOR EACH ROW
    WHEN (NEW.state = 'running')
    EXECUTE FUNCTION /* TEMPLATE: schema */weir_fencing_job_lease();

CREATE OR REPLACE TRIGGER weir_fencing_job_attempt_log
    AFTER UPDATE ON /* TEMPLATE: schema */river_job
    REFERENCING OLD TABLE AS weir_old_jobs
    FOR EACH STATEMENT
    EXECUTE FUNCTION /* TEMPLATE: schema */weir_fencing_job_attempt_log();
