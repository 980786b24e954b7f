-- weir 001: the workflow engine's tables.
--
-- Everything weir keeps beside River's tables: namespaces, workflows and
-- their runs, the runs' histories and inboxes, pending activities, queries,
-- updates, schedules and their backfills, and the workers that announce
-- themselves.

-- A namespace isolates workflow IDs, queues and retention. Rows here are
-- never deleted by retention; runs and events refer to a namespace by name.
-- The namespace "default" needs no row: it exists implicitly.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */weir_namespace (
    name text PRIMARY KEY,
    description text NOT NULL DEFAULT '',
    -- How long closed runs (and their history) are kept; NULL means the
    -- workers' default.
    retention interval,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT weir_namespace_name_length CHECK (char_length(name) > 0 AND char_length(name) <= 128)
);

-- One row per workflow ID ever started: the generation counter. Retention
-- never deletes these rows, so generations stay monotonic after old runs go.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */weir_workflow (
    namespace text NOT NULL,
    workflow_id text NOT NULL,
    last_generation bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, workflow_id),
    CONSTRAINT weir_workflow_id_length CHECK (char_length(workflow_id) BETWEEN 1 AND 1000)
);

-- One row per run. The run's identity (namespace, workflow_id, run_id,
-- generation) never changes after insert, whatever happens to its jobs.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */weir_run (
    run_id uuid PRIMARY KEY,
    namespace text NOT NULL,
    workflow_id text NOT NULL,
    generation bigint NOT NULL,
    kind text NOT NULL,
    queue text NOT NULL,
    state text NOT NULL DEFAULT 'running',
    -- Payloads are codec output (JSON by default, possibly encrypted).
    args bytea NOT NULL,
    result bytea,
    failure jsonb,
    -- Idempotency of the start: the caller's request ID and a hash of what
    -- was asked (kind, args, options).
    request_id text NOT NULL,
    request_hash bytea NOT NULL,
    -- The history append point: the ID the next event gets.
    next_event_id bigint NOT NULL DEFAULT 1,
    -- The River job of the workflow task that will next read the inbox, while
    -- one is queued or running; NULL once it committed and none is needed.
    task_job_id bigint,
    -- Deadlines: the run's own (run timeout) and the workflow's across runs
    -- (execution timeout); NULL means none. A running run past either
    -- ends timed_out.
    run_deadline timestamptz,
    execution_deadline timestamptz,
    -- A child workflow's parent: its run, the parent's event that started
    -- it, and what happens to the child if the parent closes first.
    parent_run_id uuid,
    parent_event_id bigint,
    parent_close_policy text,
    -- The run this one continued (continue-as-new): a chain of runs of one
    -- workflow ID, each a generation.
    previous_run_id uuid,
    trace_context jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    closed_at timestamptz,
    CONSTRAINT weir_run_state CHECK (state IN ('running', 'completed', 'failed', 'cancelled', 'terminated', 'continued_as_new', 'timed_out')),
    CONSTRAINT weir_run_closed_at CHECK ((state = 'running') = (closed_at IS NULL)),
    CONSTRAINT weir_run_generation_positive CHECK (generation > 0),
    CONSTRAINT weir_run_request_id_length CHECK (char_length(request_id) BETWEEN 1 AND 255),
    FOREIGN KEY (namespace, workflow_id) REFERENCES /* TEMPLATE: schema */weir_workflow (namespace, workflow_id)
) WITH (
    -- A workflow task's write to its run (next_event_id, task_job_id,
    -- updated_at) is a HOT update, staying on the row's page and adding no
    -- index entry, as long as no indexed column changes and the page has
    -- room: no index covers a column such a write changes, and the fill
    -- factor leaves every row of a full page room for one more version of
    -- itself, even before any is pruned. In a burst all the runs of a page
    -- advance together, while the page is pinned by others and its dead
    -- versions are still visible to someone (decision 0029).
    fillfactor = 50
);

-- W1: one live run per workflow ID, whatever the application does. It is
-- also the sweeper's scan of live runs.
CREATE UNIQUE INDEX IF NOT EXISTS weir_run_live_idx
    ON /* TEMPLATE: schema */weir_run (namespace, workflow_id) WHERE state = 'running';
CREATE UNIQUE INDEX IF NOT EXISTS weir_run_generation_idx
    ON /* TEMPLATE: schema */weir_run (namespace, workflow_id, generation);
-- W2: a request ID names one start per workflow ID.
CREATE UNIQUE INDEX IF NOT EXISTS weir_run_request_idx
    ON /* TEMPLATE: schema */weir_run (namespace, workflow_id, request_id);
