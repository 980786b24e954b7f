package client

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/weirhq/weir/internal/store"
)

const (
	// ListLimitDefault is the page size of List.
	ListLimitDefault = 100

	// ListLimitMax caps ListOpts.Limit.
	ListLimitMax = 1000
)

// ListOpts filter and page List. A nil *ListOpts lists the client's
// namespace, newest first.
type ListOpts struct {
	// CreatedAfter and CreatedBefore bound the runs' start time (exclusive).
	// Defaults to unbounded.
	CreatedAfter  time.Time
	CreatedBefore time.Time

	// Cursor continues from a previous page's NextCursor. Defaults to the
	// first page.
	Cursor string

	// Kind keeps runs of this workflow kind. Defaults to any.
	Kind string

	// Limit is the page size. Defaults to ListLimitDefault; at most
	// ListLimitMax.
	Limit int

	// Namespace is the namespace to list. Defaults to the client's.
	Namespace string

	// State keeps runs in this state. Defaults to any.
	State string

	// WorkflowIDPrefix keeps runs whose workflow ID starts with it.
	// Defaults to any.
	WorkflowIDPrefix string
}

// ListResult is one page of runs, newest first.
type ListResult struct {
	// NextCursor fetches the next page (as ListOpts.Cursor, with the same
	// filters); empty when there is none.
	NextCursor string

	// Runs are the page's runs.
	Runs []*RunSummary
}

// RunSummary is a run as List shows it.
type RunSummary struct {
	ClosedAt   *time.Time
	CreatedAt  time.Time
	Generation int64
	Kind       string
	Namespace  string
	Queue      string
	RunID      uuid.UUID
	State      string
	WorkflowID string
}

// ErrInvalidCursor is matched (errors.Is) by errors from a ListOpts.Cursor
// that no List returned.
var ErrInvalidCursor = errors.New("weir: invalid list cursor")

// listCursor is the keyset position after a page's last run.
type listCursor struct {
	CreatedAt time.Time `json:"t"`
	RunID     uuid.UUID `json:"r"`
}

func (c listCursor) encode() string {
	data, _ := json.Marshal(c) //nolint:errchkjson // a time and a UUID always encode
	return base64.RawURLEncoding.EncodeToString(data)
}

func decodeCursor(s string) (*listCursor, error) {
	data, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCursor, err)
	}
	var c listCursor
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCursor, err)
	}
	if c.CreatedAt.IsZero() || c.RunID == uuid.Nil {
		return nil, fmt.Errorf("%w: incomplete position", ErrInvalidCursor)
	}
	return &c, nil
}

// List pages through runs, newest first, with optional filters. Each filter
// is served by an index, so pages stay fast on millions of runs.
func (c *Client) List(ctx context.Context, opts *ListOpts) (*ListResult, error) {
	opts = cmp.Or(opts, &ListOpts{})
	limit := cmp.Or(opts.Limit, ListLimitDefault)
	if limit < 0 || limit > ListLimitMax {
		return nil, fmt.Errorf("weir: list limit %d is not between 1 and %d", limit, ListLimitMax)
	}
	namespace := cmp.Or(opts.Namespace, c.config.Namespace)

	p := store.ListRunsParams{
		Namespace: namespace, Kind: opts.Kind, State: opts.State, CreatedAfter: opts.CreatedAfter,
		CreatedBefore: opts.CreatedBefore, Limit: limit + 1,
	}
	if opts.Cursor != "" {
		cursor, err := decodeCursor(opts.Cursor)
		if err != nil {
			return nil, err
		}
		p.AfterCreatedAt, p.AfterRunID = cursor.CreatedAt, cursor.RunID
	}
	if opts.WorkflowIDPrefix != "" {
		p.WorkflowIDLike = likeEscaper.Replace(opts.WorkflowIDPrefix) + "%"
	}
	runs, err := store.ListRuns[RunSummary](ctx, c.store, c.pool, p)
	if err != nil {
		return nil, fmt.Errorf("listing runs: %w", err)
	}
	result := &ListResult{Runs: runs}
	if len(runs) > limit {
		result.Runs = runs[:limit]
		last := result.Runs[limit-1]
		result.NextCursor = listCursor{CreatedAt: last.CreatedAt, RunID: last.RunID}.encode()
	}
	return result, nil
}

// likeEscaper escapes LIKE's wildcards (the default escape is backslash).
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
