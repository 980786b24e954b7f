package fencing

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/array"
)

// Lease is an attempt's hold on its job.
type Lease struct {
	// Attempt is River's attempt number of the attempt holding the lease.
	Attempt int

	// AttemptedAt is when the attempt started (River's attempted_at, database
	// time).
	AttemptedAt time.Time

	// Details are the progress details last stored with Heartbeat, by this
	// attempt or an earlier attempt of the same job; nil if none.
	Details json.RawMessage

	// ExpiresAt is when the lease ends unless renewed, as of the last renewal
	// this process saw (database time). Zero when the job is not fenced (it
	// was fetched before the fencing migration, or set running by rivertest):
	// then River's own rescue rules apply to it.
	ExpiresAt time.Time

	// JobID is the job's ID.
	JobID int64

	// Token is the attempt's lease token, a UUID minted when the job entered
	// running for this attempt. Empty when the attempt never received one
	// (fetched before the fencing migration); its proof is then
	// (Attempt, AttemptedAt).
	Token string
}

// LeaseFromContext returns the lease of the attempt whose work context is
// ctx, and false outside a job run by a client with the fencing plugin.
//
// Calling it with the context River passes to Worker.Work also tells the
// lease keeper the attempt's River deadline (Worker.Timeout), after which
// renewals stop.
func LeaseFromContext(ctx context.Context) (Lease, bool) {
	st := attemptFromContext(ctx)
	if st == nil {
		return Lease{}, false
	}
	st.observeDeadline(ctx)
	return st.snapshot(), true
}

// Heartbeat renews the lease of the attempt whose work context is ctx at once
// and stores details (marshalled to JSON; nil keeps the stored details) for
// this attempt and later attempts of the job to read in Lease.Details. It
// returns a *LeaseLostError (matching ErrLeaseLost) if the attempt no longer
// holds the job, and then also cancels the attempt's context with that cause.
// It returns ErrNoLease outside a job run with the fencing plugin. Before the
// fencing migration it does nothing.
//
// Heartbeat does not wait on a job row that another transaction holds
// locked for long: it tries again for up to a quarter of LeaseTTL (at most a
// second), then returns a *LeaseBusyError (matching ErrLeaseBusy). The
// lease was then neither renewed nor judged lost: the lease keeper goes on
// renewing it, and the attempt may call Heartbeat again later. A lock that
// lasts is usually the attempt's own open transaction that wrote the job
// (river.JobCompleteTx, CompleteTx, JobUpdateTx): heartbeat before it, or
// after it commits.
//
// Call it with the context River passes to Worker.Work: that also tells the
// lease keeper the attempt's River deadline (Worker.Timeout, or none), after
// which renewals stop. Each call restarts the attempt's HeartbeatTimeout
// (LimitAttempt).
func Heartbeat(ctx context.Context, details any) error {
	st := attemptFromContext(ctx)
	if st == nil {
		return ErrNoLease
	}
	st.observeDeadline(ctx)
	st.mu.Lock()
	st.lastBeat = time.Now()
	st.mu.Unlock()
	var detailsJSON []byte
	if details != nil {
		var err error
		if detailsJSON, err = json.Marshal(details); err != nil {
			return fmt.Errorf("marshalling heartbeat details of job %d: %w", st.jobID, err)
		}
	}
	return st.driver.keeper.heartbeat(ctx, st, detailsJSON)
}

// ErrLeaseBusy means Heartbeat found the job's row locked by another
// transaction for as long as it waits: the lease was neither renewed nor
// found lost. Try again later; the lease keeper keeps renewing the lease
// meanwhile.
var ErrLeaseBusy = errors.New("fencing: heartbeat refused: job row locked by another transaction")

// LeaseBusyError is Heartbeat's error when another transaction held the
// job's row locked for as long as Heartbeat waits. It matches ErrLeaseBusy
// with errors.Is and unwraps to the database's error (SQLSTATE 55P03,
// lock_not_available).
type LeaseBusyError struct {
	// Attempt is the attempt whose heartbeat found the row locked.
	Attempt int

	// Err is the database's lock error from the last try.
	Err error

	// JobID is the job whose row was locked.
	JobID int64

	// Waited is how long Heartbeat tried before giving up.
	Waited time.Duration
}

