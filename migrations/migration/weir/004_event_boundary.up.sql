-- weir 004: a workflow task's boundary stored in the row of its first command.
--
-- Every workflow task appends a WorkflowTaskStarted event (its boundary: the
-- time workflow code saw, the task's attempt) and then, usually, commands.
-- A boundary followed by a command in the same append is now stored in that
-- command's row, in boundary (the boundary event's attributes); the event ID
-- before the row's is the boundary's, and its time is the row's. Readers
-- unfold such a row into both events, so the history (IDs 1, 2, 3… without
-- gaps, W4) is the same as before; a task with no command keeps a row of its
-- own. It saves a row and an index entry per task: a third of the rows of a
-- plain sequence of activities.
--
-- Rollout: deploy code that reads both shapes first, then migrate. Workers
-- write the folded shape only once they find this column. To go back to code
-- older than this migration, migrate down first: the down migration unfolds
-- every row.
--
-- Adding a nullable column without a default changes only the catalog (no
-- rewrite); lock_timeout keeps the migration from queuing every writer of
-- weir_event behind a long transaction.
SET LOCAL lock_timeout = '5s';
ALTER TABLE /* TEMPLATE: schema */weir_event ADD COLUMN IF NOT EXISTS boundary jsonb;

-- The histories as readers see them, one row per event whatever the shape:
-- for SQL written by hand (operators, tests), which would otherwise have to
-- unfold the boundaries itself.
CREATE OR REPLACE VIEW /* TEMPLATE: schema */weir_history AS
    SELECT run_id, event_id - 1 AS event_id, 'WorkflowTaskStarted'::text AS type, boundary AS attributes,
           NULL::bigint AS resolves_event_id, created_at
    FROM /* TEMPLATE: schema */weir_event WHERE boundary IS NOT NULL
    UNION ALL
    SELECT run_id, event_id, type, attributes, resolves_event_id, created_at
    FROM /* TEMPLATE: schema */weir_event;
