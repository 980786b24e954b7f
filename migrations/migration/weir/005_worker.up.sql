-- weir 005: workers announce themselves.
--
-- Each running worker keeps one row per namespace it serves, upserted every
-- heartbeat: what it serves (queues, workflow and activity kinds) and who it
-- is. A row is live until expires_at, a few heartbeats after its last one; a
-- worker that stops deletes its rows, one that dies leaves them to expire
-- (and to be deleted by the other workers a while later). Describe, the CLI
-- and the UI read it to say when no live worker serves a run.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */weir_worker (
    worker_id uuid NOT NULL,
    namespace text NOT NULL,
    -- Who runs it, for people: host and process by default.
    identity text NOT NULL,
    queues text[] NOT NULL,
    workflow_kinds text[] NOT NULL,
    activity_kinds text[] NOT NULL,
    heartbeat_interval interval NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (worker_id, namespace),
    CONSTRAINT weir_worker_identity_length CHECK (char_length(identity) <= 1000)
);

CREATE INDEX IF NOT EXISTS weir_worker_namespace_idx
    ON /* TEMPLATE: schema */weir_worker (namespace, expires_at);
