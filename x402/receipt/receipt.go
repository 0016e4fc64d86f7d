package receipt

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Header carries a non-streaming answer's receipt: standard base64 of the JSON
// envelope {"receipt": Receipt, "signature": "0x..."}. A stream
// carries the same envelope, as JSON, in the field x_llm4agents.receipt of its
// final usage chunk (ParseEnvelope).
const Header = "X-Llm4agents-Receipt"

// The receipt domain's fixed fields; chainId comes from the gateway's
// configuration.
const (
	DomainName = "llm4agents"
	// DomainVersion 2 added rail, network, payment, salt and logBy (docs/DESIGN.md D30):
	// a receipt of version 1 does not verify as version 2, and the other way
	// round, so a buyer never reads an old receipt with the new meaning.
	DomainVersion = "2"
)

// Rails: how a call was paid.
const (
	RailCredits = "credits" // drawn from prepaid credits (an API key or the account)
	RailExact   = "exact"   // an x402 exact payment of the quote
	RailUpto    = "upto"    // an x402 upto payment of the tokens used
)

// ModelTopUp is the model a top-up's receipt names: it bought credit, not a
// call. Its rail is the payment's (RailExact), its tokens are zero, its
// amount is the credit bought, its balanceAfter and ledgerSeq are the
// account's balance and the ledger entry right after the credit.
const ModelTopUp = "llm4agents.topup"

// PrimaryType is the EIP-712 primary type of a receipt.
const PrimaryType = "Receipt"

// TypeString is the EIP-712 encoding of the receipt type; signer and verifier
// hash it byte for byte.
const TypeString = "Receipt(bytes32 requestId,address account,bytes32 keyId,string model," +
	"uint256 inputTokens,uint256 outputTokens,uint256 amount,uint256 balanceAfter,uint256 ledgerSeq,uint64 issuedAt," +
	"string rail,string network,bytes32 payment,bytes32 salt,uint64 logBy)"

// receiptDomainTypeString is the EIP-712 encoding of the receipt domain: no
// verifyingContract, since no contract checks receipts.
const receiptDomainTypeString = "EIP712Domain(string name,string version,uint256 chainId)"

var (
	receiptTypeHash       = crypto.Keccak256Hash([]byte(TypeString))
	receiptDomainTypeHash = crypto.Keccak256Hash([]byte(receiptDomainTypeString))
)

// TypedField is one member of an EIP-712 struct type, in the JSON form viem's
// verifyTypedData and go-ethereum's apitypes take.
type TypedField struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Types returns the EIP-712 types of a receipt, EIP712Domain included,
// for signers and verifiers that take typed data rather than a digest. Each
// call returns a fresh map.
func Types() map[string][]TypedField {
	return map[string][]TypedField{
		"EIP712Domain": {
			{Name: "name", Type: "string"},
			{Name: "version", Type: "string"},
			{Name: "chainId", Type: "uint256"},
		},
		PrimaryType: {
			{Name: "requestId", Type: "bytes32"},
			{Name: "account", Type: "address"},
			{Name: "keyId", Type: "bytes32"},
			{Name: "model", Type: "string"},
			{Name: "inputTokens", Type: "uint256"},
			{Name: "outputTokens", Type: "uint256"},
			{Name: "amount", Type: "uint256"},
			{Name: "balanceAfter", Type: "uint256"},
			{Name: "ledgerSeq", Type: "uint256"},
			{Name: "issuedAt", Type: "uint64"},
			{Name: "rail", Type: "string"},
			{Name: "network", Type: "string"},
			{Name: "payment", Type: "bytes32"},
			{Name: "salt", Type: "bytes32"},
			{Name: "logBy", Type: "uint64"},
		},
	}
}

// Domain is the EIP-712 domain receipts are signed in: {name, version,
// chainId}, published at /.well-known/llm4agents.json. On the wire chainId is a
// JSON number.
type Domain struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	ChainID *big.Int `json:"chainId"`
}

// NewDomain returns the receipt domain on chainID.
func NewDomain(chainID *big.Int) Domain {
	return Domain{Name: DomainName, Version: DomainVersion, ChainID: chainID}
}

