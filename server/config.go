package server

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/weirhq/weir/client"
)

const (
	// CheckTimeoutDefault bounds each health or readiness check.
	CheckTimeoutDefault = 2 * time.Second

	// MaxBodyBytesDefault caps a request body: the default payload limit of
	// the client plus room for the request's other fields.
	MaxBodyBytesDefault = client.MaxPayloadBytesDefault + 64<<10

	// MaxWaitDefault caps the wait parameter of a result long poll.
	MaxWaitDefault = 60 * time.Second

	// ShutdownTimeoutDefault bounds how long Serve waits for in-flight
	// requests once its context ends.
	ShutdownTimeoutDefault = 30 * time.Second

	// RequestTimeoutDefault bounds each API request (a result long poll gets
	// its wait on top).
	RequestTimeoutDefault = 30 * time.Second

	// tokenSecretMinLength is the shortest token secret accepted.
	tokenSecretMinLength = 16

	// secretMinBits and secretMinDistinct are the least estimated entropy
	// and distinct characters of a secret (checkSecret).
	secretMinBits     = 40
	secretMinDistinct = 8
)

// Config configures a Server. The zero value works: it serves health,
// readiness and metrics, and answers every API call 401 until Tokens are set.
type Config struct {
	// AllowUnauthenticated serves the API to anyone, with the admin role in
	// every namespace. Only for a server listening on loopback (weir dev):
	// the server then answers only requests to a loopback Host, from a
	// loopback Origin when one is sent, and API writes only with
	// Content-Type application/json, so that no web page of another site,
	// nor one reached by DNS rebinding, can drive it. Defaults to false.
	AllowUnauthenticated bool

	// CheckTimeout bounds each health or readiness check's database work.
	// Defaults to CheckTimeoutDefault.
	CheckTimeout time.Duration

	// Codec decodes workflow results for the result endpoint; it must match
	// the workers'. Defaults to client.JSONCodec.
	Codec client.Codec

	// Logger receives request errors. Defaults to discarding.
	Logger *slog.Logger

	// MaxBodyBytes caps a request body; a larger one is 413
	// payload_too_large. Defaults to MaxBodyBytesDefault.
	MaxBodyBytes int64

	// MaxWait caps the wait of a result long poll. Defaults to
	// MaxWaitDefault.
	MaxWait time.Duration

	// MetricsToken, when set, is the bearer secret /metrics requires (at
	// least 16 bytes, not guessable, like a token's). Defaults to empty:
	// /metrics is open, which is safe with the default RunMetrics.
	MetricsToken string

	// RunMetrics picks how /metrics counts workflow runs. Defaults to
	// RunMetricsByState; RunMetricsByNamespace needs MetricsToken.
	RunMetrics RunMetrics

	// RunMetricsInterval is how often, at most, the runs gauge is counted
	// in the database (one grouped count of the runs table); scrapes in
	// between get the last count. Defaults to RunMetricsIntervalDefault.
	RunMetricsInterval time.Duration

	// RequestTimeout bounds each API request. Defaults to
	// RequestTimeoutDefault.
	RequestTimeout time.Duration

	// ShutdownTimeout bounds how long Serve waits for in-flight requests once
	// its context ends. Defaults to ShutdownTimeoutDefault.
	ShutdownTimeout time.Duration

	// Schema is the Postgres schema holding River's and weir's tables.
	// Defaults to empty: the first schema on the search_path.
	Schema string

	// Tokens are the bearer tokens the API accepts. Defaults to none.
	Tokens []*Token
}

