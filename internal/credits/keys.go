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
// scope and rate limits. Create it with NewKeys; it is safe for concurrent
// use.
//
// The rate limits (requests and tokens per minute) hold across replicas:
// each replica admits a key's calls from slices of its allowance that it
// takes from the store (see rates), so N replicas together allow the
// key's rate, not N times it, and most calls cost no store write.
type Keys struct {
	store store.Keys
	log   *slog.Logger
	// Now is the clock key expiry and rate limits are judged by; NewKeys
	// sets it to time.Now. Set it before the first call.
	Now func() time.Time
	// CacheTTL, when positive, keeps each key Authenticate found for that
	// long, so that a call costs no store read: a revocation or a change
	// made through another replica then binds here within CacheTTL, or as
	// soon as the store tells of it (Forget, fed by the store's WatchKeys
	// where it has one); through this one's account routes, at once
	// (Forget). Zero, the default, reads the key on every call. At most
	// MaxKeyCacheTTL. Set it before the first call.
	CacheTTL time.Duration

	rates   *rates
	cacheMu sync.RWMutex         // every call reads; a lookup writes once per TTL
	cache   map[string]cachedKey // by hash
	// forgets counts Forget and ForgetAll calls, under cacheMu: a key read
	// from the store while one ran may predate the change it was told of,
	// so it is not cached (remember).
	forgets uint64
}

// MaxKeyCacheTTL bounds Keys.CacheTTL: how late a revocation may bind.
const MaxKeyCacheTTL = time.Second

// maxCachedKeys bounds the cache; past it, it starts over.
const maxCachedKeys = 10_000

// cachedKey is a key as the store had it at at.
type cachedKey struct {
	key store.APIKey
	at  time.Time
}

// Forget drops the key whose hash is hash from the cache: it was revoked or
// changed. A lookup of any key in flight meanwhile is not cached.
func (k *Keys) Forget(hash string) {
	k.cacheMu.Lock()
	defer k.cacheMu.Unlock()
	delete(k.cache, hash)
	k.forgets++
}

// ForgetAll drops every key from the cache: changes to keys may have been
// missed (a store's notifications were lost). A lookup in flight meanwhile
// is not cached.
func (k *Keys) ForgetAll() {
	k.cacheMu.Lock()
	defer k.cacheMu.Unlock()
	k.cache = nil
	k.forgets++
}

// forgetCount returns how often keys were forgotten so far, for remember.
func (k *Keys) forgetCount() uint64 {
	k.cacheMu.RLock()
	defer k.cacheMu.RUnlock()
	return k.forgets
}

// cached returns the key of hash if it was read within CacheTTL.
func (k *Keys) cached(hash string) (store.APIKey, bool) {
	ttl := min(k.CacheTTL, MaxKeyCacheTTL)
	if ttl <= 0 {
		return store.APIKey{}, false
	}
	k.cacheMu.RLock()
	defer k.cacheMu.RUnlock()
	c, ok := k.cache[hash]
	if !ok || k.Now().Sub(c.at) >= ttl {
		return store.APIKey{}, false
	}
	return c.key, true
}

// remember caches key, read at at, unless a key was forgotten since the
// read began (forgets was then the count): the change Forget was told of
// may have committed after the read, which would then cache the key as it
// was before the change.
func (k *Keys) remember(key store.APIKey, at time.Time, forgets uint64) {
	if k.CacheTTL <= 0 {
		return
	}
	k.cacheMu.Lock()
	defer k.cacheMu.Unlock()
	if k.forgets != forgets {
		return
	}
	if k.cache == nil || len(k.cache) >= maxCachedKeys {
		k.cache = make(map[string]cachedKey)
	}
	k.cache[key.Hash] = cachedKey{key: key, at: at}
}

// KeyStore is what Keys needs of the store: the keys, and the shared
// counts of their rate limits.
type KeyStore interface {
	store.Keys
	store.Rates
}

// NewKeys returns a Keys on st. A nil log discards log output.
func NewKeys(st KeyStore, log *slog.Logger) *Keys {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Keys{store: st, log: log.With("component", "credits"), Now: time.Now}
	k.rates = newRates(st, func() time.Time { return k.Now() })
	return k
}

// Authenticate returns the key whose secret is bearer. A malformed or
// unknown key is ErrUnknownKey, a revoked one ErrRevokedKey, an expired one
// ErrExpiredKey; store failures come wrapped, and never with the secret.
func (k *Keys) Authenticate(ctx context.Context, bearer string) (store.APIKey, error) {
	if !wellFormed(bearer, KeyPrefix) {
		return store.APIKey{}, ErrUnknownKey
	}
	hash := HashSecret(bearer)
	if key, ok := k.cached(hash); ok {
		return k.usable(key)
	}
	read, forgets := k.Now(), k.forgetCount()
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
	k.remember(key, read, forgets)
	return k.usable(key)
}

// usable returns key unless it is revoked or expired.
func (k *Keys) usable(key store.APIKey) (store.APIKey, error) {
	switch {
	case key.Revoked():
		return store.APIKey{}, fmt.Errorf("%w: key %s", ErrRevokedKey, key.ID)
	case !key.ExpiresAt.IsZero() && !k.Now().Before(key.ExpiresAt):
		return store.APIKey{}, fmt.Errorf("%w: key %s", ErrExpiredKey, key.ID)
	}
	return key, nil
}

// Authorize checks that key may call model: ErrModelNotAllowed outside its
// scope.
func (k *Keys) Authorize(key store.APIKey, model string) error {
	if !key.AllowsModel(model) {
		return fmt.Errorf("%w: key %s", ErrModelNotAllowed, key.ID)
	}
	return nil
}

// TakeRate admits one call of key that may use tokens (its prompt tokens
// plus its output bound, as OpenAI counts a call against a tokens-per-minute
// limit) under the key's rate limits, across every replica. A call past a
// limit is ErrRateLimited wrapping a *store.RateLimitedError (which limit,
// when the minute ends); the store's failures come wrapped. Call it after Authorize: a call refused for its model takes
// nothing.
func (k *Keys) TakeRate(ctx context.Context, key store.APIKey, tokens int64) error {
	return k.rates.take(ctx, key, tokens)
}
