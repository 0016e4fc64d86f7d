package credits

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/url"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Sign-in timing: a message is recent (issued within 5 minutes) and its
// nonce is single-use and short-lived.
const (
	// NonceTTL is how long an issued nonce may be used.
	NonceTTL = 5 * time.Minute
	// MaxMessageAge bounds how long ago a message may have been issued.
	MaxMessageAge = 5 * time.Minute
	// MaxClockSkew is how far in the future a message's issued-at may be.
	MaxClockSkew = 30 * time.Second
	// SessionTTL is how long a session lasts.
	SessionTTL = 15 * time.Minute
	// contractCheckTimeout bounds the call that asks a contract wallet
	// whether it signed: a slow node must not hold a sign-in open for long.
	contractCheckTimeout = 5 * time.Second
)

// maxSignatureBytes bounds a sign-in signature. An externally owned
// account's is 65 bytes; a contract wallet's is whatever the wallet reads,
// such as several owners' signatures, and 2 KiB holds 31 of those.
const maxSignatureBytes = 2048

// SessionPrefix starts every session token, so that it is never taken for an
// API key or sent where one is expected.
const SessionPrefix = "sess-l4a-"

// Reason says why a sign-in was refused.
type Reason string

// Reasons, append-only.
const (
	ReasonMalformed Reason = "malformed"     // not an EIP-4361 message, or a bad signature encoding
	ReasonOrigin    Reason = "wrong_origin"  // domain, scheme or URI is not this gateway's
	ReasonChain     Reason = "wrong_chain"   // chain id is not the configured one
	ReasonStale     Reason = "stale"         // issued too long ago, or in the future
	ReasonExpired   Reason = "expired"       // past its expiration time, or before not-before
	ReasonNonce     Reason = "invalid_nonce" // not issued by us, used already, or expired
	ReasonSignature Reason = "bad_signature" // not signed by the message's address
)

// SignInError is a refused sign-in. Its text is safe to show the client and
// to log: it never quotes the message or the signature.
type SignInError struct {
	Reason Reason
	Detail string
}

func (e *SignInError) Error() string {
	return "credits: sign-in refused: " + string(e.Reason) + ": " + e.Detail
}

// ErrNoSession: the session token is malformed, unknown or expired.
var ErrNoSession = errors.New("credits: no valid session")

// ContractSigs asks the chain whether a contract wallet accepts a signature
// of hash (EIP-1271). A wallet that refuses, reverts or has no code answers
// false with a nil error; an error means the chain could not be asked.
// EIP1271 implements it.
type ContractSigs interface {
	IsValidSignature(ctx context.Context, wallet common.Address, hash common.Hash, sig []byte) (bool, error)
}

// Auth issues sign-in nonces, verifies EIP-4361 sign-ins and manages the
// sessions they grant. Create it with NewAuth.
type Auth struct {
	store   store.SignIns
	log     *slog.Logger
	scheme  string // of the configured origin
	host    string // host[:port] of the configured origin
	chainID uint64
	// Now is the clock messages are judged by; NewAuth sets it to
	// time.Now. Set it before the first call.
	Now func() time.Time
	// Contracts, if set, is asked about a signature that is not the
	// message's address's own: a contract wallet at that address signs in
	// if it accepts the signature. Nil, as NewAuth leaves it, signs in
	// externally owned accounts only. Set it before the first call.
	Contracts ContractSigs
}

// NewAuth returns an Auth on st for the public origin (scheme://host[:port],
// what buyers reach the gateway at) and the chain id sign-in messages must
// name. st need not keep API keys: a gateway that sells no credits signs
// payers in to read their receipts. A nil log discards log output.
func NewAuth(st store.SignIns, origin string, chainID uint64, log *slog.Logger) (*Auth, error) {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || !validAuthority(u.Host) ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("credits: origin %q is not http(s)://host[:port]", origin)
	}
	if chainID == 0 {
		return nil, errors.New("credits: chain id is zero")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Auth{store: st, log: log.With("component", "credits"), scheme: u.Scheme, host: strings.ToLower(u.Host), chainID: chainID, Now: time.Now}, nil
}

// Origin returns the configured origin, scheme://host[:port].
func (a *Auth) Origin() string { return a.scheme + "://" + a.host }

// IssueNonce stores and returns a new single-use nonce, good for NonceTTL.
func (a *Auth) IssueNonce(ctx context.Context) (string, time.Time, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", time.Time{}, fmt.Errorf("credits: random: %w", err)
	}
	nonce := encoding.EncodeToString(b[:])
	if err := a.store.PutNonce(ctx, nonce, NonceTTL); err != nil {
		return "", time.Time{}, fmt.Errorf("credits: store nonce: %w", err)
	}
	return nonce, a.Now().Add(NonceTTL), nil
}

