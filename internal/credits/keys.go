package credits

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/store"
)

// KeyPrefix starts every API key (D12): a bearer without it is not
// ours and is ignored by the gateway.
const KeyPrefix = "sk-l4a-"

// secretBytes is the entropy of a key or a session token.
const secretBytes = 32

// encoding writes secrets in lower-case base32 without padding: 52 characters
// for 32 bytes, safe in headers and shells, and easy to check strictly.
var encoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// secretLen is the length of the random part of a key or token.
var secretLen = encoding.EncodedLen(secretBytes)

// Key errors. The gateway maps ErrUnknownKey, ErrRevokedKey and ErrExpiredKey
// to 401, ErrModelNotAllowed to 403 and ErrRateLimited to 429; none of them
// carries the key.
var (
	ErrUnknownKey      = errors.New("credits: unknown API key")
	ErrRevokedKey      = errors.New("credits: API key revoked")
	ErrExpiredKey      = errors.New("credits: API key expired")
	ErrModelNotAllowed = errors.New("credits: model not allowed for this API key")
	ErrRateLimited     = errors.New("credits: API key rate limit exceeded")
)

// IsKey reports whether bearer is in our key format's namespace (it starts
// with KeyPrefix). The gateway ignores other bearers (D12).
func IsKey(bearer string) bool { return strings.HasPrefix(bearer, KeyPrefix) }

// newSecret returns prefix and 32 bytes of crypto/rand in lower-case base32.
func newSecret(prefix string) (string, error) {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("credits: random: %w", err)
	}
	return prefix + encoding.EncodeToString(b[:]), nil
}

