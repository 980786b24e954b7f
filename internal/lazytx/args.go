package lazytx

import (
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// pgArgs returns args with every google/uuid UUID, and every slice of them,
// as pgtype.UUID values, which pgx encodes to the same bytes without the
// detour through text that a uuid.UUID takes (docs/decisions/0019). args
// itself is returned when it holds none, and it is never changed.
func pgArgs(args []any) []any {
	out, _ := convertedArgs(args)
	return out
}

// convertedArgs is pgArgs, also telling whether any argument changed.
func convertedArgs(args []any) ([]any, bool) {
	var out []any
	for i, a := range args {
		var arg any
		switch v := a.(type) {
		case uuid.UUID:
			arg = pgtype.UUID{Bytes: v, Valid: true}
		case []uuid.UUID:
			var ids []pgtype.UUID // nil stays nil: NULL, as before
			if v != nil {
				ids = make([]pgtype.UUID, len(v))
				for k, id := range v {
					ids[k] = pgtype.UUID{Bytes: id, Valid: true}
				}
			}
			arg = ids
		default:
			continue
		}
		if out == nil {
			out = slices.Clone(args)
		}
		out[i] = arg
	}
	if out == nil {
		return args, false
	}
	return out, true
}

// pgBatch returns b's statements with their arguments as pgArgs makes them,
// in a batch of their own when any changed (b itself when none did): b and
// its statements are left as they are (a caller may still read their
// arguments, as a group's merge of statements does), and results go to their
// callbacks all the same.
func pgBatch(b *pgx.Batch) *pgx.Batch {
	if b == nil {
		return nil
	}
	var out *pgx.Batch
	for i, qq := range b.QueuedQueries {
		args, changed := convertedArgs(qq.Arguments)
		if !changed {
			continue
		}
		if out == nil {
			out = &pgx.Batch{QueuedQueries: slices.Clone(b.QueuedQueries)}
		}
		c := *qq
		c.Arguments = args
		out.QueuedQueries[i] = &c
	}
	if out == nil {
		return b
	}
	return out
}
