-- weir 001: namespaces.
--
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