func (e *LeaseBusyError) Error() string {
	return fmt.Sprintf("fencing: heartbeat of job %d attempt %d not applied: the job's row stayed locked by another transaction for %s: %v",
		e.JobID, e.Attempt, e.Waited.Round(time.Millisecond), e.Err)
}

// Is reports whether target is ErrLeaseBusy.
func (e *LeaseBusyError) Is(target error) bool { return target == ErrLeaseBusy }

// Unwrap returns the database's lock error.
func (e *LeaseBusyError) Unwrap() error { return e.Err }

// proof is what an attempt shows to prove it still holds its job: its token
// or, for an attempt that never received one, (attempt, attempted_at).
type proof struct {
	Attempt     int
	AttemptedAt time.Time
	Token       string
}

// encode renders the proof as the compact string the plugin puts in the
// attempt's metadata updates: "<token>/<attempt>/<attempted_at as Unix
// microseconds>" (token empty when there is none). Postgres keeps
// microseconds, so the round trip is exact.
func (p proof) encode() string {
	buf := make([]byte, 0, 72)
	buf = append(buf, p.Token...)
	buf = append(buf, '/')
	buf = strconv.AppendInt(buf, int64(p.Attempt), 10)
	buf = append(buf, '/')
	buf = strconv.AppendInt(buf, p.AttemptedAt.UnixMicro(), 10)
	return string(buf)
}

func decodeProof(s string) (*proof, error) {
	token, rest, ok1 := strings.Cut(s, "/")
	attemptText, microsText, ok2 := strings.Cut(rest, "/")
	attempt, err1 := strconv.Atoi(attemptText)
	micros, err2 := strconv.ParseInt(microsText, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("malformed lease proof %q", s)
	}
	return &proof{Attempt: attempt, AttemptedAt: time.UnixMicro(micros).UTC(), Token: token}, nil
}

// proofKey is the key under which the plugin puts an attempt's proof in the
// attempt's River metadata updates; the Pilot strips it before River writes,
// so it is never persisted.
const proofKey = "weir:fencing:proof"

type attemptKey struct{}

func attemptFromContext(ctx context.Context) *attemptState {
	st, _ := ctx.Value(attemptKey{}).(*attemptState)
	return st
}

// attemptState is one attempt as its process sees it. It is also the
// attempt's work context (runAttempt, attemptCtx), carrying the state under
// attemptKey.
type attemptState struct {
	attemptCtx

	attempt     int
	attemptedAt time.Time
	driver      *Driver
	jobID       int64
	localStart  time.Time
	schema      string
	token       string

	sameJob *attemptState // the lease keeper's next attempt of this job (under its shard lock)

	mu         sync.Mutex
	details    json.RawMessage
	expiresAt  time.Time
	leaseFrom  time.Time // local time before the statement that last granted or extended the lease was sent; zero: unknown
	lost       bool
	observed   bool       // renewUntil comes from the work context's deadline
	ctxEnded   ctxEnd     // under ctxMu (attemptCtx)
	renewUntil *time.Time // database time after which renewals stop; nil: never
	workEnded  time.Time  // when the work returned, for an attempt whose outcome River writes after it
	stuckAfter time.Duration
	limits     AttemptLimits // told by LimitAttempt
	lastBeat   time.Time     // local time of the last Heartbeat; zero: none yet
}

// youngerThan reports whether the attempt's lease is surely younger than age:
// granted or last extended by a statement sent less than age ago
// (leaseFrom), so that, unless its lease end caps it, it has more than
// LeaseTTL - age left. Callers hold s.mu.
func (s *attemptState) youngerThan(age time.Duration) bool {
	return !s.leaseFrom.IsZero() && time.Since(s.leaseFrom) < age
}

// extend records the lease's expiry as a renewal sent at local time sent
// left it. Callers hold s.mu.
func (s *attemptState) extend(expires, sent time.Time) {
	if expires.After(s.expiresAt) {
		s.leaseFrom = sent
	}
	s.expiresAt = expires
}

func (s *attemptState) proof() proof {
	return proof{Attempt: s.attempt, AttemptedAt: s.attemptedAt, Token: s.token}
}

func (s *attemptState) snapshot() Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Lease{
		Attempt:     s.attempt,
		AttemptedAt: s.attemptedAt,
		Details:     s.details,
		ExpiresAt:   s.expiresAt,
		JobID:       s.jobID,
		Token:       s.token,
	}
}

