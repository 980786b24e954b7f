package client

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Codec turns payloads (workflow and activity args and results) into bytes
// and back. Wrap JSONCodec to encrypt or compress; the client and every worker
// must use codecs that read each other's output.
type Codec interface {
	// Decode reads data into v, a pointer.
	Decode(data []byte, v any) error

	// Encode returns the bytes for v.
	Encode(v any) ([]byte, error)
}

// JSONCodec is the default Codec: encoding/json.
type JSONCodec struct{}

// Decode implements Codec. Empty data is JSON null: v is left as is.
func (JSONCodec) Decode(data []byte, v any) error {
	if len(data) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return &PayloadError{Err: err, Op: "decoding"}
	}
	return nil
}

// Encode implements Codec.
func (JSONCodec) Encode(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, &PayloadError{Err: err, Op: "encoding"}
	}
	return data, nil
}

// ErrPayload is matched (errors.Is) by a *PayloadError.
var ErrPayload = errors.New("weir: payload cannot be encoded or decoded")

// ErrPayloadTooLarge is matched (errors.Is) by a *PayloadError whose payload
// exceeds the configured size limit.
var ErrPayloadTooLarge = errors.New("weir: payload too large")

// PayloadError means a payload could not be encoded or decoded, or is too
// large.
type PayloadError struct {
	Err error

	// Op is "encoding", "decoding" or "checking size".
	Op string
}

func (e *PayloadError) Error() string { return fmt.Sprintf("weir: %s payload: %v", e.Op, e.Err) }

// Is makes errors.Is(err, ErrPayload) true.
func (e *PayloadError) Is(target error) bool { return target == ErrPayload }

func (e *PayloadError) Unwrap() error { return e.Err }

// encodePayload encodes v, a payload that what and name name ("args of
// workflow" and its ID), within the client's MaxPayloadBytes.
func (c *Client) encodePayload(what, name string, v any) ([]byte, error) {
	payload, err := c.config.Codec.Encode(v)
	if err == nil && len(payload) > c.config.MaxPayloadBytes {
		err = &PayloadError{Op: "checking size of", Err: fmt.Errorf("%w: %s %s is %d bytes, the limit is %d",
			ErrPayloadTooLarge, what, name, len(payload), c.config.MaxPayloadBytes)}
	}
	return payload, err
}
