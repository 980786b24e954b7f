package engine

import (
	"bytes"
	"encoding/json"
)

// readRef reads an outcome's reference (outcomeRef) from its attributes as
// json.Unmarshal would, without reflection or allocations of its own: the top-level
// keys scheduled_event_id and started_event_id, every other value
// skipped. It reads only valid JSON whose top level is an object whose
// reference keys are spelled exactly and hold plain integers; of any other
// it reports !ok, and json.Unmarshal decides.
func readRef(data []byte) (ref outcomeRef, ok bool) {
	if !json.Valid(data) {
		return ref, false
	}
	i := skipSpace(data, 0)
	if i == len(data) || data[i] != '{' {
		return ref, false
	}
	for i = skipSpace(data, i+1); i < len(data) && data[i] != '}'; {
		key, next := plainString(data, i)
		if next < 0 {
			return ref, false
		}
		i = skipSpace(data, skipSpace(data, next)+1) // past the colon
		var target *int64
		switch {
		case bytes.Equal(key, []byte("scheduled_event_id")):
			target = &ref.ScheduledEventID
		case bytes.Equal(key, []byte("started_event_id")):
			target = &ref.StartedEventID
		case bytes.EqualFold(key, []byte("scheduled_event_id")), bytes.EqualFold(key, []byte("started_event_id")):
			return ref, false // json.Unmarshal matches keys regardless of case
		}
		if target != nil {
			*target, i = plainInt(data, i)
		} else {
			i = skipValue(data, i)
		}
		if i < 0 {
			return ref, false
		}
		if i = skipSpace(data, i); i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return ref, true
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// plainString returns the string at data[i] and the index past it, or -1
// if it has escapes.
func plainString(data []byte, i int) ([]byte, int) {
	end := bytes.IndexAny(data[i+1:], `"\`)
	if data[i] != '"' || end < 0 || data[i+1+end] != '"' {
		return nil, -1
	}
	return data[i+1 : i+1+end], i + end + 2
}

// plainInt returns the integer at data[i], of at most 18 digits, and the
// index past it, or -1 if there is none (a fraction, an exponent, null).
func plainInt(data []byte, i int) (int64, int) {
	negative := i < len(data) && data[i] == '-'
	if negative {
		i++
	}
	var n int64
	start := i
	for ; i < len(data) && data[i] >= '0' && data[i] <= '9'; i++ {
		n = n*10 + int64(data[i]-'0')
	}
	if i == start || i-start > 18 || i < len(data) && (data[i] == '.' || data[i] == 'e' || data[i] == 'E') {
		return 0, -1
	}
	if negative {
		n = -n
	}
	return n, i
}

// skipValue returns the index past the (valid) JSON value at data[i].
func skipValue(data []byte, i int) int {
	depth := 0
	for ; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
		case ',':
			if depth == 0 {
				return i
			}
		}
		if depth == 0 && (data[i] == '"' || data[i] == '}' || data[i] == ']') {
			return i + 1
		}
	}
	return i
}