// Receipt is what the gateway signs for each paid call. Amounts are atomic
// units of the payment asset; KeyID is zero for a wallet-paid call. On the wire
// (MarshalJSON) bytes32 and addresses are 0x-hex, uint256 values are decimal
// strings and issuedAt and logBy (unix seconds) are JSON numbers.
type Receipt struct {
	RequestID    common.Hash
	Account      common.Address
	KeyID        common.Hash
	Model        string
	InputTokens  *big.Int
	OutputTokens *big.Int
	Amount       *big.Int
	BalanceAfter *big.Int
	LedgerSeq    *big.Int
	IssuedAt     uint64
	// Rail is how the call was paid: RailCredits, RailExact or RailUpto.
	Rail string
	// Network is the CAIP-2 network an x402 payment settles on; empty for
	// credits.
	Network string
	// Payment names an x402 payment on its network: the EIP-3009 nonce
	// (exact) or the Permit2 nonce (upto) of the payer's authorization,
	// which the settling transfer's logs carry; it is known when the answer
	// is sent, before a streamed call's settlement is mined. Zero for
	// credits.
	Payment common.Hash
	// Salt is random, new for each receipt: it makes the receipt's digest,
	// which the public log publishes, a commitment that reveals nothing of
	// the receipt to whoever does not hold it (docs/DESIGN.md D30).
	Salt common.Hash
	// LogBy is when (unix seconds) the gateway's receipt log includes this
	// receipt at the latest: its promise, checked by the buyer. Zero when
	// the gateway keeps no log.
	LogBy uint64
}

// receiptJSON is the wire form of a Receipt.
type receiptJSON struct {
	RequestID    string `json:"requestId"`
	Account      string `json:"account"`
	KeyID        string `json:"keyId"`
	Model        string `json:"model"`
	InputTokens  string `json:"inputTokens"`
	OutputTokens string `json:"outputTokens"`
	Amount       string `json:"amount"`
	BalanceAfter string `json:"balanceAfter"`
	LedgerSeq    string `json:"ledgerSeq"`
	IssuedAt     uint64 `json:"issuedAt"`
	Rail         string `json:"rail"`
	Network      string `json:"network"`
	Payment      string `json:"payment"`
	Salt         string `json:"salt"`
	LogBy        uint64 `json:"logBy"`
}

// Receipt errors.
var (
	// ErrMissing: the response carries no receipt header.
	ErrMissing = errors.New("client: response has no " + Header + " header")
	// ErrMalformed: a receipt or its envelope that does not decode strictly.
	ErrMalformed = errors.New("client: malformed receipt")
	// ErrSignature: the signature is malformed, or is not the
	// published signer's over this receipt in this domain.
	ErrSignature = errors.New("client: receipt signature does not verify")
)

// ints returns the receipt's integers in type order, with their names.
func (r *Receipt) ints() [5]struct {
	name string
	v    *big.Int
} {
	return [5]struct {
		name string
		v    *big.Int
	}{
		{"inputTokens", r.InputTokens}, {"outputTokens", r.OutputTokens}, {"amount", r.Amount},
		{"balanceAfter", r.BalanceAfter}, {"ledgerSeq", r.LedgerSeq},
	}
}

// MaxTextLen bounds a receipt's model and network, which are printable
// UTF-8 without spaces, as the gateway's config takes model names: a leaf
// (Leaf) then holds each on one line.
const MaxTextLen = 256

// check reports a receipt whose integers are missing or do not fit
// uint256, whose model or network is not short printable UTF-8 without
// spaces, or whose rail is unknown or does not agree with its network and
// payment.
func (r *Receipt) check() error {
	for _, n := range r.ints() {
		if n.v == nil || n.v.Sign() < 0 || n.v.BitLen() > 256 {
			return fmt.Errorf("%w: %s is missing or not a uint256", ErrMalformed, n.name)
		}
	}
	if !printable(r.Model) || r.Model == "" {
		return fmt.Errorf("%w: model is empty, over %d bytes, or not printable UTF-8 without spaces", ErrMalformed, MaxTextLen)
	}
	if !printable(r.Network) {
		return fmt.Errorf("%w: network is over %d bytes, or not printable UTF-8 without spaces", ErrMalformed, MaxTextLen)
	}
	switch r.Rail {
	case RailCredits:
		if r.Network != "" || r.Payment != (common.Hash{}) {
			return fmt.Errorf("%w: a credits receipt has no network or payment", ErrMalformed)
		}
	case RailExact, RailUpto:
		if r.Network == "" {
			return fmt.Errorf("%w: an x402 receipt names its network", ErrMalformed)
		}
	default:
		return fmt.Errorf("%w: rail is not %s, %s or %s", ErrMalformed, RailCredits, RailExact, RailUpto)
	}
	return nil
}

// printable reports whether s is at most MaxTextLen bytes of valid UTF-8,
// printable and without spaces.
func printable(s string) bool {
	if len(s) > MaxTextLen || !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if !unicode.IsPrint(c) || unicode.IsSpace(c) {
			return false
		}
	}
	return true
}

