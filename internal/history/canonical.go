package history

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// decodeCanonical decodes the attributes of the events every run has in
// the form json.Marshal writes them, as json.Unmarshal does, without
// reflection. Of any other form (other keys, other order, spaces, escapes
// in strings, empty lists, numbers that are not plain) it reports !ok, and
// json.Unmarshal decides.
func decodeCanonical(t EventType, data []byte) (Attributes, bool) {
	r := reader{rest: data, ok: json.Valid(data)}
	var attrs Attributes
	switch t {
	case EventActivityCompleted:
		a := &ActivityCompletedAttributes{}
		a.ScheduledEventID = r.int(`{"scheduled_event_id":`)
		r.payload(`,"result":`, &a.Result)
		a.Attempt = r.small(`,"attempt":`)
		attrs = a
	case EventActivityScheduled:
		attrs = r.scheduled()
	case EventWorkflowStarted:
		a := &WorkflowStartedAttributes{Kind: r.str(`{"kind":`)}
		r.payload(`,"args":`, &a.Args)
		a.WorkflowID = r.str(r.has(`,"workflow_id":`))
		a.RunID = r.str(r.has(`,"run_id":`))
		a.Generation = r.int(r.has(`,"generation":`))
		attrs = a
	default:
		return nil, false
	}
	return attrs, r.end()
}

// scheduled reads ActivityScheduled attributes and their retry policy, in
// one allocation.
func (r *reader) scheduled() *ActivityScheduledAttributes {
	v := &struct {
		a ActivityScheduledAttributes
		p RetryPolicy
	}{}
	a, p := &v.a, &v.p
	a.Kind = r.str(`{"kind":`)
	r.payload(`,"args":`, &a.Args)
	a.Queue = r.str(`,"queue":`)
	a.Priority = r.small(`,"priority":`)
	r.duration(`,"start_to_close_timeout":`, &a.StartToCloseTimeout)
	r.duration(r.has(`,"schedule_to_close_timeout":`), &a.ScheduleToCloseTimeout)
	r.duration(r.has(`,"heartbeat_timeout":`), &a.HeartbeatTimeout)
	r.duration(`,"retry_policy":{"initial_interval":`, &p.InitialInterval)
	p.BackoffCoefficient = r.float(`,"backoff_coefficient":`)
	r.duration(`,"maximum_interval":`, &p.MaximumInterval)
	p.MaximumAttempts = r.small(`,"maximum_attempts":`)
	p.NonRetryableErrorTypes = r.strs(r.has(`,"non_retryable_error_types":`))
	r.key(`}`)
	a.RetryPolicy = p
	a.Tags = r.strs(r.has(`,"tags":`))
	return a
}

// reader reads a JSON object written by json.Marshal, value by value, each
// after its key (with the '{' or ',' before it). Once a read finds
// something else, ok is false and every later read returns zero values.
type reader struct {
	rest []byte // what is left; valid JSON was checked as a whole
	ok   bool
}

// skipped is the key of an optional field that is absent: its read
// reads nothing.
const skipped = "\x00"

// has returns key if the next field is key, else skipped.
func (r *reader) has(key string) string {
	if r.ok && bytes.HasPrefix(r.rest, []byte(key)) {
		return key
	}
	return skipped
}

// key reads key; it reports whether the value after it is to be read.
func (r *reader) key(key string) bool {
	if key == skipped || !r.ok {
		return false
	}
	r.rest, r.ok = bytes.CutPrefix(r.rest, []byte(key))
	return r.ok
}

// end reports whether the object ended there, and every read was ok.
func (r *reader) end() bool { return r.key(`}`) && len(r.rest) == 0 }

// value reads a value: a string, an object or an array as a whole, or a
// number, true, false or null up to the ',' or '}' after it. The input is
// valid JSON, so only strings and nesting need following.
func (r *reader) value(key string) []byte {
	if !r.key(key) {
		return nil
	}
	n := skipValue(r.rest)
	v := r.rest[:n]
	if n == 0 || isSpace(v[0]) || isSpace(v[n-1]) {
		r.ok = false
		return nil
	}
	r.rest = r.rest[n:]
	return v
}

// skipValue returns the length of the value data starts with.
func skipValue(data []byte) int {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return min(i+1, len(data))
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		}
	}
	return len(data)
}

// str reads a string without escapes, in valid UTF-8 (json.Unmarshal
// replaces invalid bytes).
func (r *reader) str(key string) string {
	v := r.value(key)
	if v == nil {
		return ""
	}
	if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v) {
		r.ok = false
		return ""
	}
	return string(v[1 : len(v)-1])
}

// strs reads a list of one or more strings as str does.
func (r *reader) strs(key string) []string {
	if !r.key(key) {
		return nil
	}
	var list []string
	for sep := `[`; r.ok; sep = `,` {
		list = append(list, r.str(sep))
		if r.key(r.has(`]`)) {
			return list
		}
	}
	return nil
}

