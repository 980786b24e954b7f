-- fencing 003: a row inserted already running in a claim's shape (attempt 1,
-- no earlier token) and with a lease of its own keeps that lease: the insert
-- trigger does not run for it.
--
-- The fencing driver's claims (fencing.QueueClaim: weir's activities, which
-- the worker that schedules them runs itself) insert their jobs running, and
-- now give each a token and an expiry in the insert itself, as its fetch
-- does (fencing 002). On fencing 002 the insert trigger still ran for them,
-- in plpgsql, and replaced the token: about 0.1 ms of a claim's 0.2-0.3 ms
-- on an idle server (EXPLAIN ANALYZE), three claims on the way of every
-- three-activity workflow. Any other insert of a running row (tests, tools,
-- rivertest, a restore of an archived row that had been running) still gets
-- a fresh token from the trigger. Tokens are fences, not secrets: a writer
-- that may insert into river_job may also set any lease column.
--
-- Only the trigger's WHEN changes (catalog only). CREATE OR REPLACE TRIGGER
-- takes one lock on river_job (SHARE ROW EXCLUSIVE) and no other, so it
-- waits, at most lock_timeout, only for the transactions ahead of it.
SET LOCAL lock_timeout = '5s';

CREATE OR REPLACE TRIGGER weir_fencing_job_lease_insert
    BEFORE INSERT ON /* TEMPLATE: schema */river_job
    FOR EACH ROW
    WHEN (NEW.state = 'running' AND (NEW.lease_token IS NULL OR NEW.lease_expires_at IS NULL
        OR NEW.attempt <> 1 OR NEW.lease_last_token IS NOT NULL))
    EXECUTE FUNCTION /* TEMPLATE: schema */weir_fencing_job_lease();
