-- A workflow task's write to its run (next_event_id, task_job_id,
-- updated_at) can be a HOT update: it stays on the row's page and adds no
-- index entry, as long as no indexed column changes and the page has room.
--
-- weir_run_running_idx indexed updated_at, so every such write added an entry
-- to each of weir_run's indexes. The sweeper's scan of live runs does not
-- need it: weir_run_live_idx covers exactly the live runs, on columns that do
-- not change while a run lives. A fill factor leaves the room on each page.
-- Catalog changes only (DROP INDEX takes an exclusive lock on weir_run for a
-- moment), under lock_timeout so a long transaction holding the table makes
-- the migration fail and retry rather than block every run behind it.
-- Pages written before keep no room; they get it as they are rewritten.
SET LOCAL lock_timeout = '5s';
DROP INDEX IF EXISTS /* TEMPLATE: schema */weir_run_running_idx;
ALTER TABLE /* TEMPLATE: schema */weir_run SET (fillfactor = 80);