// int reads a plain integer: an optional minus and at most 18 digits.
func (r *reader) int(key string) int64 {
	v := r.value(key)
	n, rest, ok := cutInt(v)
	if v != nil && (!ok || len(rest) > 0) {
		r.ok = false
	}
	return n
}

// small reads a plain integer that fits an int.
func (r *reader) small(key string) int {
	n := r.int(key)
	if int64(int(n)) != n {
		r.ok = false
	}
	return int(n)
}

// float reads a number as encoding/json does into a float64.
func (r *reader) float(key string) float64 {
	f, err := strconv.ParseFloat(string(r.value(key)), 64)
	if err != nil {
		r.ok = false
	}
	return f
}

// payload reads a value into p, as json.Unmarshal does.
func (r *reader) payload(key string, p *Payload) {
	if v := r.value(key); v != nil && p.UnmarshalJSON(v) != nil {
		r.ok = false
	}
}

// duration reads a value into d, as json.Unmarshal does.
func (r *reader) duration(key string, d *Duration) {
	if v := r.value(key); v != nil && d.UnmarshalJSON(v) != nil {
		r.ok = false
	}
}

// cutInt cuts a plain integer (an optional minus and at most 18 digits)
// off the front of data.
func cutInt(data []byte) (n int64, rest []byte, ok bool) {
	i := 0
	if i < len(data) && data[i] == '-' {
		i++
	}
	start := i
	for ; i < len(data) && data[i] >= '0' && data[i] <= '9'; i++ {
		n = n*10 + int64(data[i]-'0')
	}
	if i == start || i-start > 18 {
		return 0, data, false
	}
	if data[0] == '-' {
		n = -n
	}
	return n, data[i:], true
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// appendCanonical appends a as json.Marshal writes it, without reflection,
// when nothing in it needs encoding/json's care: a retry policy, strings of
// printable ASCII but quotes, backslashes, '<', '>' and '&', args that are
// JSON json.Marshal neither compacts nor escapes, a backoff coefficient
// written without an exponent. Otherwise it reports !ok, and json.Marshal
// decides.
func (a *ActivityScheduledAttributes) appendCanonical(b []byte) ([]byte, bool) {
	p := a.RetryPolicy
	if p == nil || !plain(a.Kind) || !plain(a.Queue) || !plainList(a.Tags) || !plainList(p.NonRetryableErrorTypes) ||
		!a.Args.plain() || math.Abs(p.BackoffCoefficient) < 1e-6 || math.Abs(p.BackoffCoefficient) >= 1e21 {
		return b, false
	}
	b = append(append(append(b, `{"kind":"`...), a.Kind...), `","args":`...)
	b = append(append(append(append(b, a.Args...), `,"queue":"`...), a.Queue...), `","priority":`...)
	b = strconv.AppendInt(b, int64(a.Priority), 10)
	b = appendDuration(append(b, `,"start_to_close_timeout":`...), a.StartToCloseTimeout)
	if a.ScheduleToCloseTimeout != 0 {
		b = appendDuration(append(b, `,"schedule_to_close_timeout":`...), a.ScheduleToCloseTimeout)
	}
	if a.HeartbeatTimeout != 0 {
		b = appendDuration(append(b, `,"heartbeat_timeout":`...), a.HeartbeatTimeout)
	}
	b = appendDuration(append(b, `,"retry_policy":{"initial_interval":`...), p.InitialInterval)
	b = strconv.AppendFloat(append(b, `,"backoff_coefficient":`...), p.BackoffCoefficient, 'f', -1, 64)
	b = appendDuration(append(b, `,"maximum_interval":`...), p.MaximumInterval)
	b = strconv.AppendInt(append(b, `,"maximum_attempts":`...), int64(p.MaximumAttempts), 10)
	b = append(appendList(b, `,"non_retryable_error_types":`, p.NonRetryableErrorTypes), '}')
	return append(appendList(b, `,"tags":`, a.Tags), '}'), true
}

// appendDuration appends d as Duration.MarshalJSON writes it.
func appendDuration(b []byte, d Duration) []byte {
	return append(append(append(b, '"'), time.Duration(d).String()...), '"')
}

// appendList appends a list of plain strings after its key, unless it is
// empty (omitempty).
func appendList(b []byte, key string, list []string) []byte {
	for i, s := range list {
		if i == 0 {
			b = append(append(b, key...), '[')
		} else {
			b = append(b, ',')
		}
		b = append(append(append(b, '"'), s...), '"')
	}
	if len(list) > 0 {
		b = append(b, ']')
	}
	return b
}

// plain reports whether json.Marshal writes s as itself between quotes.
func plain(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

func plainList(list []string) bool {
	for _, s := range list {
		if !plain(s) {
			return false
		}
	}
	return true
}
