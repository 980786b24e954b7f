package store

import "context"

// River's notification topics (its notifier.NotificationTopic*), on which
// its producers listen under their schema: for new jobs to fetch, and for
// jobs to cancel.
const (
	RiverInsertTopic  = "river_insert"
	RiverControlTopic = "river_control"
)

// RiverChannel returns the channel of River's topic for this schema:
// "<schema>.<topic>", the schema being the search_path's (read through db)
// when the Store's is empty, as River's listener resolves it.
func (s *Store) RiverChannel(ctx context.Context, db DBTX, topic string) (string, error) {
	schema := s.names.Schema
	if schema == "" {
		if err := db.QueryRow(ctx, "SELECT coalesce(current_schema(), '')").Scan(&schema); err != nil {
			return "", err
		}
		if schema == "" {
			return topic, nil
		}
	}
	return schema + "." + topic, nil
}
