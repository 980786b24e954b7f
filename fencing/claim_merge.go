package fencing

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// claimSQL is QueueClaim's insert: $1 the lease's TTL, then the job's args,
// claimer, kind, max attempts, metadata, priority and queue ($2-$8), and its
// lease token ($9). claimWithIDSQL is the same for a job whose ID the caller
// reserved: the ID is $2, and the rest follow it ($3-$10).
func claimSQL(schema string) string {
	return cachedSQL(&claimCache, schema, func(schema string) string { return buildClaimSQL(schema, false) })
}

func claimWithIDSQL(schema string) string {
	return cachedSQL(&claimWithIDCache, schema, func(schema string) string { return buildClaimSQL(schema, true) })
}

var claimCache, claimWithIDCache, claimManyCache sync.Map

// buildClaimSQL builds claimSQL, or claimWithIDSQL when withID. The insert
// gives the job its lease itself: the token the claimer minted and an
// expiry of the TTL from now; the insert trigger leaves such a row alone.
func buildClaimSQL(schema string, withID bool) string {
	columns, values := "", "$2, 1, now(), ARRAY[$3::text], $4, $5, $6, $7, $8, $9::uuid"
	if withID {
		columns, values = "id, ", "$2, $3, 1, now(), ARRAY[$4::text], $5, $6, $7, $8, $9, $10::uuid"
	}
	return "WITH claimed AS (INSERT INTO " + tableName(schema, "river_job") +
		"  (" + columns + "args, attempt, attempted_at, attempted_by, kind, max_attempts, metadata, priority, queue, lease_token," +
		"   lease_expires_at, scheduled_at, state, tags)" +
		"  VALUES (" + values + ", now() + $1::interval, now(), 'running', '{}')" +
		"  RETURNING id, attempted_at, created_at, coalesce(lease_token::text, '') AS token, lease_expires_at)" +
		" SELECT id, attempted_at, created_at, token, lease_expires_at," +
		"  1 / (token <> '' AND lease_expires_at IS NOT NULL)::int FROM claimed"
}

// claimManySQL is claimWithIDSQL for many jobs, over arrays. Its rows are
// claimWithIDSQL's, one per job.
func claimManySQL(schema string) string {
	return cachedSQL(&claimManyCache, schema, func(schema string) string {
		return "WITH claimed AS (INSERT INTO " + tableName(schema, "river_job") +
			"  (id, args, attempt, attempted_at, attempted_by, kind, max_attempts, metadata, priority, queue, lease_token, lease_expires_at," +
			"   scheduled_at, state, tags)" +
			"  SELECT v.id, v.args, 1, now(), ARRAY[v.attempted_by], v.kind, v.max_attempts, v.metadata, v.priority, v.queue, v.token," +
			"   now() + $1::interval, now(), 'running', '{}'" +
			"  FROM unnest($2::bigint[], $3::text[]::jsonb[], $4::text[], $5::text[], $6::int[], $7::text[]::jsonb[], $8::int[], $9::text[], $10::uuid[])" +
			"   AS v(id, args, attempted_by, kind, max_attempts, metadata, priority, queue, token)" +
			"  RETURNING id, attempted_at, created_at, coalesce(lease_token::text, '') AS token, lease_expires_at)" +
			" SELECT id, attempted_at, created_at, token, lease_expires_at," +
			"  1 / (token <> '' AND lease_expires_at IS NOT NULL)::int FROM claimed"
	})
}

