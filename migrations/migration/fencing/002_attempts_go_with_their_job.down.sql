-- Removes what fencing 002 installed: deleted jobs leave their attempts in
-- weir_job_attempt again.
SET LOCAL lock_timeout = '5s';

DROP TRIGGER IF EXISTS weir_fencing_job_delete ON /* TEMPLATE: schema */river_job;
DROP FUNCTION IF EXISTS /* TEMPLATE: schema */weir_fencing_forget_attempts();
