package workflow

import "fmt"

// UpdateArgs are an update's arguments; Kind names the update type.
type UpdateArgs interface {
	// Kind names the update type.
	Kind() string
}

// UpdateHandlerOpts are options of SetUpdateHandler. A nil
// *UpdateHandlerOpts means defaults.
type UpdateHandlerOpts[U UpdateArgs] struct {
	// Validator accepts (nil) or rejects (an error) an update before
	// anything is recorded: a rejected update leaves no trace in history and
	// its caller gets the error. It reads state as the last workflow task
	// left it and must not block, schedule anything or change state.
	// Defaults to accepting every update.
	Validator func(args U) error
}

// SetUpdateHandler makes the run accept updates of type U (by U.Kind()):
// request/response calls that may change the workflow's state. An update
// that passes opts.Validator is recorded in history (so it is durable before
// its caller gets an answer) and handler runs in a coroutine of its own,
// like one started with Go: it may run activities, sleep and wait; what it
// returns (an R, or an error) is recorded and returned to the caller. Register
// handlers early in Run, before the code blocks.
//
//	workflow.SetUpdateHandler(ctx, func(ctx workflow.Context, add AddItem) (int, error) {
//		cart = append(cart, add.SKU)
//		return len(cart), nil
//	}, &workflow.UpdateHandlerOpts[AddItem]{Validator: func(add AddItem) error {
//		if add.SKU == "" {
//			return errors.New("sku is required")
//		}
//		return nil
//	}})
func SetUpdateHandler[U UpdateArgs, R any](ctx Context, handler func(ctx Context, args U) (R, error), opts *UpdateHandlerOpts[U]) {
	e := envOf(ctx)
	var zero U
	kind := zero.Kind()
	decode := func(encoded []byte) (U, error) {
		var args U
		if err := e.Codec().Decode(encoded, &args); err != nil {
			return args, fmt.Errorf("decoding args of update %s as %T: %w", kind, args, err)
		}
		return args, nil
	}
	var validate func([]byte) error
	if opts != nil && opts.Validator != nil {
		validate = func(encoded []byte) error {
			args, err := decode(encoded)
			if err != nil {
				return err
			}
			return opts.Validator(args)
		}
	}
	e.SetUpdateHandler(kind, validate, func(encoded []byte) ([]byte, error) {
		args, err := decode(encoded)
		if err != nil {
			return nil, err
		}
		result, err := handler(ctx, args)
		if err != nil {
			return nil, err
		}
		return e.Codec().Encode(result)
	})
}
