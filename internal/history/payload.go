package history

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
)

// binaryKey is the one key of the JSON object that carries a payload that is
// not itself JSON.
const binaryKey = "$binary"

// Payload is a value encoded by a payload codec (JSON by default). In event
// attributes a payload that is valid JSON is embedded as is, so histories
// stay readable and queryable in jsonb; any other bytes (an encrypting codec,
// say) are embedded as {"$binary": "<base64>"}. A JSON payload that happens to
// have exactly that shape is wrapped the same way, so decoding is never
// ambiguous.
//
// JSON payloads come back semantically equal but not byte-for-byte: jsonb
// normalises whitespace and key order. Binary payloads come back exactly.
type Payload []byte

// MarshalJSON implements json.Marshaler. A JSON payload is returned as
// is: encoding/json compacts what a Marshaler returns.
func (p Payload) MarshalJSON() ([]byte, error) {
	if p == nil {
		return []byte("null"), nil
	}
	if json.Valid(p) && !looksBinary(p) {
		return p, nil
	}
	return json.Marshal(map[string]string{binaryKey: base64.StdEncoding.EncodeToString(p)})
}

// UnmarshalJSON implements json.Unmarshaler.
func (p *Payload) UnmarshalJSON(data []byte) error {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		*p = nil
		return nil
	}
	if looksBinary(data) {
		var wrapped map[string]string
		if err := json.Unmarshal(data, &wrapped); err != nil {
			return fmt.Errorf("decoding binary payload: %w", err)
		}
		raw, err := base64.StdEncoding.DecodeString(wrapped[binaryKey])
		if err != nil {
			return fmt.Errorf("decoding binary payload: %w", err)
		}
		*p = raw
		return nil
	}
	*p = append((*p)[:0], data...)
	return nil
}

// roundTrips reports whether p comes back byte for byte from json.Marshal
// then json.Unmarshal: wrapped as binary, or JSON that encoding/json has
// nothing to compact or escape in (and not null, which comes back nil).
func (p Payload) roundTrips() bool {
	if p == nil || !json.Valid(p) || looksBinary(p) {
		return true
	}
	return string(p) != "null" && !bytes.ContainsAny(p, " \t\r\n<>&\u2028\u2029")
}

// plain reports whether json.Marshal writes p as itself: JSON with nothing
// to compact or escape, not wrapped as binary.
func (p Payload) plain() bool {
	return p != nil && !bytes.ContainsAny(p, " \t\r\n<>&\u2028\u2029") && json.Valid(p) && !looksBinary(p)
}

// looksBinary reports whether data is a JSON object whose only key is
// binaryKey with a string value.
func looksBinary(data []byte) bool {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return false
	}
	// The key's '$' is in the text as itself or escaped (\u0024): without
	// either, it is not there, and most payloads need no decoding.
	if bytes.IndexByte(trimmed, '$') < 0 && !bytes.Contains(trimmed, []byte(`\u`)) {
		return false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &m); err != nil || len(m) != 1 {
		return false
	}
	v, ok := m[binaryKey]
	if !ok {
		return false
	}
	var s string
	return json.Unmarshal(v, &s) == nil
}

// Duration is a time.Duration that is encoded in JSON as a Go duration string
// ("1m30s") so histories stay readable. It decodes from such a string or from
// a number of nanoseconds.
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	s := time.Duration(d).String() // digits, '.', '-' and units: nothing to escape
	return append(append(append(make([]byte, 0, len(s)+2), '"'), s...), '"'), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(data []byte) error {
	if n := len(data); n >= 2 && data[0] == '"' && data[n-1] == '"' && bytes.IndexByte(data, '\\') < 0 {
		return d.parse(string(data[1 : n-1])) // a string without escapes is its text
	}
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		return d.parse(s)
	}
	var n int64
	if err := json.Unmarshal(data, &n); err != nil {
		return fmt.Errorf("decoding duration %s: want a string like \"1m30s\" or nanoseconds", data)
	}
	*d = Duration(n)
	return nil
}

// parse sets d from a Go duration string.
func (d *Duration) parse(s string) error {
	parsed, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("decoding duration: %w", err)
	}
	*d = Duration(parsed)
	return nil
}
