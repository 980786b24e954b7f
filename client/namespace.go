package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weirhq/weir/internal/store"
)

// NamespaceOpts describe a namespace for RegisterNamespace.
type NamespaceOpts struct {
	// Description is for people.
	Description string

	// Retention is how long the namespace's closed runs and their history
	// are kept before workers delete them. Defaults to 0: the workers'
	// Config.Retention.
	Retention time.Duration
}

// RegisterNamespace records a namespace's description and retention,
// creating or updating it. Namespaces need no registration to be used; this
// only sets their options.
func (c *Client) RegisterNamespace(ctx context.Context, name string, opts *NamespaceOpts) error {
	if err := ValidateNamespace(name); err != nil {
		return err
	}
	opts = cmp.Or(opts, &NamespaceOpts{})
	if opts.Retention < 0 {
		return errors.New("weir: namespace retention must not be negative")
	}
	err := c.store.UpsertNamespace(ctx, c.pool, store.NamespaceParams{Name: name, Description: opts.Description, Retention: opts.Retention})
	if err != nil {
		return fmt.Errorf("registering namespace %s: %w", name, err)
	}
	return nil
}
