package server

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"unicode/utf8"
)

// The rule for text: everything a request brings (path, query, form and
// body strings, JSON args) must be valid UTF-8 without NUL, which Postgres
// refuses in text and jsonb. It is checked here, before any handler runs
// a query, so bad text is 400 invalid_argument, never a database error.

const textRule = "must be valid UTF-8 without NUL bytes"

// validText reports whether s follows the rule for text.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

func checkText(field, v string) error {
	if !validText(v) {
		return invalidArgument(field, "%s %s", field, textRule)
	}
	return nil
}

// checkRequestText checks a request's path and query.
func checkRequestText(r *http.Request) error {
	if err := checkText("path", r.URL.Path); err != nil {
		return err
	}
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return invalidArgument("query", "malformed query string: %v", err)
	}
	return checkValuesText(query)
}

// checkValuesText checks the names and values of a query or form.
func checkValuesText(values url.Values) error {
	for name, vs := range values {
		if !validText(name) {
			return invalidArgument("query", "a parameter name %s", textRule)
		}
		for _, v := range vs {
			if err := checkText(name, v); err != nil {
				return err
			}
		}
	}
	return nil
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// checkBodyText checks every string of a decoded request body (a pointer to
// a struct): string fields, through pointers and nested structs, and JSON
// args, named by their JSON path ("signal.kind").
func checkBodyText(v any) error {
	return checkValueText("", reflect.ValueOf(v))
}

func checkValueText(field string, v reflect.Value) error {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return checkValueText(field, v.Elem())
	case reflect.String:
		return checkText(field, v.String())
	case reflect.Slice:
		if v.Type() == rawMessageType {
			return checkJSONText(field, v.Bytes())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			if field != "" {
				name = field + "." + name
			}
			if err := checkValueText(name, v.Field(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkJSONText checks JSON args: valid JSON, valid UTF-8 and no \u0000
// escape in any string (Postgres's jsonb refuses it).
func checkJSONText(field string, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	if !json.Valid(data) {
		return invalidArgument(field, "%s are not valid JSON", field)
	}
	if !utf8.Valid(data) || jsonHasNUL(data) {
		return invalidArgument(field, "%s %s (no \\u0000)", field, textRule)
	}
	return nil
}

// jsonHasNUL reports whether valid JSON data has a \u0000 escape in a
// string.
func jsonHasNUL(data []byte) bool {
	inString := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString:
			if i+5 < len(data) && data[i+1] == 'u' && string(data[i+2:i+6]) == "0000" {
				return true
			}
			i++ // skip the escaped character
		}
	}
	return false
}
