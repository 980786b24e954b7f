package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/http"
	"sync"
	"time"
)

// UI logins live in the server process (see docs/operations.md): the
// cookie holds a random login ID, never a token's secret.

const (
	// uiLoginsMax bounds the live sessions; past it the oldest goes.
	uiLoginsMax = 10000

	// uiLoginFailuresMax failed sign-ins from one address within
	// uiLoginWindow lock that address out until the window ends.
	uiLoginFailuresMax = 10
	uiLoginWindow      = 5 * time.Minute

	// uiLoginAddressesMax bounds the addresses whose failures are kept.
	uiLoginAddressesMax = 10000
)

type uiLoginEntry struct {
	expires time.Time
	token   *Token
}

// uiLogins are the live sessions, by the hash of their ID, and the
// recent failed sign-ins by address.
type uiLogins struct {
	mu       sync.Mutex
	byHash   map[[sha256.Size]byte]*uiLoginEntry
	failures map[string]*uiLoginFailures
	now      func() time.Time
}

type uiLoginFailures struct {
	count int
	since time.Time
}

func newUISessions() *uiLogins {
	return &uiLogins{
		byHash:   map[[sha256.Size]byte]*uiLoginEntry{},
		failures: map[string]*uiLoginFailures{},
		now:      time.Now,
	}
}

// create starts a session of token and returns its ID.
func (u *uiLogins) create(token *Token) (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(raw)
	u.mu.Lock()
	defer u.mu.Unlock()
	now := u.now()
	if len(u.byHash) >= uiLoginsMax {
		u.evictLocked(now)
	}
	u.byHash[sha256.Sum256([]byte(id))] = &uiLoginEntry{expires: now.Add(uiLoginMaxAge), token: token}
	return id, nil
}

// evictLocked drops the expired sessions, and the oldest if none expired.
func (u *uiLogins) evictLocked(now time.Time) {
	var oldest [sha256.Size]byte
	var oldestExpiry time.Time
	for hash, entry := range u.byHash {
		if !now.Before(entry.expires) {
			delete(u.byHash, hash)
			continue
		}
		if oldestExpiry.IsZero() || entry.expires.Before(oldestExpiry) {
			oldest, oldestExpiry = hash, entry.expires
		}
	}
	if len(u.byHash) >= uiLoginsMax {
		delete(u.byHash, oldest)
	}
}

// token returns the token of a live session; nil when id names none.
func (u *uiLogins) token(id string) *Token {
	hash := sha256.Sum256([]byte(id))
	u.mu.Lock()
	defer u.mu.Unlock()
	entry, ok := u.byHash[hash]
	if !ok {
		return nil
	}
	if !u.now().Before(entry.expires) {
		delete(u.byHash, hash)
		return nil
	}
	return entry.token
}

// revoke ends a session.
func (u *uiLogins) revoke(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.byHash, sha256.Sum256([]byte(id)))
}

// loginAllowed reports whether address may try to sign in, and if not,
// how long until it may.
func (u *uiLogins) loginAllowed(address string) (bool, time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f, ok := u.failures[address]
	if !ok {
		return true, 0
	}
	left := f.since.Add(uiLoginWindow).Sub(u.now())
	if left <= 0 {
		delete(u.failures, address)
		return true, 0
	}
	return f.count < uiLoginFailuresMax, left
}

// loginFailed records a failed sign-in from address.
func (u *uiLogins) loginFailed(address string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := u.now()
	f, ok := u.failures[address]
	if !ok || !now.Before(f.since.Add(uiLoginWindow)) {
		if len(u.failures) >= uiLoginAddressesMax {
			for a, other := range u.failures {
				if !now.Before(other.since.Add(uiLoginWindow)) {
					delete(u.failures, a)
				}
			}
		}
		if len(u.failures) >= uiLoginAddressesMax {
			return // every slot is a live lockout: keep those
		}
		f = &uiLoginFailures{since: now}
		u.failures[address] = f
	}
	f.count++
}

// clientAddress is the address a sign-in is counted against: the peer's IP
// (not X-Forwarded-For, which any caller can set).
func clientAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
