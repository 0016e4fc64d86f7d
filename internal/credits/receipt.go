package credits

import (
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// Signer signs the gateway's receipts (D18) with the
// receipt key, in the domain it publishes at receipt.WellKnownPath. The digest
// and wire forms are x402/receipt's, so what Sign returns is exactly what
// receipt.Verify accepts. It is safe for concurrent use.
type Signer struct {
	key    *ecdsa.PrivateKey
	addr   common.Address
	domain receipt.Domain
}

// NewSigner returns a Signer for key on chainID (D18: the primary payment
// network's by default). The key is kept, never logged or returned.
func NewSigner(key *ecdsa.PrivateKey, chainID *big.Int) (*Signer, error) {
	if key == nil || key.Curve != crypto.S256() {
		return nil, errors.New("credits: receipt key is not a secp256k1 private key")
	}
	if !canSign(key) {
		return nil, errors.New("credits: receipt key cannot sign")
	}
	if chainID == nil || chainID.Sign() <= 0 || chainID.BitLen() > 256 {
		return nil, errors.New("credits: receipt chain id is not a positive uint256")
	}
	return &Signer{key: key, addr: crypto.PubkeyToAddress(key.PublicKey),
		domain: receipt.NewDomain(new(big.Int).Set(chainID))}, nil
}

// canSign reports whether key signs a probe digest with a signature that
// recovers its own public key, so that a broken key fails at start, not on
// the first paid call. go-ethereum panics on a key without its scalar; that
// is a "no" here.
func canSign(key *ecdsa.PrivateKey) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	probe := crypto.Keccak256([]byte("llm4agents receipt key probe"))
	sig, err := crypto.Sign(probe, key)
	if err != nil {
		return false
	}
	pub, err := crypto.SigToPub(probe, sig)
	return err == nil && crypto.PubkeyToAddress(*pub) == crypto.PubkeyToAddress(key.PublicKey)
}

// Address returns the signer's address, as published.
func (s *Signer) Address() common.Address { return s.addr }

// Domain returns the EIP-712 domain receipts are signed in.
func (s *Signer) Domain() receipt.Domain {
	d := s.domain
	d.ChainID = new(big.Int).Set(d.ChainID)
	return d
}

// WellKnown returns the document the gateway serves at
// receipt.WellKnownPath.
func (s *Signer) WellKnown() receipt.WellKnown {
	return receipt.WellKnown{Receipts: receipt.WellKnownReceipts{Signer: s.addr, Domain: s.Domain()}}
}

// WellKnownHandler serves doc (a Signer's WellKnown, with the receipt
// log's member when the gateway keeps one) as JSON, for GET (and HEAD) at
// receipt.WellKnownPath. The document is public and the same for every
// buyer, so it may be cached for a few minutes; a rotated key shows within
// that time, and client.ReceiptVerifier refetches once on a mismatch.
func WellKnownHandler(doc receipt.WellKnown) http.Handler {
	body, err := json.Marshal(doc)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeJSON(w, http.StatusMethodNotAllowed, chat.ErrorBody{Error: chat.ErrorDetail{Message: "method not allowed",
				Type: "invalid_request_error", Code: "method_not_allowed"}})
			return
		}
		if err != nil { // cannot happen for a valid Signer
			writeJSON(w, http.StatusInternalServerError, chat.ErrorBody{Error: chat.ErrorDetail{Message: "internal error",
				Type: "server_error", Code: "internal_error"}})
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=300")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(body) // #nosec G705 -- a fixed JSON document sent as application/json with nosniff
	})
}

// SignedReceipt is a receipt and the signer's 65-byte signature over it (v is
// 27 or 28).
type SignedReceipt struct {
	Receipt   receipt.Receipt
	Signature []byte
}

// Header returns the value of receipt.Header for a non-streaming
// answer.
func (r SignedReceipt) Header() (string, error) {
	return receipt.EncodeHeader(&r.Receipt, r.Signature)
}

// JSON returns the envelope {receipt, signature}, as a stream's final usage
// chunk carries it in x_llm4agents.receipt and GET /v1/receipts/{id} serves
// it.
func (r SignedReceipt) JSON() ([]byte, error) {
	return receipt.EncodeEnvelope(&r.Receipt, r.Signature)
}

// Sign signs r. It fails, without signing, on a receipt whose integers are
// missing or out of range.
func (s *Signer) Sign(r receipt.Receipt) (SignedReceipt, error) {
	digest, err := receipt.Digest(s.domain, &r)
	if err != nil {
		return SignedReceipt{}, fmt.Errorf("credits: receipt: %w", err)
	}
	sig, err := crypto.Sign(digest[:], s.key)
	if err != nil {
		return SignedReceipt{}, errors.New("credits: sign receipt failed")
	}
	sig[64] += 27
	return SignedReceipt{Receipt: r, Signature: sig}, nil
}
