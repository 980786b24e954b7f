package client

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strconv"
)

// requestHashVersion leads the request hashes this build writes.
const requestHashVersion = 1

// requestHash identifies what a start asked for, independently of the codec
// (an encrypting codec's output differs every time): the workflow kind, the
// args as canonical JSON (object keys sorted, no insignificant whitespace)
// and every option that shapes the run (queue, run and execution timeouts,
// ID reuse policy). Namespace and workflow ID are the key it is stored
// under; EagerStart changes how the run starts, not the run. marshaled,
// if not nil, is json.Marshal's encoding of args.
func requestHash(info *StartInfo, opts *StartOpts, args WorkflowArgs, marshaled []byte) ([]byte, error) {
	canonical, err := canonicalJSON(args, marshaled)
	if err != nil {
		return nil, &PayloadError{Err: err, Op: "encoding"}
	}
	h := sha256.New()
	for _, part := range [][]byte{
		[]byte(info.Kind), []byte(info.Queue), canonical,
		[]byte(strconv.FormatInt(int64(opts.RunTimeout), 10)),
		[]byte(strconv.FormatInt(int64(opts.ExecutionTimeout), 10)),
		[]byte(opts.IDReusePolicy.String()),
	} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return h.Sum([]byte{requestHashVersion}), nil
}

// canonicalJSON is v's JSON with object keys sorted and insignificant
// whitespace dropped; numbers keep their text. encoded, if not nil, is
// json.Marshal's encoding of v.
func canonicalJSON(v any, encoded []byte) (_ []byte, err error) {
	if encoded == nil {
		encoded, err = json.Marshal(v)
	}
	if err != nil || isCanonical(encoded) {
		return encoded, err
	}
	if sorted, ok := sortKeys(encoded); ok {
		return sorted, nil
	}
	return sortedJSON(encoded)
}

// sortedJSON is the valid JSON data with object keys sorted and
// insignificant whitespace dropped; numbers keep their text.
func sortedJSON(encoded []byte) ([]byte, error) {
	decoder := json.NewDecoder(bytes.NewReader(encoded))
	decoder.UseNumber()
	var tree any
	if err := decoder.Decode(&tree); err != nil {
		return nil, err
	}
	return json.Marshal(tree) // encoding/json sorts map keys
}

// isCanonical reports whether the valid JSON data is sortedJSON's already,
// as most args encoded from a struct with its fields in key order are:
// printable ASCII but for what encoding/json escapes, no escape (a key's
// hides its order, a string's may differ from encoding/json's own), no
// whitespace outside strings, each object's keys strictly ascending,
// nesting no deeper than encoding/json decodes. It may say false of
// canonical JSON.
func isCanonical(data []byte) bool {
	for _, c := range data {
		if c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	type level struct {
		object, key bool // an object, and expecting a key
		last        []byte
	}
	var shallow [8]level // room enough for most args, on the stack
	levels := shallow[:0]
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case ' ', '\t', '\n', '\r', '\\':
			return false
		case '{', '[':
			if len(levels) == maxCanonicalDepth {
				return false
			}
			levels = append(levels, level{object: c == '{', key: c == '{'})
		case '}', ']':
			levels = levels[:len(levels)-1]
		case ',':
			if top := &levels[len(levels)-1]; top.object {
				top.key = true
			}
		case '"':
			end := bytes.IndexAny(data[i+1:], `"\`)
			if end < 0 || data[i+1+end] != '"' {
				return false
			}
			s := data[i+1 : i+1+end]
			i += end + 1
			if len(levels) == 0 {
				continue
			}
			if top := &levels[len(levels)-1]; top.key {
				if top.last != nil && bytes.Compare(top.last, s) >= 0 {
					return false
				}
				top.last, top.key = s, false
			}
		}
	}
	return true
}

// maxCanonicalDepth is the nesting encoding/json's decoder refuses past.
const maxCanonicalDepth = 10000

// sortKeys is sortedJSON of the valid JSON data without decoding it, for
// data that isCanonical's bytes would pass (printable ASCII but for what
// encoding/json escapes, no escape: each string is its own decoding and
// encoding) nested no deeper than maxSortDepth; ok is false for any other
// data, and for whitespace outside strings.
func sortKeys(data []byte) (sorted []byte, ok bool) {
	for _, c := range data {
		if c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&' || c == '\\' {
			return nil, false
		}
	}
	// An object's members are sorted in place, after them: room for twice.
	sorted, end, ok := appendSorted(make([]byte, 0, 2*len(data)), data, 0, 0)
	return sorted, ok && end == len(data)
}

// maxSortDepth is the nesting sortKeys leaves to sortedJSON.
const maxSortDepth = 64

// appendSorted appends the sorted form of the value at data[i:] to out, and
// returns the index past the value.
func appendSorted(out, data []byte, i, depth int) (_ []byte, end int, ok bool) {
	if i >= len(data) || depth > maxSortDepth {
		return out, i, false
	}
	switch data[i] {
	case '{':
		return appendSortedObject(out, data, i, depth)
	case '[':
		out = append(out, '[')
		if i++; i < len(data) && data[i] == ']' {
			return append(out, ']'), i + 1, true
		}
		for {
			if out, i, ok = appendSorted(out, data, i, depth+1); !ok || i >= len(data) || data[i] != ',' && data[i] != ']' {
				return out, i, false
			}
			if out = append(out, data[i]); data[i] == ']' {
				return out, i + 1, true
			}
			i++
		}
	case '"':
		n := bytes.IndexByte(data[i+1:], '"')
		if n < 0 {
			return out, i, false
		}
		return append(out, data[i:i+n+2]...), i + n + 2, true
	}
	end = i // a number, true, false or null
	for end < len(data) && (data[end] >= '0' && data[end] <= '9' || data[end] >= 'a' && data[end] <= 'z' ||
		data[end] == '-' || data[end] == '+' || data[end] == '.' || data[end] == 'E') {
		end++
	}
	return append(out, data[i:end]...), end, end > i
}

// appendSortedObject is appendSorted of the object at data[i:]: its members
// by key, each key once with its last value (as decoding keeps it).
func appendSortedObject(out, data []byte, i, depth int) (_ []byte, end int, ok bool) {
	type member struct {
		key      []byte // as in data
		from, to int    // its value's sorted form, in out
	}
	var few [16]member
	members, start := few[:0], len(out)
	if i++; i < len(data) && data[i] == '}' {
		return append(out, '{', '}'), i + 1, true
	}
	for {
		n := -1
		if i < len(data) && data[i] == '"' {
			n = bytes.IndexByte(data[i+1:], '"')
		}
		if n < 0 || i+n+2 >= len(data) || data[i+n+2] != ':' {
			return out, i, false
		}
		m := member{key: data[i+1 : i+1+n], from: len(out)}
		if out, i, ok = appendSorted(out, data, i+n+3, depth+1); !ok || i >= len(data) || data[i] != ',' && data[i] != '}' {
			return out, i, false
		}
		m.to = len(out)
		members = append(members, m)
		if data[i] == '}' {
			break
		}
		i++
	}
	slices.SortStableFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	sorted := len(out)
	out = append(out, '{')
	for k, m := range members {
		if k+1 < len(members) && bytes.Equal(m.key, members[k+1].key) {
			continue // a later value of the same key
		}
		if len(out) > sorted+1 {
			out = append(out, ',')
		}
		out = append(append(append(out, '"'), m.key...), '"', ':')
		out = append(out, out[m.from:m.to]...)
	}
	out = append(out, '}')
	return out[:start+copy(out[start:], out[sorted:])], i + 1, true
}