func (claimer) MergeQueuedClaims(batch *pgx.Batch, schema string) int {
	single := claimWithIDSQL(schema)
	var at []int
	for i, qq := range batch.QueuedQueries {
		if qq.SQL == single && len(qq.Arguments) == 10 && qq.Fn != nil &&
			(len(at) == 0 || qq.Arguments[0] == batch.QueuedQueries[at[0]].Arguments[0]) { // one lease TTL
			at = append(at, i)
		}
	}
	if len(at) < 2 {
		return 0
	}
	var (
		ids         = make([]int64, len(at))
		args        = make([]string, len(at))
		attemptedBy = make([]string, len(at))
		kinds       = make([]string, len(at))
		maxAttempts = make([]int, len(at))
		metadata    = make([]string, len(at))
		priorities  = make([]int, len(at))
		queues      = make([]string, len(at))
		tokens      = make(pgtype.FlatArray[pgtype.UUID], len(at))
		originals   = make([]*pgx.QueuedQuery, len(at))
	)
	for k, i := range at {
		qq := batch.QueuedQueries[i]
		a := qq.Arguments
		ids[k], args[k], attemptedBy[k], kinds[k] = a[1].(int64), string(a[2].([]byte)), a[3].(string), a[4].(string)
		maxAttempts[k], metadata[k], priorities[k], queues[k] = a[5].(int), string(a[6].([]byte)), a[7].(int), a[8].(string)
		tokens[k] = a[9].(pgtype.UUID)
		originals[k] = qq
	}
	merged := &pgx.QueuedQuery{
		SQL:       claimManySQL(schema),
		Arguments: []any{batch.QueuedQueries[at[0]].Arguments[0], ids, args, attemptedBy, kinds, maxAttempts, metadata, priorities, queues, tokens},
	}
	// Each claim reads its row as it would have read its own statement's
	// (QueueClaim's callback), so that it builds its Claim as ever.
	merged.Fn = func(br pgx.BatchResults) error {
		byID := make(map[int64][]any, len(ids))
		rows, err := br.Query()
		if err == nil {
			for rows.Next() {
				var row claimRowValues
				if err = rows.Scan(row.targets()...); err != nil {
					break
				}
				byID[row.id] = row.values()
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			// The first claim words the error (its kind, a missing lease).
			return fmt.Errorf("fencing: inserting %d claimed jobs in one statement: %w", len(ids),
				originals[0].Fn(&oneRowResults{row: valuesRow{err: err}}))
		}
		// Every claim reads its row, even after one failed: each that
		// succeeds is recorded, as it would have been alone.
		var first error
		for k, qq := range originals {
			values, ok := byID[ids[k]]
			row := valuesRow{values: values}
			if !ok {
				row.err = pgx.ErrNoRows
			}
			if err := qq.Fn(&oneRowResults{row: row}); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	replaceQueued(batch, at, merged)
	return len(at)
}

// claimRowValues are a claim statement's columns.
type claimRowValues struct {
	id          int64
	attemptedAt time.Time
	createdAt   time.Time
	token       string
	expiresAt   *time.Time
	leased      int
}

// targets are the scan targets of the columns, in order.
func (c *claimRowValues) targets() []any {
	return []any{&c.id, &c.attemptedAt, &c.createdAt, &c.token, &c.expiresAt, &c.leased}
}

// values are the columns read, in order (what targets points at).
func (c *claimRowValues) values() []any {
	return []any{c.id, c.attemptedAt, c.createdAt, c.token, c.expiresAt, c.leased}
}

// valuesRow is a pgx.Row of values already read (or of an error): Scan
// sets each destination, a pointer to its value's type.
type valuesRow struct {
	values []any
	err    error
}

func (r valuesRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if len(dest) != len(r.values) {
		return fmt.Errorf("fencing: scanning %d values into %d destinations", len(r.values), len(dest))
	}
	for i, d := range dest {
		target := reflect.ValueOf(d)
		value := reflect.ValueOf(r.values[i])
		if target.Kind() != reflect.Pointer || target.IsNil() || !value.Type().AssignableTo(target.Elem().Type()) {
			return fmt.Errorf("fencing: cannot scan %T into %T", r.values[i], d)
		}
		target.Elem().Set(value)
	}
	return nil
}

// oneRowResults are the results of one statement whose one row is row, as
// a queued query's callback reads them.
type oneRowResults struct{ row pgx.Row }

func (r *oneRowResults) Exec() (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("fencing: a merged claim has a row, not a command tag")
}

func (r *oneRowResults) Query() (pgx.Rows, error) {
	return nil, errors.New("fencing: a merged claim has one row")
}

func (r *oneRowResults) QueryRow() pgx.Row { return r.row }

func (r *oneRowResults) Close() error { return nil }

func (r *oneRowResults) Tx() pgx.Tx { return nil }
