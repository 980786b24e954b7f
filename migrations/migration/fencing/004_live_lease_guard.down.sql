-- Back to fencing 002's trigger function: no guard on a live lease.
-- As the up step, under river_job's SHARE ROW EXCLUSIVE lock.
SET LOCAL lock_timeout = '5s';

LOCK TABLE /* TEMPLATE: schema */river_job IN SHARE ROW EXCLUSIVE MODE;

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
