SET LOCAL lock_timeout = '5s';

ALTER TABLE /* TEMPLATE: schema */river_job DROP COLUMN IF EXISTS lease_expires_at;
ALTER TABLE /* TEMPLATE: schema */river_job DROP COLUMN IF EXISTS lease_token;
