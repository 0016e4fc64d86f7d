package upto

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math/big"
	"time"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// SignOptions adjust CreatePayload. The zero value is what the official client
// does (npm @x402/evm 2.27): validAfter 0, deadline now + maxTimeoutSeconds, a
// random 256-bit nonce. (Older official clients dated validAfter 600 s back;
// both are accepted by every facilitator, since neither lies in the future.)
type SignOptions struct {
	Now   func() time.Time
	Nonce *big.Int // fixed nonce for tests and vectors
}

// CreatePayload builds and signs the Permit2 upto authorization that pays up to
// req.Amount. s is the same signer the exact scheme uses: it signs EIP-712
// digests. The permit's spender is the upto proxy, its witness pays req.PayTo
// and names req.Extra's facilitatorAddress as the one facilitator allowed to
// settle; without that address there is nothing safe to sign.
func CreatePayload(ctx context.Context, s exact.Signer, req x402.PaymentRequirements, opts SignOptions) (*Payload, error) {
	if req.Scheme != Scheme {
		return nil, fmt.Errorf("scheme %q is not %q", req.Scheme, Scheme)
	}
	extra, err := ParseExtra(req.Extra)
	if err != nil {
		return nil, err
	}
	chainID, err := exact.ChainID(req.Network)
	if err != nil {
		return nil, err
	}
	asset, err := exact.ParseAddress(req.Asset)
	if err != nil {
		return nil, fmt.Errorf("asset: %w", err)
	}
	payTo, err := exact.ParseAddress(req.PayTo)
	if err != nil {
		return nil, fmt.Errorf("payTo: %w", err)
	}
	amount, err := exact.ParseUint256(req.Amount)
	if err != nil {
		return nil, fmt.Errorf("amount: %w", err)
	}
	// A permit is spendable (up to its amount) by its facilitator until the
	// deadline, so a server asking for more than a day is refused rather than
	// trusted.
	if req.MaxTimeoutSeconds <= 0 || req.MaxTimeoutSeconds > exact.MaxSignedTimeout {
		return nil, fmt.Errorf("maxTimeoutSeconds %d is outside (0, %d]: refusing to sign a permit that long-lived", req.MaxTimeoutSeconds, exact.MaxSignedTimeout)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	t := now().Unix()
	auth := Authorization{
		From:      s.Address(),
		Permitted: TokenPermissions{Token: asset, Amount: amount},
		Spender:   ProxyAddress,
		Deadline:  big.NewInt(t + req.MaxTimeoutSeconds),
		Witness:   Witness{To: payTo, Facilitator: extra.FacilitatorAddress, ValidAfter: new(big.Int)},
	}
	if opts.Nonce != nil {
		if opts.Nonce.Sign() < 0 || opts.Nonce.BitLen() > 256 {
			return nil, fmt.Errorf("nonce is not a uint256")
		}
		auth.Nonce = new(big.Int).Set(opts.Nonce)
	} else {
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("random nonce: %w", err)
		}
		auth.Nonce = new(big.Int).SetBytes(b[:])
	}
	sig, err := s.SignDigest(ctx, Digest(chainID, &auth))
	if err != nil {
		return nil, err
	}
	return &Payload{Authorization: auth, Signature: sig}, nil
}

// NewPaymentPayload pays accepts[i] of a PaymentRequired: it signs a permit and
// wraps it in a PaymentPayload that echoes the chosen requirement and the
// resource verbatim.
func NewPaymentPayload(ctx context.Context, s exact.Signer, pr *x402.PaymentRequired, i int, opts SignOptions) (*x402.PaymentPayload, error) {
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
