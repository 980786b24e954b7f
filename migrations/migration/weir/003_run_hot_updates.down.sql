SET LOCAL lock_timeout = '5s';
ALTER TABLE /* TEMPLATE: schema */weir_run RESET (fillfactor);
CREATE INDEX IF NOT EXISTS weir_run_running_idx
    ON /* TEMPLATE: schema */weir_run (updated_at) WHERE state = 'running';
