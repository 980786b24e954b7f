DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_schedule;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_update;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_query;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_activity;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_inbox;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_event;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_run;
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_workflow;
