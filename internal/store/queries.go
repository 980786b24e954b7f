package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/array"
	"github.com/weirhq/weir/internal/dbschema"
)

type querySQL struct {
	ask, answerOf, del, expire, claim, unclaim, answer string
	asked, answered                                    string // channels
}

func newQuerySQL(n *dbschema.Names) querySQL {
	return querySQL{
		asked:    dbschema.Channel(n.Schema, dbschema.QueryChannel),
		answered: dbschema.Channel(n.Schema, dbschema.QueryAnsweredChannel),
		ask: "WITH q AS (INSERT INTO " + n.Query + " (run_id, namespace, workflow_kind, kind, args, expires_at)" +
			" SELECT run_id, namespace, kind, $2, $3, now() + $4::bigint * interval '1 microsecond' FROM " + n.Run +
			" WHERE run_id = $1 FOR KEY SHARE RETURNING id) SELECT q.id FROM q, LATERAL (SELECT pg_notify($5, q.id::text)) n",
		answerOf: "SELECT result, failure, answered_at IS NOT NULL FROM " + n.Query + " WHERE id = $1",
		del:      "DELETE FROM " + n.Query + " WHERE id = $1",
		expire:   "DELETE FROM " + n.Query + " WHERE expires_at < now() - interval '1 minute'",
		claim: "UPDATE " + n.Query + " q SET claimed_at = now() WHERE id IN (SELECT id FROM " + n.Query +
			"  WHERE answered_at IS NULL AND expires_at > now()" +
			"  AND (claimed_at IS NULL OR claimed_at < now() - $3::bigint * interval '1 microsecond')" +
			"  AND namespace = ANY($1) AND workflow_kind = ANY($2)" +
			"  ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING id, run_id, kind, args",
		unclaim: "UPDATE " + n.Query + " SET claimed_at = NULL WHERE id = $1",
		answer: "WITH a AS (UPDATE " + n.Query + " SET result = $2, failure = $3, answered_at = now() WHERE id = $1 RETURNING id)" +
			" SELECT count(pg_notify($4, a.id::text)) FROM a",
	}
}

// AskQueryParams ask a query of a run.
type AskQueryParams struct {
	RunID   uuid.UUID
	Kind    string
	Args    []byte
	Timeout time.Duration
}

// AskQuery stores a query for the run's workers and notifies them; it
// returns the query's ID, or pgx.ErrNoRows when the run does not exist.
// It locks the run's row (FOR KEY SHARE, which no write of a live run's
// waits for) to its commit, so that retention, which deletes runs under
// their lock, never leaves the query behind its run.
func (s *Store) AskQuery(ctx context.Context, db DBTX, p AskQueryParams) (id int64, err error) {
	return id, db.QueryRow(ctx, s.queries.ask, p.RunID, p.Kind, p.Args, p.Timeout.Microseconds(), s.queries.asked).Scan(&id)
}

// QueryAnswer is a query's answer: Result or Failure once Answered.
type QueryAnswer struct {
	Result, Failure []byte
	Answered        bool
}

// GetQueryAnswer reads a query's answer.
func (s *Store) GetQueryAnswer(ctx context.Context, db DBTX, id int64) (*QueryAnswer, error) {
	var a QueryAnswer
	return &a, db.QueryRow(ctx, s.queries.answerOf, id).Scan(&a.Result, &a.Failure, &a.Answered)
}

// DeleteQuery deletes a query.
func (s *Store) DeleteQuery(ctx context.Context, db DBTX, id int64) error {
	return exec(ctx, db, s.queries.del, id)
}

// DeleteExpiredQueries deletes the queries that expired over a minute ago.
func (s *Store) DeleteExpiredQueries(ctx context.Context, db DBTX) error {
	return exec(ctx, db, s.queries.expire)
}

// ClaimQueriesParams pick the queries a worker answers.
type ClaimQueriesParams struct {
	Namespaces, WorkflowKinds []string
	// ReclaimAfter is how long a claimed, unanswered query waits before
	// another worker may claim it.
	ReclaimAfter time.Duration
	Limit        int
}

// ClaimedQuery is a query a worker claimed.
type ClaimedQuery struct {
	ID    int64
	RunID uuid.UUID
	Kind  string
	Args  []byte
}

// ClaimQueries claims up to Limit open queries, oldest first.
func (s *Store) ClaimQueries(ctx context.Context, db DBTX, p ClaimQueriesParams) ([]ClaimedQuery, error) {
	return collectRows(ctx, db, pgx.RowToStructByPos[ClaimedQuery], s.queries.claim,
		p.Namespaces, p.WorkflowKinds, p.ReclaimAfter.Microseconds(), p.Limit)
}

// UnclaimQuery gives a claimed query back, to be claimed again.
func (s *Store) UnclaimQuery(ctx context.Context, db DBTX, id int64) error {
	return exec(ctx, db, s.queries.unclaim, id)
}

// AnswerQueryParams answer a query with Result or Failure (JSON).
type AnswerQueryParams struct {
	ID              int64
	Result, Failure []byte
}

// AnswerQuery records a query's answer and notifies the asker.
func (s *Store) AnswerQuery(ctx context.Context, db DBTX, p AnswerQueryParams) error {
	return exec(ctx, db, s.queries.answer, p.ID, p.Result, p.Failure, s.queries.answered)
}

// Notify sends notifications on channels with payloads (pairwise) in one
// statement; it needs no schema.
func Notify(ctx context.Context, db DBTX, channels, payloads []string) error {
	return exec(ctx, db, "SELECT count(pg_notify(c, p)) FROM unnest($1::text[], $2::text[]) AS n(c, p)", array.Texts(channels), array.Texts(payloads))
}
