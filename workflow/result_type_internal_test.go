package workflow

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

type receipt struct{ Cents int }

func (receipt) String() string { return "receipt" }

func TestResultFits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		registered, requested reflect.Type
		fits                  bool
	}{
		{reflect.TypeFor[receipt](), reflect.TypeFor[receipt](), true},
		{reflect.TypeFor[receipt](), reflect.TypeFor[*receipt](), true},
		{reflect.TypeFor[*receipt](), reflect.TypeFor[receipt](), true},
		{reflect.TypeFor[receipt](), reflect.TypeFor[any](), true},
		{reflect.TypeFor[receipt](), reflect.TypeFor[fmt.Stringer](), true},
		{reflect.TypeFor[int](), reflect.TypeFor[fmt.Stringer](), false},
		{reflect.TypeFor[int](), reflect.TypeFor[json.RawMessage](), true},
		{reflect.TypeFor[string](), reflect.TypeFor[int](), false},
		{reflect.TypeFor[receipt](), reflect.TypeFor[map[string]any](), true},
		{reflect.TypeFor[receipt](), reflect.TypeFor[map[string]int](), false},
	} {
		require.Equal(t, tc.fits, resultFits(tc.registered, tc.requested), "%s into %s", tc.registered, tc.requested)
	}
}