CREATE INDEX IF NOT EXISTS weir_run_children_idx
    ON /* TEMPLATE: schema */weir_run (parent_run_id) WHERE parent_run_id IS NOT NULL AND state = 'running';
CREATE UNIQUE INDEX IF NOT EXISTS weir_run_previous_idx
    ON /* TEMPLATE: schema */weir_run (previous_run_id) WHERE previous_run_id IS NOT NULL;
-- Retention: closed runs, oldest first.
CREATE INDEX IF NOT EXISTS weir_run_closed_idx
    ON /* TEMPLATE: schema */weir_run (closed_at) WHERE state <> 'running';
-- List: newest first within a namespace, optionally by kind, by state, or by
-- workflow ID prefix (text_pattern_ops serves LIKE 'prefix%' in any locale).
-- Each ends in (created_at, run_id), the keyset of List's cursor.
CREATE INDEX IF NOT EXISTS weir_run_list_idx
    ON /* TEMPLATE: schema */weir_run (namespace, created_at DESC, run_id DESC);
CREATE INDEX IF NOT EXISTS weir_run_list_kind_idx
    ON /* TEMPLATE: schema */weir_run (namespace, kind, created_at DESC, run_id DESC);
CREATE INDEX IF NOT EXISTS weir_run_list_state_idx
    ON /* TEMPLATE: schema */weir_run (namespace, state, created_at DESC, run_id DESC);
CREATE INDEX IF NOT EXISTS weir_run_list_workflow_id_idx
    ON /* TEMPLATE: schema */weir_run (namespace, workflow_id text_pattern_ops, created_at DESC, run_id DESC);

-- A run's rows in weir_event, weir_activity, weir_inbox, weir_query and
-- weir_update name it by run_id, with no foreign key, whose check would lock
-- the run's row for every row written: each of their writers holds the run's
-- row lock in its transaction (or inserted the run in it), and retention
-- deletes them with their run (ARCHITECTURE.md, decision 0031).