// observeDeadline learns the attempt's River deadline from the context River
// passes to Worker.Work, which carries Worker.Timeout (or the client's
// JobTimeout) as its deadline, or none for a timeout of -1.
func (s *attemptState) observeDeadline(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.observed {
		return
	}
	s.observed = true
	deadline, ok := ctx.Deadline()
	if !ok {
		s.renewUntil = nil
		return
	}
	s.renewUntil = s.renewalEnd(deadline)
}

// renewalEnd is the database time after which the attempt's lease is no
// longer renewed: its local deadline, carried over to its attempted_at, plus
// River's stuck threshold. Callers hold s.mu or own s alone.
func (s *attemptState) renewalEnd(deadline time.Time) *time.Time {
	until := s.attemptedAt.Add(deadline.Sub(s.localStart) + s.stuckAfter)
	return &until
}

// runAttempt runs fn as attempt st: its context carries st (LeaseFromContext,
// Heartbeat) and is cancelled with cause ErrLeaseLost when a renewal is
// refused, and the lease keeper renews st's lease while fn runs, if it has
// one. With awaitOutcome (River's completer writes the outcome after fn
// returns) the lease is renewed on until that write is done, or for
// outcomeWait at most (decision 0007).
func (d *Driver) runAttempt(ctx context.Context, st *attemptState, awaitOutcome bool, fn func(context.Context) error) error {
	st.start(ctx)
	defer st.cancel(nil)
	if st.token == "" || st.expiresAt.IsZero() {
		return fn(st)
	}
	d.keeper.add(st)
	returned := false
	defer func() {
		// A work that did not return (a panic, runtime.Goexit) leaves the
		// keeper at once, as before: River may write no outcome for it.
		if awaitOutcome && returned {
			st.mu.Lock()
			st.workEnded = time.Now() // its outcome is on its way through River's completer
			st.mu.Unlock()
		} else {
			d.keeper.remove(st)
		}
	}()
	err := fn(st)
	returned = true
	return err
}

// ended returns when the attempt's work returned, zero while it runs (or
// for an attempt that leaves the keeper when its work returns).
func (s *attemptState) ended() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workEnded
}

// leaseTTLSetting is the value of weir.fencing_lease_ttl that asks the
// lease trigger for a LeaseTTL lease.
func (d *Driver) leaseTTLSetting() string {
	return strconv.FormatInt(d.config.LeaseTTL.Microseconds(), 10) + " microseconds"
}

// lose marks the attempt's lease lost and cancels its context with the
// returned error as cause. It returns the event to tell the observer of
// (counted already), nil when the lease was lost before: the context is
// cancelled first, so that no observer delays it.
func (s *attemptState) lose(op string) (*LeaseLostError, *Event) {
	err := &LeaseLostError{Attempt: s.attempt, JobID: s.jobID, Op: op}
	s.mu.Lock()
	already := s.lost
	s.lost = true
	s.mu.Unlock()
	var event *Event
	if !already {
		event = &Event{Attempt: s.attempt, JobID: s.jobID, Kind: EventLeaseLost}
		s.driver.counters.count(event)
	}
	s.cancel(err)
	return err, event
}

func tableName(schema, table string) string {
	if schema == "" {
		return pgx.Identifier{table}.Sanitize()
	}
	return pgx.Identifier{schema, table}.Sanitize()
}

// mintedTokensMax bounds the tokens a fetch brings (mintLeaseTokens): River
// asks for as many jobs as its client has free workers, which may be
// thousands when few are available. Claims bring one each, however many.
const mintedTokensMax = 256

// mintLeaseTokens returns n fresh lease tokens, for a fetch or claims:
// random (version 4) UUIDs, from one read of crypto/rand.
func mintLeaseTokens(n int) array.UUIDs {
	n = max(n, 0)
	random := make([]byte, 16*n)
	_, _ = rand.Read(random) // never fails (crypto/rand crashes the program instead)
	tokens := make(array.UUIDs, n)
	for i := range tokens {
		token := uuid.UUID(random[16*i:])
		token[6] = token[6]&0x0f | 0x40 // version 4
		token[8] = token[8]&0x3f | 0x80 // RFC 9562 variant
		tokens[i] = token
	}
	return tokens
}