// wellFormed reports whether s is prefix followed by exactly the random part
// a secret of ours has.
func wellFormed(s, prefix string) bool {
	body, ok := strings.CutPrefix(s, prefix)
	if !ok || len(body) != secretLen {
		return false
	}
	for i := 0; i < len(body); i++ {
		if c := body[i]; (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// HashSecret is how the store keeps a key or a session token: SHA-256, as 64
// lower-case hex digits. A fast hash is right here: the secrets carry 256
// bits from crypto/rand, so no dictionary or brute force can invert the hash,
// which is what slow password hashes (bcrypt, argon2) defend against; and
// every paid request looks its key up, which a slow hash would make cost
// milliseconds of CPU, a lever for denial of service.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// KeyID returns the public id of the key secret: 0x and the 64 hex digits of
// SHA-256("llm4agents/key-id\x00" ‖ secret). It is 32 bytes, so a receipt
// carries it as its bytes32 keyId (KeyIDBytes32), and it is not the stored
// hash, so publishing it reveals nothing the store uses.
func KeyID(secret string) string {
	h := sha256.Sum256([]byte("llm4agents/key-id\x00" + secret))
	return "0x" + hex.EncodeToString(h[:])
}

// KeyIDBytes32 returns a key id as a receipt's keyId. The zero hash is for
// calls not drawn through a key (D18).
func KeyIDBytes32(id string) (common.Hash, error) {
	if len(id) != 66 || !strings.HasPrefix(id, "0x") {
		return common.Hash{}, errors.New("credits: key id is not 0x and 64 hex digits")
	}
	var h common.Hash
	if _, err := hex.Decode(h[:], []byte(id[2:])); err != nil {
		return common.Hash{}, errors.New("credits: key id is not 0x and 64 hex digits")
	}
	return h, nil
}

// NewKey returns a new API key secret, to be shown once, and its id.
func NewKey() (secret, id string, err error) {
	secret, err = newSecret(KeyPrefix)
	if err != nil {
		return "", "", err
	}
	return secret, KeyID(secret), nil
}

// Keys authenticates API keys against a store.Keys and enforces their model
// scope and rate limit. Create it with NewKeys; it is safe for concurrent
// use.
//
// The rate limit is a token bucket per key in this process's memory, not a
// counter in the store: it guards the upstream and the replica against
// bursts, not money (a key's spend caps are checked atomically by the ledger
// across every replica), and a store write per request would cost more than
// the whole credit path may add (its target is 0.5 ms at p50; see
// docs/BENCHMARKS.md). So with N replicas behind a load balancer a key gets
// up to N times its rate; an operator who needs an exact global rate divides
// it by N.
type Keys struct {
	store store.Keys
	log   *slog.Logger
	// Now is the clock key expiry and rate limits are judged by; NewKeys
	// sets it to time.Now. Set it before the first call.
	Now func() time.Time

	rate limiter // by key id
}

// maxBuckets bounds the rate limiter's memory; past it, full (idle) buckets
// are dropped, which forgets nothing a full bucket would not allow anyway.
const maxBuckets = 100_000

// limiter is a set of token buckets by name; the zero value is ready.
type limiter struct {
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewKeys returns a Keys on st. A nil log discards log output.
func NewKeys(st store.Keys, log *slog.Logger) *Keys {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Keys{store: st, log: log.With("component", "credits"), Now: time.Now}
}

// Authenticate returns the key whose secret is bearer. A malformed or
// unknown key is ErrUnknownKey, a revoked one ErrRevokedKey, an expired one
// ErrExpiredKey; store failures come wrapped, and never with the secret.
func (k *Keys) Authenticate(ctx context.Context, bearer string) (store.APIKey, error) {
	if !wellFormed(bearer, KeyPrefix) {
		return store.APIKey{}, ErrUnknownKey
	}
	hash := HashSecret(bearer)
	key, err := k.store.KeyByHash(ctx, hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.APIKey{}, ErrUnknownKey
	case err != nil:
		return store.APIKey{}, fmt.Errorf("credits: look up API key: %w", err)
	}
	// The store found the row by hash; compare again in constant time, so
	// the answer never depends on a comparison that stops early.
	if subtle.ConstantTimeCompare([]byte(key.Hash), []byte(hash)) != 1 {
		return store.APIKey{}, ErrUnknownKey
	}
	switch {
	case key.Revoked():
		return store.APIKey{}, fmt.Errorf("%w: key %s", ErrRevokedKey, key.ID)
	case !key.ExpiresAt.IsZero() && !k.Now().Before(key.ExpiresAt):
		return store.APIKey{}, fmt.Errorf("%w: key %s", ErrExpiredKey, key.ID)
	}
	return key, nil
}

// Authorize checks that key may call model now: ErrModelNotAllowed outside
// its scope, ErrRateLimited past its rate. A refused model takes no token.
func (k *Keys) Authorize(key store.APIKey, model string) error {
	if !key.AllowsModel(model) {
		return fmt.Errorf("%w: key %s", ErrModelNotAllowed, key.ID)
	}
	if key.RatePerMinute > 0 && !k.rate.take(key.ID, key.RatePerMinute, k.Now()) {
		return fmt.Errorf("%w: key %s, %d per minute", ErrRateLimited, key.ID, key.RatePerMinute)
	}
	return nil
}

// take takes one token, at now, from id's bucket, which holds up to
// perMinute tokens and refills at perMinute per minute.
func (l *limiter) take(id string, perMinute int, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	capacity := float64(perMinute)
	b := l.buckets[id]
	if b == nil {
		if l.buckets == nil {
			l.buckets = map[string]*bucket{}
		}
		if len(l.buckets) >= maxBuckets {
			l.dropFull(now)
		}
		b = &bucket{tokens: capacity, last: now}
		l.buckets[id] = b
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(capacity, b.tokens+d.Minutes()*capacity)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// dropFull forgets buckets idle for a minute or more, which are full again
// whatever their rate. l.mu is held.
func (l *limiter) dropFull(now time.Time) {
	for id, b := range l.buckets {
		if now.Sub(b.last) >= time.Minute {
			delete(l.buckets, id)
		}
	}
}
