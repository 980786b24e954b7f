package dbschema

// StartLockSQL is the SQL expression of the key of the transaction-scoped
// advisory lock that serializes the starts of one workflow ID (W1): a
// client's start, a group of starts and a worker's start of a child all take
// it. schema is the SQL expression of the configured schema (text, "" for the
// search_path's first), namespace and workflowID those of the workflow ID
// and its namespace. The key is built on the resolved schema: a client
// configured with "" and one naming the schema that "" resolves to take the
// same lock. The key's text ('weir.start', the schema, the namespace and the
// workflow ID, joined by chr(31)) is the lock's name across versions.
func StartLockSQL(schema, namespace, workflowID string) string {
	return "hashtextextended('weir.start' || chr(31) || coalesce(nullif(" + schema + "::text, ''), current_schema(), '') || chr(31) || " +
		namespace + "::text || chr(31) || " + workflowID + "::text, 0)"
}
