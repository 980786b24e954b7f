package client

import (
	"encoding/json"
	"errors"
)

// RawArgs are workflow or signal args given as JSON with their kind, for
// callers without the Go type: the HTTP API, the CLI, tools in other
// languages. They are stored exactly as a value of the Go type with the same
// JSON would be, so workflow code receives them typed.
type RawArgs struct {
	// JSON is the args' JSON encoding.
	JSON json.RawMessage

	// KindName is the workflow (or signal) kind.
	KindName string
}

// Kind implements WorkflowArgs and SignalArgs.
func (a RawArgs) Kind() string { return a.KindName }

// MarshalJSON returns the args' JSON as it is.
func (a RawArgs) MarshalJSON() ([]byte, error) {
	if len(a.JSON) == 0 {
		return []byte("null"), nil
	}
	if !json.Valid(a.JSON) {
		return nil, errors.New("weir: RawArgs.JSON is not valid JSON")
	}
	return a.JSON, nil
}