// SignIn verifies a signed EIP-4361 message and, if it holds, consumes its
// nonce and opens a session for its address. It returns the session token,
// shown once, and the session. A refusal is a *SignInError.
//
// Checks, in order: the message parses strictly (ParseMessage); its domain,
// scheme (if given) and URI's origin are the configured origin; its chain id
// is the configured one; it was issued at most MaxMessageAge ago and at most
// MaxClockSkew ahead; it has not expired and its not-before has come; the
// signature is an EIP-191 personal_sign of the text by the message's address
// or, with Contracts set, one that the contract wallet at that address
// accepts for the text's EIP-191 hash (EIP-1271, asked within
// contractCheckTimeout; a chain that cannot be asked is an error, not a
// refusal); and last, the nonce is one we issued, unexpired, consumed now
// (so a failed attempt does not burn it, and of two sign-ins with one nonce
// at most one succeeds).
func (a *Auth) SignIn(ctx context.Context, text string, sig []byte) (string, store.Session, error) {
	refuse := func(r Reason, detail string) (string, store.Session, error) {
		return "", store.Session{}, &SignInError{Reason: r, Detail: detail}
	}
	m, err := ParseMessage(text)
	if err != nil {
		var detail string
		if _, d, ok := strings.Cut(err.Error(), ErrBadMessage.Error()+": "); ok {
			detail = d
		}
		return refuse(ReasonMalformed, detail)
	}
	if !strings.EqualFold(m.Domain, a.host) || (m.Scheme != "" && m.Scheme != a.scheme) {
		return refuse(ReasonOrigin, "the domain is not "+a.host)
	}
	if u, err := url.Parse(m.URI); err != nil || u.Scheme != a.scheme || !strings.EqualFold(u.Host, a.host) || u.User != nil {
		return refuse(ReasonOrigin, "the URI is not under "+a.Origin())
	}
	if m.ChainID != a.chainID {
		return refuse(ReasonChain, fmt.Sprintf("chain id %d, want %d", m.ChainID, a.chainID))
	}
	now := a.Now()
	switch {
	case now.Sub(m.IssuedAt) > MaxMessageAge:
		return refuse(ReasonStale, fmt.Sprintf("issued more than %v ago", MaxMessageAge))
	case m.IssuedAt.Sub(now) > MaxClockSkew:
		return refuse(ReasonStale, "issued in the future")
	case !m.ExpirationTime.IsZero() && !now.Before(m.ExpirationTime):
		return refuse(ReasonExpired, "past its expiration time")
	case !m.NotBefore.IsZero() && now.Before(m.NotBefore):
		return refuse(ReasonExpired, "before its not-before time")
	}
	if len(sig) > maxSignatureBytes {
		return refuse(ReasonMalformed, fmt.Sprintf("signature is over %d bytes", maxSignatureBytes))
	}
	signer, err := recoverPersonal(text, sig)
	switch {
	case err == nil && signer == m.Address:
		// The externally owned account signed: no need to ask the chain.
	case a.Contracts == nil && err != nil:
		return refuse(ReasonMalformed, err.Error())
	case a.Contracts == nil:
		return refuse(ReasonSignature, "not signed by the message's address")
	default:
		// Any signature may be a contract wallet's, whatever it recovers
		// to: only the wallet knows what it accepts.
		ok, err := a.contractSigned(ctx, m.Address, text, sig)
		if err != nil {
			return "", store.Session{}, err
		}
		if !ok {
			return refuse(ReasonSignature, "not signed by the message's address, nor accepted by a contract wallet there")
		}
	}
	switch err := a.store.ConsumeNonce(ctx, m.Nonce); {
	case errors.Is(err, store.ErrNotFound):
		return refuse(ReasonNonce, "the nonce was not issued here, was used, or expired")
	case err != nil:
		return "", store.Session{}, fmt.Errorf("credits: consume nonce: %w", err)
	}
	token, err := newSecret(SessionPrefix)
	if err != nil {
		return "", store.Session{}, err
	}
	owner := strings.ToLower(m.Address.Hex())
	s, err := a.store.CreateSession(ctx, HashSecret(token), owner, SessionTTL)
	if err != nil {
		return "", store.Session{}, fmt.Errorf("credits: create session: %w", err)
	}
	a.log.InfoContext(ctx, "signed in", "account", owner)
	return token, s, nil
}

// Session returns the session of token, or ErrNoSession.
func (a *Auth) Session(ctx context.Context, token string) (store.Session, error) {
	if !wellFormed(token, SessionPrefix) {
		return store.Session{}, ErrNoSession
	}
	s, err := a.store.Session(ctx, HashSecret(token))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.Session{}, ErrNoSession
	case err != nil:
		return store.Session{}, fmt.Errorf("credits: look up session: %w", err)
	}
	return s, nil
}

// SignOut ends the session of token, if any.
func (a *Auth) SignOut(ctx context.Context, token string) error {
	if !wellFormed(token, SessionPrefix) {
		return nil
	}
	if err := a.store.DeleteSession(ctx, HashSecret(token)); err != nil {
		return fmt.Errorf("credits: delete session: %w", err)
	}
	return nil
}

// contractSigned reports whether the contract wallet at wallet accepts sig
// for text's EIP-191 hash, the digest a wallet's personal_sign shows it.
func (a *Auth) contractSigned(ctx context.Context, wallet common.Address, text string, sig []byte) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, contractCheckTimeout)
	defer cancel()
	ok, err := a.Contracts.IsValidSignature(ctx, wallet, common.BytesToHash(accounts.TextHash([]byte(text))), sig)
	if err != nil {
		return false, fmt.Errorf("credits: ask wallet %s for EIP-1271: %w", wallet.Hex(), err)
	}
	return ok, nil
}

// recoverPersonal returns the address whose EIP-191 personal_sign of text
// is sig: 65 bytes r ‖ s ‖ v, v in {0, 1, 27, 28}, s in the lower half.
func recoverPersonal(text string, sig []byte) (common.Address, error) {
	if len(sig) != crypto.SignatureLength {
		return common.Address{}, fmt.Errorf("signature is %d bytes, want 65", len(sig))
	}
	norm := bytes.Clone(sig)
	if norm[64] >= 27 {
		norm[64] -= 27
	}
	r, s := new(big.Int).SetBytes(norm[:32]), new(big.Int).SetBytes(norm[32:64])
	if !crypto.ValidateSignatureValues(norm[64], r, s, true) {
		return common.Address{}, errors.New("signature values out of range")
	}
	pub, err := crypto.SigToPub(accounts.TextHash([]byte(text)), norm)
	if err != nil {
		return common.Address{}, errors.New("signature does not recover a key")
	}
	return crypto.PubkeyToAddress(*pub), nil
}
