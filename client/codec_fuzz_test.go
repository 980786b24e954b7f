package client

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzJSONCodecDecode decodes arbitrary payload bytes (weir_run.args and
// result, activity results, signal args: all persisted) into the shapes
// workflows use. It must never panic, a failure is always a *PayloadError,
// and what decodes re-encodes to bytes that decode to the same value.
func FuzzJSONCodecDecode(f *testing.F) {
	for _, seed := range []string{`{"id":"a","steps":3,"tags":["x"],"n":1.5}`, `46`, `"s"`, `null`, ``, `[1,2]`, `{"id":1}`, `1e400`, `"\ud800"`, `{"a":{"b":{"c":[[[]]]}}}`} {
		f.Add([]byte(seed))
	}
	type args struct {
		ID    string            `json:"id"`
		Steps int               `json:"steps"`
		Tags  []string          `json:"tags"`
		N     float64           `json:"n"`
		Extra map[string]string `json:"extra"`
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		codec := JSONCodec{}
		for _, target := range []func() any{
			func() any { return new(args) }, func() any { return new(int) }, func() any { return new(string) },
			func() any { return new(map[string]any) }, func() any { return new([]int) }, func() any { return new(any) },
		} {
			v := target()
			if err := codec.Decode(data, v); err != nil {
				var payloadErr *PayloadError
				require.True(t, errors.As(err, &payloadErr), "decode error is a *PayloadError: %T %v", err, err)
				continue
			}
			encoded, err := codec.Encode(v)
			require.NoError(t, err)
			again := target()
			require.NoError(t, codec.Decode(encoded, again))
			reencoded, err := codec.Encode(again)
			require.NoError(t, err)
			require.JSONEq(t, string(encoded), string(reencoded))
		}
	})
}

// FuzzRawArgs: args given as raw JSON (HTTP API, CLI) are stored exactly as
// given when valid, refused when not.
func FuzzRawArgs(f *testing.F) {
	for _, seed := range []string{`{"a":1}`, ``, `null`, `{`, `[1,2,3]`, "\xff"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := RawArgs{JSON: data, KindName: "k"}.MarshalJSON()
		switch {
		case len(data) == 0:
			require.NoError(t, err)
			require.Equal(t, "null", string(out))
		case json.Valid(data):
			require.NoError(t, err)
			require.Equal(t, data, []byte(out))
		default:
			require.Error(t, err)
		}
	})
}
