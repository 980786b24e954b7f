-- weir 005 down: workers no longer announce themselves.
DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_worker;