func (c *Config) withDefaults() *Config {
	out := *c
	out.CheckTimeout = cmp.Or(out.CheckTimeout, CheckTimeoutDefault)
	if out.Codec == nil {
		out.Codec = client.JSONCodec{}
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	out.MaxBodyBytes = cmp.Or(out.MaxBodyBytes, MaxBodyBytesDefault)
	out.MaxWait = cmp.Or(out.MaxWait, MaxWaitDefault)
	out.RequestTimeout = cmp.Or(out.RequestTimeout, RequestTimeoutDefault)
	out.RunMetrics = cmp.Or(out.RunMetrics, RunMetricsByState)
	out.RunMetricsInterval = cmp.Or(out.RunMetricsInterval, RunMetricsIntervalDefault)
	out.ShutdownTimeout = cmp.Or(out.ShutdownTimeout, ShutdownTimeoutDefault)
	return &out
}

func (c *Config) validate() error {
	if c.CheckTimeout < 0 || c.MaxBodyBytes < 0 || c.MaxWait < 0 || c.RequestTimeout < 0 || c.ShutdownTimeout < 0 {
		return errors.New("server config: CheckTimeout, MaxBodyBytes, MaxWait, RequestTimeout and ShutdownTimeout must not be negative")
	}
	if c.RunMetricsInterval < 0 {
		return errors.New("server config: RunMetricsInterval must not be negative")
	}
	switch c.RunMetrics {
	case RunMetricsByState, RunMetricsOff:
	case RunMetricsByNamespace:
		if c.MetricsToken == "" {
			return errors.New("server config: RunMetrics \"namespace\" shows every namespace on /metrics: set MetricsToken")
		}
	default:
		return fmt.Errorf("server config: RunMetrics %q is not state, namespace or off", c.RunMetrics)
	}
	if c.MetricsToken != "" {
		if err := checkSecret(c.MetricsToken); err != nil {
			return fmt.Errorf("server config: MetricsToken: %w", err)
		}
	}
	secrets := make(map[string]string, len(c.Tokens))
	for i, token := range c.Tokens {
		if token == nil {
			return fmt.Errorf("server config: Tokens[%d] is nil", i)
		}
		if err := token.validate(); err != nil {
			return fmt.Errorf("server config: token %q: %w", token.Name, err)
		}
		if other, ok := secrets[token.Secret]; ok {
			return fmt.Errorf("server config: tokens %q and %q have the same secret", other, token.Name)
		}
		secrets[token.Secret] = token.Name
	}
	return nil
}

// Role is what a token may do in its namespaces. Each role includes the ones
// before it: read, write, admin.
type Role string

const (
	// RoleRead may describe, list, read history and await results.
	RoleRead Role = "read"

	// RoleWrite may also start, signal, cancel and terminate.
	RoleWrite Role = "write"

	// RoleAdmin may do everything: also create, change, pause, resume,
	// trigger, backfill and delete schedules (reading them needs read).
	RoleAdmin Role = "admin"
)

// roles are the roles, each including the ones before it.
var roles = []Role{RoleRead, RoleWrite, RoleAdmin}

// rank is r's place in roles, from 1; 0 for no role.
func (r Role) rank() int { return slices.Index(roles, r) + 1 }

// includes reports whether r may do what need allows.
func (r Role) includes(need Role) bool { return r.rank() >= need.rank() && need.rank() > 0 }

// NamespaceAll in Token.Namespaces grants every namespace.
const NamespaceAll = "*"

// Token is a bearer token the API accepts.
type Token struct {
	// Name identifies the token in logs and errors; never the secret.
	Name string

	// Namespaces are the namespaces the token may act in; NamespaceAll
	// grants all. Required.
	Namespaces []string

	// Role is what the token may do there. Required.
	Role Role

	// Secret is the bearer value: at least 16 bytes, not a repetition of
	// a few characters (see ParseTokens' errors). Required.
	Secret string
}

func (t *Token) validate() error {
	if t.Name == "" {
		return errors.New("a name is required")
	}
	if t.Role.rank() == 0 {
		return fmt.Errorf("role %q is not read, write or admin", t.Role)
	}
	if len(t.Namespaces) == 0 {
		return errors.New("at least one namespace is required (\"*\" for all)")
	}
	return checkSecret(t.Secret)
}

// checkSecret refuses a secret shorter than tokenSecretMinLength or one
// that repeats few characters: fewer than secretMinDistinct distinct bytes,
// or under secretMinBits of entropy estimated from its bytes' frequencies
// ("passwordpassword", "abcdabcdabcdabcd"). A random secret of 32 hex
// digits or more passes.
func checkSecret(secret string) error {
	if len(secret) < tokenSecretMinLength {
		return fmt.Errorf("secret is shorter than %d bytes", tokenSecretMinLength)
	}
	counts := map[byte]int{}
	for i := range len(secret) {
		counts[secret[i]]++
	}
	bits := 0.0
	for _, n := range counts {
		p := float64(n) / float64(len(secret))
		bits -= float64(n) * math.Log2(p)
	}
	if len(counts) < secretMinDistinct || bits < secretMinBits {
		return fmt.Errorf("secret is too easy to guess (about %.0f bits, %d distinct characters; need %d bits and %d): use a random one, e.g. openssl rand -hex 32",
			bits, len(counts), secretMinBits, secretMinDistinct)
	}
	return nil
}

func (t *Token) allows(namespace string) bool {
	return slices.Contains(t.Namespaces, NamespaceAll) || slices.Contains(t.Namespaces, namespace)
}

// ParseTokens reads tokens written as NAME:ROLE:NAMESPACES:SECRET, where
// NAMESPACES is a comma-separated list or "*", separated by semicolons or
// newlines; the secret is the rest of the entry and may contain colons. This
// is the format of weir server's --token flag and WEIR_TOKENS. Errors never
// include a secret.
func ParseTokens(s string) ([]*Token, error) {
	var tokens []*Token
	for i, entry := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == '\n' }) {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		parts := strings.SplitN(entry, ":", 4)
		if len(parts) != 4 {
			return nil, fmt.Errorf("token %d: want NAME:ROLE:NAMESPACES:SECRET", i+1)
		}
		token := &Token{Name: parts[0], Role: Role(parts[1]), Secret: parts[3]}
		for _, ns := range strings.Split(parts[2], ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				token.Namespaces = append(token.Namespaces, ns)
			}
		}
		if err := token.validate(); err != nil {
			return nil, fmt.Errorf("token %d (%s): %w", i+1, token.Name, err)
		}
		tokens = append(tokens, token)
	}
	return tokens, nil
}
