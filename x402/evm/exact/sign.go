package exact

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/x402"
)

// Signer signs EIP-712 digests for a payer address. It returns the 65-byte
// r ‖ s ‖ v form with v in {27, 28}, as wallets and viem do.
type Signer interface {
	Address() common.Address
	SignDigest(ctx context.Context, digest common.Hash) ([]byte, error)
}

// KeySigner is a Signer backed by an in-memory private key.
type KeySigner struct {
	key  *ecdsa.PrivateKey
	addr common.Address
}

// NewKeySigner returns a Signer for key.
func NewKeySigner(key *ecdsa.PrivateKey) *KeySigner {
	return &KeySigner{key: key, addr: crypto.PubkeyToAddress(key.PublicKey)}
}

// Address returns the signer's address.
func (s *KeySigner) Address() common.Address { return s.addr }

// SignDigest signs digest deterministically (RFC 6979, low s).
func (s *KeySigner) SignDigest(_ context.Context, digest common.Hash) ([]byte, error) {
	sig, err := crypto.Sign(digest[:], s.key)
	if err != nil {
		return nil, fmt.Errorf("sign digest: %w", err)
	}
	sig[64] += 27
	return sig, nil
}

// String never shows the key.
func (s *KeySigner) String() string { return "KeySigner(" + s.addr.Hex() + ")" }

// MaxSignedTimeout bounds maxTimeoutSeconds on the buyer side: an authorization is
// spendable by whoever holds it until validBefore, so a server asking for more than
// a day is refused rather than trusted.
const MaxSignedTimeout = 24 * 60 * 60

// SignOptions adjust CreatePayload. The zero value is what the official client
// does: validAfter 0, validBefore now + maxTimeoutSeconds, a random nonce.
type SignOptions struct {
	Now   func() time.Time
	Nonce *common.Hash // fixed nonce for tests and vectors
}

// CreatePayload builds and signs the EIP-3009 authorization that pays req.
func CreatePayload(ctx context.Context, s Signer, req x402.PaymentRequirements, opts SignOptions) (*Payload, error) {
	if req.Scheme != Scheme {
		return nil, fmt.Errorf("scheme %q is not %q", req.Scheme, Scheme)
	}
	extra, err := ParseExtra(req.Extra)
	if err != nil {
		return nil, err
	}
	chainID, err := ChainID(req.Network)
	if err != nil {
		return nil, err
	}
	asset, err := ParseAddress(req.Asset)
	if err != nil {
		return nil, fmt.Errorf("asset: %w", err)
	}
	payTo, err := ParseAddress(req.PayTo)
	if err != nil {
		return nil, fmt.Errorf("payTo: %w", err)
	}
	value, err := ParseUint256(req.Amount)
	if err != nil {
		return nil, fmt.Errorf("amount: %w", err)
	}
	if req.MaxTimeoutSeconds <= 0 || req.MaxTimeoutSeconds > MaxSignedTimeout {
		return nil, fmt.Errorf("maxTimeoutSeconds %d is outside (0, %d]: refusing to sign an authorization that long-lived", req.MaxTimeoutSeconds, MaxSignedTimeout)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	auth := Authorization{
		From:        s.Address(),
		To:          payTo,
		Value:       value,
		ValidAfter:  new(big.Int),
		ValidBefore: big.NewInt(now().Unix() + req.MaxTimeoutSeconds),
	}
	if opts.Nonce != nil {
		auth.Nonce = *opts.Nonce
	} else if _, err := rand.Read(auth.Nonce[:]); err != nil {
		return nil, fmt.Errorf("random nonce: %w", err)
	}
	d := Domain{Name: extra.Name, Version: extra.Version, ChainID: chainID, VerifyingContract: asset}
	sig, err := s.SignDigest(ctx, Digest(d, &auth))
	if err != nil {
		return nil, err
	}
	return &Payload{Authorization: auth, Signature: sig}, nil
}

// NewPaymentPayload pays accepts[i] of a PaymentRequired: it signs an authorization
// and wraps it in a PaymentPayload that echoes the chosen requirement and the
// resource verbatim.
func NewPaymentPayload(ctx context.Context, s Signer, pr *x402.PaymentRequired, i int, opts SignOptions) (*x402.PaymentPayload, error) {
	if i < 0 || i >= len(pr.Accepts) {
		return nil, fmt.Errorf("no accepts entry %d", i)
	}
	p, err := CreatePayload(ctx, s, pr.Accepts[i], opts)
	if err != nil {
		return nil, err
	}
	accepted, err := pr.RawAccepted(i)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(p.JSON())
	if err != nil {
		return nil, fmt.Errorf("encode payload: %w", err)
	}
	out := &x402.PaymentPayload{X402Version: x402.Version, Resource: pr.Resource, Accepted: accepted, Payload: body}
	if len(pr.Extensions) > 0 {
		// Echo the server's extensions unchanged; a client may only add to them.
		if out.Extensions, err = x402.Marshal(pr.Extensions); err != nil {
			return nil, fmt.Errorf("encode extensions: %w", err)
		}
	}
	return out, nil
}
