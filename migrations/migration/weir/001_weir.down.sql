-- weir 001 down: every weir_* table goes, with every run and history in
-- them; River's tables and the fencing line stay.
DROP VIEW IF EXISTS /* TEMPLATE: schema */weir_history;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_backfill;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_worker;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_schedule;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_update;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_query;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_activity;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_inbox;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_event;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_run;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_workflow;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_namespace;
