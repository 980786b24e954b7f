package worker

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/fencing"
	"github.com/weirhq/weir/internal/dbschema"
	"github.com/weirhq/weir/internal/fencingclaim"
	"github.com/weirhq/weir/internal/store"
)

// TestLastWritesOneStatementPerKind: a group's claims and claimed jobs'
// completions are typed values the group queues one statement per kind,
// after its runs' writes, behind one ask for generic plans and between
// dbschema.HashJoinsSQL and HashJoinsEndSQL, with the members' checks after
// them; a lone step's are statements of their own, with no such asks.
func TestLastWritesOneStatementPerKind(t *testing.T) {
	t.Parallel()
	driver, err := fencing.NewDriver(nil, nil)
	require.NoError(t, err)
	w := &Worker{driver: driver, claims: fencingclaim.For(driver), store: store.New(dbschema.New("s"))}
	member := func(id int64) *otherWrites {
		o := &otherWrites{
			claims: []fencingclaim.Request{{Params: fencingclaim.Params{ID: id, Kind: "k", MaxAttempts: 1, Schema: "s"}, Done: func(*fencingclaim.Claim) {}}},
			completions: []fencingclaim.Completion{{
				JobID: id + 100, FinalizedAt: time.Now(), Attempt: 1, Schema: "s", Token: "00000000-0000-4000-8000-000000000001",
			}},
		}
		o.checks.Queue("SELECT 1")
		return o
	}
	sqls := func(batch *pgx.Batch) []string {
		var out []string
		for _, q := range batch.QueuedQueries {
			out = append(out, q.SQL)
		}
		return out
	}

	var group lastWrites
	for id := range int64(3) {
		group.add(nil, member(id+1))
	}
	batch := &pgx.Batch{}
	w.queueLastWrites(batch, &group, false)
	got := sqls(batch)
	require.Len(t, got, 8, "plans, hash joins, one claim statement, one completion statement, joins restored, each member's check")
	require.Equal(t, dbschema.GenericPlansSQL, got[0])
	require.Equal(t, dbschema.HashJoinsSQL, got[1])
	require.Contains(t, got[2], "unnest(")
	require.Contains(t, got[3], "unnest(")
	require.Equal(t, dbschema.HashJoinsEndSQL, got[4])
	require.Equal(t, []string{"SELECT 1", "SELECT 1", "SELECT 1"}, got[5:])

	// In a transaction that asked for generic plans already.
	batch = &pgx.Batch{}
	w.queueLastWrites(batch, &group, true)
	got = sqls(batch)
	require.Len(t, got, 7)
	require.Equal(t, dbschema.HashJoinsSQL, got[0])
	require.Equal(t, dbschema.HashJoinsEndSQL, got[3])

	// A lone step's writes over arrays (two claims) are hash-joined too,
	// with its check after them.
	two := member(1)
	two.claims = append(two.claims, member(2).claims...)
	run := &runRow{}
	run.openWrites()
	*run.others = *two
	got = sqls(w.takeWrites(run))
	require.Len(t, got, 5, "hash joins, claims, completion, joins restored, check")
	require.Equal(t, dbschema.HashJoinsSQL, got[0])
	require.Contains(t, got[1], "unnest(")
	require.Equal(t, dbschema.HashJoinsEndSQL, got[3])
	require.Equal(t, "SELECT 1", got[4])

	for name, queue := range map[string]func(*pgx.Batch){
		"LastWrites": func(b *pgx.Batch) { w.queueLastWrites(b, &lastWrites{otherWrites: *member(1)}, false) },
		"Alone":      func(b *pgx.Batch) { member(1).queue(b, fencingclaim.For(driver)) },
	} {
		lone := &pgx.Batch{}
		queue(lone)
		got = sqls(lone)
		require.Len(t, got, 3, "%s: statements of its own, with no ask", name)
		require.NotContains(t, got[0], "unnest(", name)
		require.NotContains(t, got[1], "unnest(", name)
		require.Equal(t, "SELECT 1", got[2], "%s: the check", name)
	}
}
