package replay

import (
	"errors"
	"fmt"

	"github.com/weirhq/weir/internal/replay/env"
	"github.com/weirhq/weir/workflow"
)

// ErrPayload is matched by Execute's error when the workflow's args can't
// be decoded or its result can't be encoded. Both fail the workflow task (so
// a fixed deployment can resume the run), not the workflow.
var ErrPayload = errors.New("replay: payload can't be encoded or decoded")

// Codec encodes and decodes payloads. Implementations must be deterministic
// when decoding. Its shape matches any Codec interface the worker exposes.
type Codec = env.Codec

// JSONCodec is the default Codec: encoding/json.
type JSONCodec = env.JSONCodec

// Definition is a workflow type with its code erased to bytes, as the engine
// runs it. Build one with [Bind].
type Definition struct {
	// Kind is the workflow type: the Kind() of its args.
	Kind string

	// Run runs the workflow code on encoded args and returns its encoded
	// result. ctx is the engine's Context; Run finds the payload codec
	// through it. A returned error wrapping [ErrPayload] fails the task;
	// any other error fails the workflow.
	Run func(ctx workflow.Context, args []byte) ([]byte, error)
}

// payloadError marks errors of Definition.Run that fail the task.
type payloadError struct{ err error }

func (e *payloadError) Error() string        { return e.err.Error() }
func (e *payloadError) Unwrap() error        { return e.err }
func (e *payloadError) Is(target error) bool { return target == ErrPayload }

// Bind builds the Definition of a workflow type. A and R are inferred from
// wf's Run method; wf.Opts() is read on every run (its ActivityOpts become the
// defaults of the workflow's activities).
//
//	def := replay.Bind(&OrderWorkflow{})
func Bind[A workflow.Args, R any](wf workflow.Workflow[A, R]) *Definition {
	var zero A
	kind := zero.Kind()
	return &Definition{
		Kind: kind,
		Run: func(ctx workflow.Context, encodedArgs []byte) ([]byte, error) {
			codec := codecOf(ctx)
			var args A
			if err := codec.Decode(encodedArgs, &args); err != nil {
				return nil, &payloadError{fmt.Errorf("decoding args of workflow %s as %T: %w", kind, args, err)}
			}
			if opts := wf.Opts(); opts != nil && opts.ActivityOpts != nil {
				ctx = workflow.WithActivityOpts(ctx, opts.ActivityOpts)
			}
			result, err := wf.Run(ctx, args)
			if err != nil {
				return nil, err
			}
			encoded, err := codec.Encode(result)
			if err != nil {
				return nil, &payloadError{fmt.Errorf("encoding result of workflow %s (%T): %w", kind, result, err)}
			}
			return encoded, nil
		},
	}
}

func codecOf(ctx workflow.Context) Codec {
	if e, ok := ctx.Value(env.Key{}).(env.Env); ok {
		return e.Codec()
	}
	return JSONCodec{}
}
