package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// API keys and wallet sign-in (D12): the records behind
// `Authorization: Bearer sk-l4a-...` and behind the sign-in that lets an
// account owner manage its keys. The store keeps only hashes of secrets: the
// key itself, the session token. Nonces are not secret (they are part of the
// message the wallet signs): a backend may store them as issued.

// MaxKeyModels bounds the models a key may be scoped to.
const MaxKeyModels = 64

// MaxKeyName bounds a key's name, in bytes.
const MaxKeyName = 64

// MaxKeysPerOwner bounds the live (not revoked) keys one owner may have,
// and MaxStoredKeysPerOwner all of them, revoked ones included (they stay,
// for the receipts that name them): CreateKey refuses the next one past
// either with ErrConflict. An owner who rotates keys revokes the old one
// and creates the next, many times over, before the second bound.
const (
	MaxKeysPerOwner       = 100
	MaxStoredKeysPerOwner = 1000
)

// MaxAuthTTL bounds the lifetime of a nonce or a session.
const MaxAuthTTL = 24 * time.Hour

// APIKey is an API key's record. The secret is never stored: Hash is the
// SHA-256 of the whole key (prefix included) as 64 lower-case hex digits.
type APIKey struct {
	// ID is the key's public id (a valid id, see ValidID): it names the key
	// in the owner's list, in ledger holds (KeyLimits.ID) and in receipts.
	ID    string
	Hash  string
	Owner string // a valid owner: the account the key draws from
	Name  string // up to MaxKeyName bytes of printable text, chosen by the owner
	// TotalCap bounds what the key may spend over its life, PeriodCap what
	// it may spend per Period; NoCap for none (see KeyLimits).
	TotalCap  int64
	PeriodCap int64
	Period    time.Duration // 0 when PeriodCap is NoCap
	// ExpiresAt is when the key stops working; zero for never.
	ExpiresAt time.Time
	// Models lists the models the key may call, sorted and unique; empty
	// means every model.
	Models []string
	// RatePerMinute bounds the requests per minute, TokensPerMinute the
	// tokens (a call's prompt plus its output bound); 0 for no bound. Both
	// hold across replicas (Rates).
	RatePerMinute   int
	TokensPerMinute int64
	CreatedAt       time.Time // set by the store, to the millisecond
	// RevokedAt is when the owner revoked the key; zero while it is not.
	RevokedAt time.Time
}

// Revoked reports whether the key was revoked.
func (k APIKey) Revoked() bool { return !k.RevokedAt.IsZero() }

// Limits returns the caps the ledger checks for a hold through k.
func (k APIKey) Limits() KeyLimits {
	return KeyLimits{ID: k.ID, TotalCap: k.TotalCap, PeriodCap: k.PeriodCap, Period: k.Period}
}

// AllowsModel reports whether k may call model.
func (k APIKey) AllowsModel(model string) bool {
	if len(k.Models) == 0 {
		return true
	}
	_, found := slices.BinarySearch(k.Models, model)
	return found
}

// Validate checks a key record before it is stored, for every backend.
// CreatedAt and RevokedAt are not read.
func (k APIKey) Validate() error {
	switch {
	case !ValidID(k.ID):
		return errors.New("invalid key id")
	case !ValidHash(k.Hash):
		return errors.New("key hash is not 64 lower-case hex digits")
	case !ValidOwner(k.Owner):
		return errors.New("invalid owner")
	case len(k.Name) > MaxKeyName || !printable(k.Name):
		return fmt.Errorf("key name is not up to %d bytes of printable ASCII", MaxKeyName)
	case k.TotalCap < 0 || k.PeriodCap < 0:
		return errors.New("negative key cap")
	case k.PeriodCap == NoCap && k.Period != 0:
		return errors.New("key period without a period cap")
	case k.RatePerMinute < 0 || k.RatePerMinute > MaxRateLimit || k.TokensPerMinute < 0 || k.TokensPerMinute > MaxRateLimit:
		return fmt.Errorf("a rate limit is outside 0..%d", int64(MaxRateLimit))
	case len(k.Models) > MaxKeyModels:
		return fmt.Errorf("more than %d models", MaxKeyModels)
	case !slices.IsSorted(k.Models) || len(slices.Compact(slices.Clone(k.Models))) != len(k.Models):
		return errors.New("models are not sorted and unique")
	}
	for _, m := range k.Models {
		if !ValidID(m) {
			return errors.New("invalid model name")
		}
	}
	if k.PeriodCap != NoCap {
		return ValidatePeriod(k.Period)
	}
	return nil
}

// ValidateUpdate checks the arguments of Keys.UpdateKey: k is a valid key
// (see Validate) whose ID and Owner are id and owner.
func ValidateUpdate(owner, id string, k APIKey) error {
	if k.ID != id || k.Owner != owner {
		return errors.New("the key's id or owner is not the one updated")
	}
	return k.Validate()
}

// SameLimits reports whether a and b have the same mutable fields, as the
// store keeps them (ExpiresAt to the millisecond): what UpdateKey compares.
func SameLimits(a, b APIKey) bool {
	return a.Name == b.Name && a.TotalCap == b.TotalCap && a.PeriodCap == b.PeriodCap &&
		a.Period.Milliseconds() == b.Period.Milliseconds() && a.ExpiresAt.UnixMilli() == b.ExpiresAt.UnixMilli() &&
		slices.Equal(a.Models, b.Models) && a.RatePerMinute == b.RatePerMinute && a.TokensPerMinute == b.TokensPerMinute
}

