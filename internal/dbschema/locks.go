package dbschema

// StartLockID names one workflow ID of a namespace in the start lock's key
// (StartLockSQL).
func StartLockID(namespace, workflowID string) string { return namespace + "\x1f" + workflowID }

// StartLockSQL is the SQL expression of the key of the transaction-scoped
// advisory lock that serializes the starts of one workflow ID (W1): a
// client's start, a group of starts and a worker's start of a child all take
// it. schema is the SQL expression of the configured schema (text, "" for the
// search_path's first) and id that of the workflow ID's StartLockID. The key
// is built on the resolved schema: a client configured with "" and one naming
// the schema that "" resolves to take the same lock.
func StartLockSQL(schema, id string) string {
	return "hashtextextended('weir.start' || chr(31) || coalesce(nullif(" + schema + "::text, ''), current_schema(), '') || chr(31) || " + id + "::text, 0)"
}
