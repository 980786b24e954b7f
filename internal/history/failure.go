package history

// Failure is an error as persisted in history: what an activity failed with,
// or what a workflow returned. Causes form a chain.
type Failure struct {
	// Message is the error's message (its Error() text without its cause).
	Message string `json:"message"`

	// Type classifies the error; retry policies match it against
	// NonRetryableErrorTypes. For an application error it is the type the
	// code gave; otherwise it is the Go type of the error, e.g.
	// "*errors.errorString".
	Type string `json:"type,omitempty"`

	// Stack is a stack trace, for panics.
	Stack string `json:"stack,omitempty"`

	// NonRetryable says that retrying can't help.
	NonRetryable bool `json:"non_retryable,omitempty"`

	// Details is an optional payload attached by the code that failed.
	Details Payload `json:"details,omitempty"`

	// Cause is the error this one wraps, if any.
	Cause *Failure `json:"cause,omitempty"`
}
