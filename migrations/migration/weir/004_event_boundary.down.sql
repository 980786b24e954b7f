-- weir 004 down: every folded boundary back into a row of its own, then the
-- column goes. The table is locked first so that no worker folds another
-- boundary between the two (a worker that tries afterwards finds the column
-- gone, and its task is retried unfolded).
SET LOCAL lock_timeout = '5s';
DROP VIEW IF EXISTS /* TEMPLATE: schema */weir_history;
LOCK TABLE /* TEMPLATE: schema */weir_event IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO /* TEMPLATE: schema */weir_event (run_id, event_id, type, attributes, created_at)
    SELECT run_id, event_id - 1, 'WorkflowTaskStarted', boundary, created_at
    FROM /* TEMPLATE: schema */weir_event WHERE boundary IS NOT NULL;
ALTER TABLE /* TEMPLATE: schema */weir_event DROP COLUMN IF EXISTS boundary;
