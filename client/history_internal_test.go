package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/history"
)

// TestEventTypeConstants: every event type history stores has its
// EventType constant, named Event<Type>.
func TestEventTypeConstants(t *testing.T) {
	t.Parallel()
	file, err := parser.ParseFile(token.NewFileSet(), "history.go", nil, 0)
	require.NoError(t, err)
	declared := map[string]string{} // constant name → value
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			value := spec.(*ast.ValueSpec)
			if ident, ok := value.Type.(*ast.Ident); !ok || ident.Name != "EventType" {
				continue
			}
			lit, err := strconv.Unquote(value.Values[0].(*ast.BasicLit).Value)
			require.NoError(t, err)
			declared[value.Names[0].Name] = lit
		}
	}
	var missing []string
	for _, typ := range history.EventTypes() {
		if declared["Event"+string(typ)] != string(typ) {
			missing = append(missing, string(typ))
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "event types without a client.EventType constant")
	require.Len(t, declared, len(history.EventTypes()), "a constant for an event type history does not store")
}
