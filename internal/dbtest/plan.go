package dbtest

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// PlanScan is a node of a query plan that reads a table or an index.
type PlanScan struct {
	// Line is the node's line of the plan, trimmed.
	Line string
	// Index is the index the node reads; empty for a sequential scan.
	Index string
	// Table is the table the node reads (as the plan names it, without its
	// alias); empty for a bitmap index scan, whose line names its index only.
	Table string
	// Cond is the node's index condition; empty when it has none, and then
	// it reads every entry of its index (every row a partial index covers).
	Cond string
}

var (
	seqScanNode   = regexp.MustCompile(`\bSeq Scan on (\S+)`)
	indexScanNode = regexp.MustCompile(`\b(?:Index Scan|Index Scan Backward|Index Only Scan) using (\S+) on (\S+)`)
	bitmapNode    = regexp.MustCompile(`\bBitmap Index Scan on (\S+)`)
)

// PlanScans lists the nodes of plan (EXPLAIN's text output, its rows joined
// by newlines) that read a table or an index, in the plan's order.
func PlanScans(plan string) []PlanScan {
	lines := strings.Split(plan, "\n")
	var out []PlanScan
	for i, line := range lines {
		var s PlanScan
		if m := indexScanNode.FindStringSubmatch(line); m != nil {
			s.Index, s.Table = m[1], m[2]
		} else if m := bitmapNode.FindStringSubmatch(line); m != nil {
			s.Index = m[1]
		} else if m := seqScanNode.FindStringSubmatch(line); m != nil {
			s.Table = m[1]
		} else {
			continue
		}
		s.Line = strings.TrimSpace(line)
		// The node's own details follow it, indented deeper, before its
		// first child node ("->") or the next node of its parent.
		depth := leadingSpaces(line)
		for _, detail := range lines[i+1:] {
			text := strings.TrimSpace(detail)
			if strings.HasPrefix(text, "->") || leadingSpaces(detail) <= depth {
				break
			}
			if cond, ok := strings.CutPrefix(text, "Index Cond: "); ok {
				s.Cond = cond
			}
		}
		out = append(out, s)
	}
	return out
}

// FilteredLoops lists the nested loops of plan (EXPLAIN's text output) that
// join by a filter: each row of the outer side against every row of the
// inner one, the inner side read again for each outer row. A nested loop
// that looks its inner rows up by key (a parameterized index scan, as a
// LATERAL lookup does) has no join filter and is not listed. Each entry is
// the node's line and its filter, trimmed.
func FilteredLoops(plan string) []string {
	lines := strings.Split(plan, "\n")
	var out []string
	for i, line := range lines {
		if !strings.Contains(line, "Nested Loop") {
			continue
		}
		depth := leadingSpaces(line)
		for _, detail := range lines[i+1:] {
			text := strings.TrimSpace(detail)
			if strings.HasPrefix(text, "->") || leadingSpaces(detail) <= depth {
				break
			}
			if strings.HasPrefix(text, "Join Filter: ") {
				out = append(out, strings.TrimSpace(line)+" / "+text)
			}
		}
	}
	return out
}

func leadingSpaces(line string) int { return len(line) - len(strings.TrimLeft(line, " \t")) }

// ExplainPrepared prepares query on a connection of pool and returns its
// plan as ExplainExecute does; the statement is deallocated after.
func ExplainPrepared(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, settings, query, literals string) string {
	tb.Helper()
	conn, err := pool.Acquire(ctx)
	require.NoError(tb, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "PREPARE explained AS "+query)
	require.NoError(tb, err)
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE explained") }()
	return ExplainExecute(ctx, tb, conn.Conn(), settings, "explained", literals)
}

// ExplainExecute returns EXPLAIN EXECUTE's plan for the statement prepared
// on conn as name, with literals as its arguments (SQL literals,
// comma-separated), in a transaction that first runs settings (statements
// such as SET LOCAL plan_cache_mode; none when empty) and is then rolled
// back. The plan is generic or custom as settings and Postgres choose (a
// generic plan shows the parameters, $1, a custom one the literals); a
// generic plan made before stays cached on conn, as a worker's would.
func ExplainExecute(ctx context.Context, tb testing.TB, conn *pgx.Conn, settings, name, literals string) string {
	tb.Helper()
	tx, err := conn.Begin(ctx)
	require.NoError(tb, err)
	defer func() { _ = tx.Rollback(ctx) }()
	if settings != "" {
		_, err := tx.Exec(ctx, settings)
		require.NoError(tb, err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN EXECUTE "+name+"("+literals+")")
	require.NoError(tb, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(tb, err)
	return strings.Join(lines, "\n")
}
