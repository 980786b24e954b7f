-- weir 006: durable schedule backfills.
--
-- A backfill of a long range is a row here and a River job (kind
-- weir.schedule_backfill) that starts the range's due times in batches, each
-- batch in one transaction with its progress: the next due time to start and
-- how many were started. A worker that stops mid-way leaves the row where its
-- last batch committed, and the job's next attempt resumes there. A due time
-- starts at most one run whatever happens (its start's request ID comes from
-- the schedule and the due time). The unique range makes a repeated request
-- return the backfill it created first.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */weir_backfill (
    backfill_id uuid PRIMARY KEY,
    namespace text NOT NULL,
    schedule_id text NOT NULL,
    range_start timestamptz NOT NULL,
    range_end timestamptz NOT NULL,
    state text NOT NULL DEFAULT 'running',
    total bigint NOT NULL,
    started bigint NOT NULL DEFAULT 0,
    next_due_at timestamptz,
    error text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT weir_backfill_range UNIQUE (namespace, schedule_id, range_start, range_end),
    CONSTRAINT weir_backfill_state CHECK (state IN ('running', 'completed', 'failed'))
);
