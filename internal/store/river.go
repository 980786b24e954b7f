package store

import "context"

// riverInsertTopic is the topic of River's insert notifications (its
// notifier.NotificationTopicInsert), on which its producers listen, under
// their schema, for new jobs to fetch.
const riverInsertTopic = "river_insert"

// RiverInsertChannel returns the channel River's producers of this schema
// listen on for new jobs: "<schema>.river_insert", the schema being the
// search_path's (read through db) when the Store's is empty, as River's
// listener resolves it.
func (s *Store) RiverInsertChannel(ctx context.Context, db DBTX) (string, error) {
	schema := s.names.Schema
	if schema == "" {
		if err := db.QueryRow(ctx, "SELECT coalesce(current_schema(), '')").Scan(&schema); err != nil {
			return "", err
		}
		if schema == "" {
			return riverInsertTopic, nil
		}
	}
	return schema + "." + riverInsertTopic, nil
}
