-- weir 004 down: every folded boundary back into a row of its own, then the
-- column and the view go.
--
-- Locks in the order a workflow task takes them, so that running workers
-- wait instead of deadlocking: a task locks its run (SELECT ... FOR UPDATE,
-- ROW SHARE on weir_run) before it writes weir_event, and the INSERT below
-- checks each row's run (FOR KEY SHARE). EXCLUSIVE on weir_run waits for the
-- tasks that hold runs and holds new ones at their run's lock (reads of
-- weir_run go on); ACCESS EXCLUSIVE on weir_event then waits for its
-- readers. No worker can fold a boundary after the INSERT's snapshot; one
-- that tries after the commit finds the column gone, and its task is
-- retried unfolded. The INSERT reads the whole table under these locks:
-- workers wait for it.
SET LOCAL lock_timeout = '5s';
LOCK TABLE /* TEMPLATE: schema */weir_run IN EXCLUSIVE MODE;
LOCK TABLE /* TEMPLATE: schema */weir_event IN ACCESS EXCLUSIVE MODE;
DROP VIEW IF EXISTS /* TEMPLATE: schema */weir_history;
INSERT INTO /* TEMPLATE: schema */weir_event (run_id, event_id, type, attributes, created_at)
    SELECT run_id, event_id - 1, 'WorkflowTaskStarted', boundary, created_at
    FROM /* TEMPLATE: schema */weir_event WHERE boundary IS NOT NULL;
ALTER TABLE /* TEMPLATE: schema */weir_event DROP COLUMN boundary;
