package client

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzIsCanonical: JSON that isCanonical passes through is what sortedJSON
// makes of it, byte for byte (request hashes of either path agree).
func FuzzIsCanonical(f *testing.F) {
	for _, s := range []string{
		`{"input":5}`, `{"b":1,"a":2}`, `{"a":{"c":[1,{"e":"x y","d":2}],"b":null},"z":"<"}`,
		`{"a":1,"a":2}`, `{"":1,"a":[]}`, `[3,"b",{"y":1.50,"x":-0}]`, `"s"`, `{"a":"\u00e9"}`, `{"a":"é"}`,
		`{ "a": 1 }`, `{"a":1E5,"b":true,"c":false}`, `{"a":"&"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || !isCanonical(data) {
			return
		}
		sorted, err := sortedJSON(data)
		require.NoError(t, err)
		require.Equal(t, string(sorted), string(data))
	})
}

func TestIsCanonical(t *testing.T) {
	for doc, want := range map[string]bool{
		`{"input":5}`:                       true,
		`{"a":{"b":[1,{"c":2,"d":"x y"}]}}`: true,
		`{"b":1,"a":2}`:                     false, // keys out of order
		`{"a":1,"a":2}`:                     false, // a key twice: decoding keeps the last
		`{"a":{"d":1,"c":2},"b":3}`:         false,
		`{ "a":1}`:                          false,
		`{"a":"\u00e9"}`:                    false,
		`{"a":"é"}`:                         false,
	} {
		require.Equal(t, want, isCanonical([]byte(doc)), doc)
	}
}

// FuzzSortKeys: what sortKeys sorts is what sortedJSON makes of it, byte
// for byte (request hashes of either path agree).
func FuzzSortKeys(f *testing.F) {
	for _, s := range []string{
		`{"id":"o","cents":7}`, `{"b":1,"a":2}`, `{"a":{"c":[1,{"e":"x y","d":2}],"b":null},"z":"-"}`,
		`{"a":1,"a":2}`, `{"b":1,"a":2,"b":3,"a":[]}`, `{"":1,"a":[]}`, `[3,"b",{"y":1.50,"x":-0}]`, `"s"`, `{}`, `[]`,
		`{"a":"\u00e9"}`, `{ "a": 1 }`, `{"b":1E5,"a":true,"c":false}`, `{"a":"&"}`, `[[[[{"b":[],"a":{}}]]]]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		sorted, ok := sortKeys(data)
		if !ok {
			return
		}
		want, err := sortedJSON(data)
		require.NoError(t, err)
		require.Equal(t, string(want), string(sorted))
	})
}

// TestSortKeys: args encoded from a struct whose fields are out of key
// order are sorted without decoding; what sortKeys leaves is sortedJSON's.
func TestSortKeys(t *testing.T) {
	for doc, want := range map[string]string{
		`{"id":"o","cents":7}`:                       `{"cents":7,"id":"o"}`,
		`{"z":{"b":[2,{"d":1,"c":null}],"a":"x y"}}`: `{"z":{"a":"x y","b":[2,{"c":null,"d":1}]}}`,
		`{"b":1,"a":2,"b":3}`:                        `{"a":2,"b":3}`,
		`[{"b":1.50,"a":-0}]`:                        `[{"a":-0,"b":1.50}]`,
		`{"a":"\u00e9"}`:                             ``, // an escape
		`{"b":"é","a":1}`:                            ``,
		`{ "b":1,"a":2}`:                             ``,
		`{"a":"<"}`:                                  ``,
	} {
		sorted, ok := sortKeys([]byte(doc))
		require.Equal(t, want != "", ok, doc)
		require.Equal(t, want, string(sorted), doc)
	}
}