// Session is a signed-in owner's session: what lets it manage its keys. The
// token is never stored: Hash is its SHA-256 as 64 lower-case hex digits.
type Session struct {
	Hash      string
	Owner     string
	CreatedAt time.Time
	ExpiresAt time.Time // by the store's clock
}

// Keys stores API keys, and the sign-in nonces and sessions (SignIns)
// that let an account owner manage them.
//
// A key's ExpiresAt is the owner's choice and is judged by the caller.
type Keys interface {
	SignIns

	// CreateKey stores k (see APIKey.Validate) with CreatedAt set and
	// RevokedAt zero, and returns it as stored. ErrConflict if a key with
	// k.ID or k.Hash exists, or the owner has MaxKeysPerOwner live keys or
	// MaxStoredKeysPerOwner keys in all.
	CreateKey(ctx context.Context, k APIKey) (APIKey, error)
	// KeysByOwner returns owner's keys, revoked ones included, oldest first.
	KeysByOwner(ctx context.Context, owner string) ([]APIKey, error)
	// KeyByHash returns the key whose Hash is hash, revoked or expired ones
	// included, or ErrNotFound.
	KeyByHash(ctx context.Context, hash string) (APIKey, error)
	// RevokeKey revokes owner's key id and returns it. Revoking a revoked
	// key returns it unchanged (its first RevokedAt). ErrNotFound if owner
	// has no key id, whoever else may have one.
	RevokeKey(ctx context.Context, owner, id string) (APIKey, error)
	// UpdateKey replaces the mutable fields of owner's key id (Name, the
	// caps and Period, ExpiresAt, Models, RatePerMinute, TokensPerMinute)
	// with to's, if they are still from's (the key as the caller read it),
	// and returns the key as stored: a compare-and-set, so that two changes
	// racing for one key cannot lose one of them. to must pass
	// ValidateUpdate; its Hash, CreatedAt and RevokedAt are not stored.
	// ErrNotFound if owner has no key id, whoever else may have one;
	// ErrConflict if it is revoked (a revoked key stays as it was revoked)
	// or its mutable fields are no longer from's (read it again).
	UpdateKey(ctx context.Context, owner, id string, from, to APIKey) (APIKey, error)
}

// SignIns stores wallet sign-in (EIP-4361) nonces and the sessions a
// sign-in grants: what a gateway needs to let an account owner sign in,
// whether or not it keeps API keys.
//
// Expiry of nonces and sessions is judged by the store's clock.
type SignIns interface {
	// PutNonce stores a sign-in nonce for ttl (0 < ttl <= MaxAuthTTL).
	// ErrConflict if it exists.
	PutNonce(ctx context.Context, nonce string, ttl time.Duration) error
	// ConsumeNonce deletes nonce if it exists and has not expired, in one
	// atomic step: of any number of concurrent calls at most one succeeds.
	// ErrNotFound otherwise.
	ConsumeNonce(ctx context.Context, nonce string) error

	// CreateSession stores a session for owner, valid for ttl
	// (0 < ttl <= MaxAuthTTL), and returns it. ErrConflict if hash exists.
	CreateSession(ctx context.Context, hash, owner string, ttl time.Duration) (Session, error)
	// Session returns the unexpired session with hash, or ErrNotFound.
	Session(ctx context.Context, hash string) (Session, error)
	// DeleteSession deletes the session with hash, if any: sign-out.
	DeleteSession(ctx context.Context, hash string) error

	// SweepAuth deletes up to limit (> 0) expired nonces and up to limit
	// expired sessions and returns how many it deleted. Call it
	// periodically, and again at once while it returns limit or more.
	SweepAuth(ctx context.Context, limit int) (int, error)
}

// ValidNonce reports whether s is a valid sign-in nonce: 8 to 128 ASCII
// letters and digits (EIP-4361).
func ValidNonce(s string) bool {
	return len(s) >= 8 && validChars(s, func(c byte) bool {
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	})
}

// ValidateNonce checks the arguments of SignIns.PutNonce.
func ValidateNonce(nonce string, ttl time.Duration) error {
	if !ValidNonce(nonce) {
		return errors.New("invalid nonce")
	}
	return ValidateAuthTTL(ttl)
}

// ValidateSession checks the arguments of SignIns.CreateSession.
func ValidateSession(hash, owner string, ttl time.Duration) error {
	switch {
	case !ValidHash(hash):
		return errors.New("invalid session hash")
	case !ValidOwner(owner):
		return errors.New("invalid owner")
	}
	return ValidateAuthTTL(ttl)
}

// ValidateAuthTTL checks the lifetime of a nonce or a session.
func ValidateAuthTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > MaxAuthTTL {
		return fmt.Errorf("ttl %v is outside (0, %v]", ttl, MaxAuthTTL)
	}
	return nil
}

// ValidHash reports whether s is a secret's hash as the store keeps it: 64
// lower-case hex digits.
func ValidHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
