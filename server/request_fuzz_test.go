package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeRequestBody feeds arbitrary bytes to decodeBody as the body of
// each JSON request the API accepts (start, signal, cancel/terminate,
// update, schedule create and update, signal-with-start). It must never
// panic; a rejection is always a typed invalid_argument error; what it
// accepts survives a round trip unchanged, with args that are valid JSON and
// every string valid text (UTF-8 without NUL) for Postgres.
func FuzzDecodeRequestBody(f *testing.F) {
	for _, seed := range []string{
		`{"kind":"order","args":{"id":1},"workflow_id":"order-1","request_id":"r1","queue":"default","id_reuse_policy":"reject_duplicate","run_timeout":"1h","execution_timeout":"90s"}`,
		`{"kind":"approve","args":[1,2],"request_id":"s1"}`,
		`{"reason":"operator"}`,
		``, ` `, `{}`, `null`, `[]`, `{"kind":1}`, `{"unknown":true}`, `{"kind":"a"} {"kind":"b"}`,
		`{"args":null}`, `{"args":"\ud800"}`, `{"kind":"a","kind":"b"}`, "{\"kind\":\"\xff\"}",
		`{"kind":"a\u0000"}`, `{"args":{"k":"\u0000"}}`, "{\"args\":\"\xff\"}", `{"args":"\\u0000"}`,
		`{"reason":"\u0000"}`, `{"update_id":"\u0000"}`, `{"note":"\u0000"}`, `{"signal":{"request_id":"\u0000"}}`,
		`{"schedule_id":"s","cron":"@every 1s","time_zone":"\u0000"}`,
	} {
		for which := range byte(fuzzBodies) {
			f.Add(which, []byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, which byte, body []byte) {
		var (
			v          any
			allowEmpty bool
		)
		v, allowEmpty = fuzzBody(which)
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
		requireText(t, reflect.ValueOf(v))
		encoded, err := json.Marshal(v)
		require.NoError(t, err)
		again, _ := fuzzBody(which)
		require.NoError(t, decodeBody(httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(encoded)), again, allowEmpty))
		reencoded, err := json.Marshal(again)
		require.NoError(t, err)
		require.JSONEq(t, string(encoded), string(reencoded))
	})
}

// fuzzBodies is how many request bodies fuzzBody knows.
const fuzzBodies = 8

// fuzzBody is a fresh request body of kind which, and whether it may be
// empty.
func fuzzBody(which byte) (any, bool) {
	switch which % fuzzBodies {
	case 0:
		return &StartRequest{}, false
	case 1:
		return &SignalRequest{}, false
	case 2:
		return &UpdateRequest{}, false
	case 3:
		return &QueryRequest{}, false
	case 4:
		return &ScheduleRequest{}, false
	case 5:
		return &ScheduleUpdateRequest{}, false
	case 6:
		return &SignalWithStartRequest{}, false
	default:
		return &ReasonRequest{}, true
	}
}

// requireText checks, independently of checkBodyText, that every string and
// JSON value in v is valid UTF-8 without NUL, raw or escaped.
func requireText(t *testing.T, v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			requireText(t, v.Elem())
		}
	case reflect.String:
		require.True(t, utf8.ValidString(v.String()) && !strings.Contains(v.String(), "\x00"), "accepted string %q", v.String())
	case reflect.Slice:
		if raw, ok := v.Interface().(json.RawMessage); ok && len(raw) > 0 {
			require.True(t, utf8.Valid(raw), "accepted JSON %q", raw)
			var decoded any
			require.NoError(t, json.Unmarshal(raw, &decoded))
			requireJSONText(t, decoded)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				requireText(t, v.Field(i))
			}
		}
	}
}

func requireJSONText(t *testing.T, v any) {
	switch v := v.(type) {
	case string:
		require.NotContains(t, v, "\x00", "accepted JSON string %q", v)
	case []any:
		for _, e := range v {
			requireJSONText(t, e)
		}
	case map[string]any:
		for k, e := range v {
			requireJSONText(t, k)
			requireJSONText(t, e)
		}
	}
}

// FuzzRequestText: the query and path rule refuses exactly what is not
// valid UTF-8 or holds NUL, as a typed invalid_argument error.
func FuzzRequestText(f *testing.F) {
	for _, seed := range []string{"a", "%00", "%FF", "%c0%ae", "a%20b", "\x00", "%", "k=%00", "x=1&y=%FF"} {
		f.Add(seed, seed)
	}
	f.Fuzz(func(t *testing.T, path, query string) {
		u, err := url.Parse("http://h/api/v1/namespaces/ns/workflows/" + path + "?" + query)
		if err != nil {
			return
		}
		r := &http.Request{Method: http.MethodGet, URL: u}
		values, qErr := url.ParseQuery(u.RawQuery)
		want := qErr == nil && utf8.ValidString(u.Path) && !strings.Contains(u.Path, "\x00")
		for k, vs := range values {
			for _, s := range append(vs, k) {
				want = want && utf8.ValidString(s) && !strings.Contains(s, "\x00")
			}
		}
		err = checkRequestText(r)
		require.Equal(t, want, err == nil, "path %q query %q: %v", u.Path, u.RawQuery, err)
		if err != nil {
			var apiErr *Error
			require.True(t, errors.As(err, &apiErr))
			require.Equal(t, CodeInvalidArgument, apiErr.Code)
		}
	})
}

// FuzzParseDurations: the duration and wait query/body fields never panic,
// and what they accept is non-negative (and capped, for waits).
func FuzzParseDurations(f *testing.F) {
	for _, seed := range []string{"", "0", "30", "30s", "1h2m", "-1s", "-5", "9223372036854775807", "18446744074", "99999999999999999999999", "1e9s", "99999999999h", "5µs", " 1s"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		const limit = time.Minute
		if wait, err := parseWait(v, limit); err == nil {
			require.GreaterOrEqual(t, wait, time.Duration(0), "wait %q", v)
			require.LessOrEqual(t, wait, limit, "wait %q", v)
			if seconds, err := strconv.ParseUint(v, 10, 64); err == nil && seconds >= 60 || errors.Is(err, strconv.ErrRange) {
				require.Equal(t, limit, wait, "whole seconds past the limit wait the limit: %q", v)
			}
		} else {
			var apiErr *Error
			require.True(t, errors.As(err, &apiErr), "%T %v", err, err)
		}
		if d, err := parseDuration("run_timeout", v); err == nil {
			require.GreaterOrEqual(t, d, time.Duration(0), "duration %q", v)
		}
	})
}