-- The history: append-only, gap-free per run (W4). Every workflow task
-- appends a WorkflowTaskStarted event (its boundary: the time workflow code
-- saw, the task's attempt) and then, usually, commands. A boundary followed
-- by a command of the same append and time is stored in that command's row,
-- in boundary (the boundary event's attributes): the event ID before the
-- row's is the boundary's, and its time is the row's. Readers unfold such a
-- row into both events (weir_history below does it for SQL), so the history
-- is IDs 1, 2, 3… without gaps; a task with no command keeps a row of its
-- own. It saves a row and an index entry per task.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */weir_event (
    run_id uuid NOT NULL,
    event_id bigint NOT NULL,
    type text NOT NULL,
    attributes jsonb NOT NULL DEFAULT '{}',
    -- For an outcome (activity completed/failed/…): the event it resolves.
    resolves_event_id bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- The boundary folded into this row, if any (NULL: none).
    boundary jsonb,
    PRIMARY KEY (run_id, event_id),
    CONSTRAINT weir_event_id_positive CHECK (event_id > 0)
);

-- W5: one outcome per scheduled activity (or timer, child, …), however many
-- attempts, rescues or stale completions happen.
CREATE UNIQUE INDEX IF NOT EXISTS weir_event_resolves_idx
    ON /* TEMPLATE: schema */weir_event (run_id, resolves_event_id) WHERE resolves_event_id IS NOT NULL;

-- The histories as readers see them, one row per event: for SQL written by
-- hand (operators, the UI, tests), which would otherwise have to unfold the
-- boundaries itself.
CREATE OR REPLACE VIEW /* TEMPLATE: schema */weir_history AS
    SELECT run_id, event_id - 1 AS event_id, 'WorkflowTaskStarted'::text AS type, boundary AS attributes,
           NULL::bigint AS resolves_event_id, created_at
    FROM /* TEMPLATE: schema */weir_event WHERE boundary IS NOT NULL
    UNION ALL
    SELECT run_id, event_id, type, attributes, resolves_event_id, created_at
    FROM /* TEMPLATE: schema */weir_event;

-- Results waiting for the run's next workflow task.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */weir_inbox (
    id bigserial PRIMARY KEY,
    run_id uuid NOT NULL,
    type text NOT NULL,
    attributes jsonb NOT NULL DEFAULT '{}',
    -- Writers that may repeat (an activity outcome reported twice) use the
    -- same key, so the second write is a no-op.
    dedup_key text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT weir_inbox_dedup UNIQUE (run_id, dedup_key)
);

-- Activities scheduled and not yet resolved in history: one row from the
-- task that schedules the activity to the task that appends its outcome.
-- Describe shows them (with the River job's attempt and lease); the sweeper
-- resolves those whose job ended without writing an outcome (a plain River
-- worker, a discard by the reaper, a job deleted by hand).
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */weir_activity (
    run_id uuid NOT NULL,
    scheduled_event_id bigint NOT NULL,
    job_id bigint NOT NULL,
    kind text NOT NULL,
    -- The schedule-to-close deadline, if the workflow set one: past it the
    -- activity times out, whatever attempt is running.
    deadline timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, scheduled_event_id)
);
CREATE INDEX IF NOT EXISTS weir_activity_job_idx ON /* TEMPLATE: schema */weir_activity (job_id);
CREATE INDEX IF NOT EXISTS weir_activity_deadline_idx ON /* TEMPLATE: schema */weir_activity (deadline) WHERE deadline IS NOT NULL;

-- Queries waiting for, or holding, their answer. A client inserts one and
-- notifies workers; a worker that runs the workflow's kind in its namespace
-- claims it, replays the run and writes the answer; the client reads it and
-- deletes the row. Rows are short-lived; abandoned ones expire.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */weir_query (
    id bigserial PRIMARY KEY,
    run_id uuid NOT NULL,
    namespace text NOT NULL,
    workflow_kind text NOT NULL,
    kind text NOT NULL,
    args bytea,
    result bytea,
    failure jsonb,
    claimed_at timestamptz,
    answered_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS weir_query_pending_idx
    ON /* TEMPLATE: schema */weir_query (namespace, workflow_kind, id) WHERE answered_at IS NULL;

-- Updates: one row per update sent to a run, from its request to its answer.
-- The inbox carries the update to the run; the workflow task that accepts or
-- rejects it, or completes its handler, writes the answer here and notifies
-- the caller.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */weir_update (
    run_id uuid NOT NULL,
    update_id text NOT NULL,
    kind text NOT NULL,
    state text NOT NULL DEFAULT 'requested',
    result bytea,
    failure jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    PRIMARY KEY (run_id, update_id),
    CONSTRAINT weir_update_state CHECK (state IN ('requested', 'completed', 'rejected')),
    CONSTRAINT weir_update_id_length CHECK (char_length(update_id) BETWEEN 1 AND 255)
);

-- Schedules: durable cron or interval schedules that start workflows. Any
-- worker may start a due schedule: it locks the row (SKIP LOCKED), starts the
-- run with a request ID derived from the due time (so a due time starts at
-- most one run, whatever happens) and moves next_run_at on.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: schema */weir_schedule (
    namespace text NOT NULL,
    schedule_id text NOT NULL,
    cron text,
    every interval,
    jitter interval NOT NULL DEFAULT '0',
    time_zone text NOT NULL DEFAULT 'UTC',
    anchor timestamptz NOT NULL DEFAULT now(),
    workflow_kind text NOT NULL,
    workflow_args jsonb NOT NULL DEFAULT 'null',
    queue text NOT NULL,
    overlap_policy text NOT NULL DEFAULT 'skip',
    paused boolean NOT NULL DEFAULT false,
    note text NOT NULL DEFAULT '',
    next_run_at timestamptz,
    buffered_due_at timestamptz,
    last_due_at timestamptz,
    last_run_id uuid,
    last_workflow_id text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, schedule_id),
    CONSTRAINT weir_schedule_spec CHECK ((cron IS NULL) <> (every IS NULL)),
    CONSTRAINT weir_schedule_overlap CHECK (overlap_policy IN ('skip', 'buffer_one', 'allow_all'))
);
CREATE INDEX IF NOT EXISTS weir_schedule_due_idx
    ON /* TEMPLATE: schema */weir_schedule (next_run_at) WHERE NOT paused;

-- Workers announce themselves. Each running worker keeps one row per
-- namespace it serves, upserted every heartbeat: what it serves (queues,
-- workflow and activity kinds) and who it is. A row is live until expires_at,
-- a few heartbeats after its last one; a worker that stops deletes its rows,
-- one that dies leaves them to expire (and to be deleted by the other workers
-- a while later). Describe, the CLI and the UI read it to say when no live
-- worker serves a run.
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

-- Durable schedule backfills. A backfill of a long range is a row here and a
-- River job (kind weir.schedule_backfill) that starts the range's due times
-- in batches, each batch in one transaction with its progress: the next due
-- time to start and how many were started. A worker that stops mid-way leaves
-- the row where its last batch committed, and the job's next attempt resumes
-- there. A due time starts at most one run whatever happens (its start's
-- request ID comes from the schedule and the due time). The unique range
-- makes a repeated request return the backfill it created first.
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