// MarshalJSON encodes the wire form.
func (r Receipt) MarshalJSON() ([]byte, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	return x402.Marshal(receiptJSON{
		RequestID: r.RequestID.Hex(), Account: r.Account.Hex(), KeyID: r.KeyID.Hex(), Model: r.Model,
		InputTokens: r.InputTokens.String(), OutputTokens: r.OutputTokens.String(), Amount: r.Amount.String(),
		BalanceAfter: r.BalanceAfter.String(), LedgerSeq: r.LedgerSeq.String(), IssuedAt: r.IssuedAt,
		Rail: r.Rail, Network: r.Network, Payment: r.Payment.Hex(), Salt: r.Salt.Hex(), LogBy: r.LogBy,
	})
}

// UnmarshalJSON decodes the wire form strictly: every field present once, no
// other field, canonical decimals, 0x-hex of the right length, and an address
// whose mixed case, if any, is its EIP-55 checksum.
func (r *Receipt) UnmarshalJSON(b []byte) error {
	if err := x402.CheckStrictJSON(b); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	var present map[string]json.RawMessage
	if err := json.Unmarshal(b, &present); err != nil {
		return fmt.Errorf("%w: not a JSON object", ErrMalformed)
	}
	for _, f := range Types()[PrimaryType] {
		if v, ok := present[f.Name]; !ok || string(bytes.TrimSpace(v)) == "null" {
			return fmt.Errorf("%w: %s is missing", ErrMalformed, f.Name)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w receiptJSON
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("%w: fields of the wrong type or unknown", ErrMalformed)
	}
	var out Receipt
	var err error
	if out.RequestID, err = parseBytes32(w.RequestID); err != nil {
		return fmt.Errorf("%w: requestId: %w", ErrMalformed, err)
	}
	if out.KeyID, err = parseBytes32(w.KeyID); err != nil {
		return fmt.Errorf("%w: keyId: %w", ErrMalformed, err)
	}
	if out.Payment, err = parseBytes32(w.Payment); err != nil {
		return fmt.Errorf("%w: payment: %w", ErrMalformed, err)
	}
	if out.Salt, err = parseBytes32(w.Salt); err != nil {
		return fmt.Errorf("%w: salt: %w", ErrMalformed, err)
	}
	if out.Account, err = exact.ParseAddress(w.Account); err != nil {
		return fmt.Errorf("%w: account: %w", ErrMalformed, err)
	}
	for _, f := range []struct {
		dst **big.Int
		s   string
	}{
		{&out.InputTokens, w.InputTokens}, {&out.OutputTokens, w.OutputTokens}, {&out.Amount, w.Amount},
		{&out.BalanceAfter, w.BalanceAfter}, {&out.LedgerSeq, w.LedgerSeq},
	} {
		if *f.dst, err = exact.ParseUint256(f.s); err != nil {
			return fmt.Errorf("%w: %w", ErrMalformed, err)
		}
	}
	out.Model, out.IssuedAt = w.Model, w.IssuedAt
	out.Rail, out.Network, out.LogBy = w.Rail, w.Network, w.LogBy
	if err := out.check(); err != nil {
		return err
	}
	*r = out
	return nil
}

func parseBytes32(s string) (common.Hash, error) {
	if len(s) != 66 || !strings.HasPrefix(s, "0x") {
		return common.Hash{}, errors.New("not 0x and 64 hex digits")
	}
	var h common.Hash
	if _, err := hex.Decode(h[:], []byte(s[2:])); err != nil {
		return common.Hash{}, errors.New("not 0x and 64 hex digits")
	}
	return h, nil
}

// separator is the EIP-712 domain separator of d.
func (d Domain) separator() (common.Hash, error) {
	if d.ChainID == nil || d.ChainID.Sign() <= 0 || d.ChainID.BitLen() > 256 {
		return common.Hash{}, errors.New("client: receipt domain chainId is missing or not a positive uint256")
	}
	var buf [4 * 32]byte
	copy(buf[0:], receiptDomainTypeHash[:])
	name, version := crypto.Keccak256Hash([]byte(d.Name)), crypto.Keccak256Hash([]byte(d.Version))
	copy(buf[32:], name[:])
	copy(buf[64:], version[:])
	d.ChainID.FillBytes(buf[96:128])
	return crypto.Keccak256Hash(buf[:]), nil
}

// structHash is the EIP-712 hash of the receipt message.
func (r *Receipt) structHash() (common.Hash, error) {
	if err := r.check(); err != nil {
		return common.Hash{}, err
	}
	var buf [16 * 32]byte
	copy(buf[0:], receiptTypeHash[:])
	copy(buf[32:], r.RequestID[:])
	copy(buf[64+12:], r.Account[:])
	copy(buf[96:], r.KeyID[:])
	model := crypto.Keccak256Hash([]byte(r.Model))
	copy(buf[128:], model[:])
	for i, n := range r.ints() {
		n.v.FillBytes(buf[160+32*i : 192+32*i])
	}
	new(big.Int).SetUint64(r.IssuedAt).FillBytes(buf[320:352])
	rail, network := crypto.Keccak256Hash([]byte(r.Rail)), crypto.Keccak256Hash([]byte(r.Network))
	copy(buf[352:], rail[:])
	copy(buf[384:], network[:])
	copy(buf[416:], r.Payment[:])
	copy(buf[448:], r.Salt[:])
	new(big.Int).SetUint64(r.LogBy).FillBytes(buf[480:512])
	return crypto.Keccak256Hash(buf[:]), nil
}

// Digest returns the hash the gateway signs for r in d:
// keccak256(0x1901 ‖ domainSeparator ‖ structHash).
func Digest(d Domain, r *Receipt) (common.Hash, error) {
	sep, err := d.separator()
	if err != nil {
		return common.Hash{}, err
	}
	sh, err := r.structHash()
	if err != nil {
		return common.Hash{}, err
	}
	var buf [2 + 32 + 32]byte
	buf[0], buf[1] = 0x19, 0x01
	copy(buf[2:], sep[:])
	copy(buf[34:], sh[:])
	return crypto.Keccak256Hash(buf[:]), nil
}

// Verify checks that sig is a 65-byte r ‖ s ‖ v signature (v in {0, 1,
// 27, 28}, s in the lower half of the curve order) over r in d, and returns
// the address that signed it. The caller compares that address with the
// published signer (client.ReceiptVerifier does).
func Verify(r *Receipt, sig []byte, d Domain) (common.Address, error) {
	digest, err := Digest(d, r)
	if err != nil {
		return common.Address{}, err
	}
	if len(sig) != crypto.SignatureLength {
		return common.Address{}, fmt.Errorf("%w: signature is %d bytes, want 65", ErrSignature, len(sig))
	}
	norm := bytes.Clone(sig)
	if norm[64] >= 27 {
		norm[64] -= 27
	}
	rr, ss := new(big.Int).SetBytes(norm[:32]), new(big.Int).SetBytes(norm[32:64])
	if !crypto.ValidateSignatureValues(norm[64], rr, ss, true) {
		return common.Address{}, fmt.Errorf("%w: signature values out of range", ErrSignature)
	}
	pub, err := crypto.SigToPub(digest[:], norm)
	if err != nil {
		return common.Address{}, fmt.Errorf("%w: %w", ErrSignature, err)
	}
	return crypto.PubkeyToAddress(*pub), nil
}

// receiptEnvelope is how a receipt travels: the receipt and its signature.
type receiptEnvelope struct {
	Receipt   json.RawMessage `json:"receipt"`
	Signature string          `json:"signature"`
}

// EncodeEnvelope returns the JSON envelope of r and sig, as a stream's
// final usage chunk carries it.
func EncodeEnvelope(r *Receipt, sig []byte) ([]byte, error) {
	rb, err := r.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return x402.Marshal(receiptEnvelope{Receipt: rb, Signature: "0x" + hex.EncodeToString(sig)})
}

// EncodeHeader returns the Header value for r and sig.
func EncodeHeader(r *Receipt, sig []byte) (string, error) {
	b, err := EncodeEnvelope(r, sig)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// ParseEnvelope decodes the JSON envelope {"receipt", "signature"}
// strictly. It checks the shapes, not the signature.
func ParseEnvelope(b []byte) (*Receipt, []byte, error) {
	if err := x402.CheckStrictJSON(b); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var env receiptEnvelope
	if err := dec.Decode(&env); err != nil || env.Receipt == nil {
		return nil, nil, fmt.Errorf("%w: not an envelope {receipt, signature}", ErrMalformed)
	}
	var r Receipt
	if err := r.UnmarshalJSON(env.Receipt); err != nil {
		return nil, nil, err
	}
	sig := env.Signature
	if !strings.HasPrefix(sig, "0x") || len(sig) != 2+2*crypto.SignatureLength {
		return nil, nil, fmt.Errorf("%w: signature is not 0x and 130 hex digits", ErrMalformed)
	}
	raw, err := hex.DecodeString(sig[2:])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: signature is not 0x and 130 hex digits", ErrMalformed)
	}
	return &r, raw, nil
}

// DecodeHeader decodes a Header value: standard padded base64 of
// the envelope, at most x402.MaxHeaderBytes long.
func DecodeHeader(v string) (*Receipt, []byte, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil, ErrMissing
	}
	if len(v) > x402.MaxHeaderBytes {
		return nil, nil, fmt.Errorf("%w: header over %d bytes", ErrMalformed, x402.MaxHeaderBytes)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(v)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: not standard base64", ErrMalformed)
	}
	return ParseEnvelope(b)
}
