-- Back to fencing 001's insert trigger: every row inserted running gets a
-- token from it, whatever it came with.
SET LOCAL lock_timeout = '5s';

CREATE OR REPLACE TRIGGER weir_fencing_job_lease_insert
    BEFORE INSERT ON /* TEMPLATE: schema */river_job
    FOR EACH ROW
    WHEN (NEW.state = 'running')
    EXECUTE FUNCTION /* TEMPLATE: schema */weir_fencing_job_lease();
