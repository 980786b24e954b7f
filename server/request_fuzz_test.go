package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeRequestBody feeds arbitrary bytes to decodeBody as the body of
// each JSON request the API accepts (start, signal, cancel/terminate). It
// must never panic; a rejection is always a typed invalid_argument error;
// what it accepts survives a round trip unchanged, with args that are valid
// JSON.
func FuzzDecodeRequestBody(f *testing.F) {
	for _, seed := range []string{
		`{"kind":"order","args":{"id":1},"workflow_id":"order-1","request_id":"r1","queue":"default","id_reuse_policy":"reject_duplicate","run_timeout":"1h","execution_timeout":"90s"}`,
		`{"kind":"approve","args":[1,2],"request_id":"s1"}`,
		`{"reason":"operator"}`,
		``, ` `, `{}`, `null`, `[]`, `{"kind":1}`, `{"unknown":true}`, `{"kind":"a"} {"kind":"b"}`,
		`{"args":null}`, `{"args":"\ud800"}`, `{"kind":"a","kind":"b"}`, "{\"kind\":\"\xff\"}",
	} {
		for which := range byte(3) {
			f.Add(which, []byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, which byte, body []byte) {
		var (
			v          any
			allowEmpty bool
		)
		switch which % 3 {
		case 0:
			v = &StartRequest{}
		case 1:
			v = &SignalRequest{}
		default:
			v, allowEmpty = &ReasonRequest{}, true
		}
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		err := decodeBody(req, v, allowEmpty)
		if err != nil {
			var apiErr *Error
			require.True(t, errors.As(err, &apiErr), "a rejected body is a typed API error: %T %v", err, err)
			return
		}
		switch r := v.(type) {
		case *StartRequest:
			require.True(t, len(r.Args) == 0 || json.Valid(r.Args), "accepted args are JSON: %q", r.Args)
		case *SignalRequest:
			require.True(t, len(r.Args) == 0 || json.Valid(r.Args), "accepted args are JSON: %q", r.Args)
		}
		encoded, err := json.Marshal(v)
		require.NoError(t, err)
		again := newLike(v)
		require.NoError(t, decodeBody(httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(encoded)), again, allowEmpty))
		reencoded, err := json.Marshal(again)
		require.NoError(t, err)
		require.JSONEq(t, string(encoded), string(reencoded))
	})
}

func newLike(v any) any {
	switch v.(type) {
	case *StartRequest:
		return &StartRequest{}
	case *SignalRequest:
		return &SignalRequest{}
	default:
		return &ReasonRequest{}
	}
}

// FuzzParseDurations: the duration and wait query/body fields never panic,
// and what they accept is non-negative (and capped, for waits).
func FuzzParseDurations(f *testing.F) {
	for _, seed := range []string{"", "0", "30", "30s", "1h2m", "-1s", "-5", "9223372036854775807", "1e9s", "99999999999h", "5µs", " 1s"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		const limit = time.Minute
		if wait, err := parseWait(v, limit); err == nil {
			require.GreaterOrEqual(t, wait, time.Duration(0), "wait %q", v)
			require.LessOrEqual(t, wait, limit, "wait %q", v)
		} else {
			var apiErr *Error
			require.True(t, errors.As(err, &apiErr), "%T %v", err, err)
		}
		if d, err := parseDuration("run_timeout", v); err == nil {
			require.GreaterOrEqual(t, d, time.Duration(0), "duration %q", v)
		}
	})
}
