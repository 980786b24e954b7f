-- fencing 002: a job's attempts go with the job.
--
-- River's cleaner deletes finished jobs (completed and cancelled after a
-- day, discarded after a week), as may an operator or River's API. Their
-- rows in weir_job_attempt stayed behind for ever, one per attempt, with
-- nothing left to read them with: the log is read only together with its
-- jobs. A statement trigger now deletes, in the deleting statement's
-- transaction, the attempts of every job a DELETE on river_job removed,
-- taking them by key (job_id = ANY, on the primary key) whatever the
-- plan. TRUNCATE fires no DELETE trigger: truncate the log with the jobs.
--
-- This step first deletes the attempts whose jobs are gone already. It does
-- so before it creates the trigger, which locks river_job against writers
-- until the step commits: writers wait for the trigger's creation only,
-- not for the clean-up, and a job deleted in between leaves its attempts
-- behind, as before this step. lock_timeout makes the step give up instead
-- of queueing behind a long transaction that holds river_job (see 001).
--
-- Two migrators may run the step at once (rivermigrate and weir's): the
-- advisory lock makes the second wait for the first, then find its work
-- done, instead of racing it to create the function.
SET LOCAL lock_timeout = '5s';

SELECT pg_advisory_xact_lock(hashtextextended('weir fencing 002', 0));

DELETE FROM /* TEMPLATE: schema */weir_job_attempt a
WHERE NOT EXISTS (SELECT 1 FROM /* TEMPLATE: schema */river_job j WHERE j.id = a.job_id);

CREATE OR REPLACE FUNCTION /* TEMPLATE: schema */weir_fencing_forget_attempts() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM /* TEMPLATE: schema */weir_job_attempt WHERE job_id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER weir_fencing_job_delete
    AFTER DELETE ON /* TEMPLATE: schema */river_job
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT
    EXECUTE FUNCTION /* TEMPLATE: schema */weir_fencing_forget_attempts();
