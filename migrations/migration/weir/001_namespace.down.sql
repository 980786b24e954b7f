DROP TABLE IF EXISTS /* TEMPLATE: schema */weir_namespace;
