package interop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// The upto interop tests need no chain: the Permit2 and proxy contracts are
// not deployed here yet. They cross-check the wire, the EIP-712 digest, the
// signatures and the node-free verification order with npm @x402/evm 2.27.0.

var (
	// uptoAsset stands for the token; nothing is called on it.
	uptoAsset = common.HexToAddress("0x5FbDB2315678afecb367f032d93F642f64180aa3")
	// uptoUndeployed is a token address without code.
	uptoUndeployed = common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	uptoMax        = "5000000"
)

func uptoRequirements() x402.PaymentRequirements {
	return x402.PaymentRequirements{
		Scheme:            upto.Scheme,
		Network:           network,
		Amount:            uptoMax,
		Asset:             uptoAsset.Hex(),
		PayTo:             testchain.DevAddress(payToIdx).Hex(),
		MaxTimeoutSeconds: maxTimeoutSeconds,
		Extra:             json.RawMessage(`{"facilitatorAddress":"` + testchain.DevAddress(facilitatorIdx).Hex() + `"}`),
	}
}

// nodeStub is a node on which the asset and the proxy have code, payers have
// none, and every eth_call succeeds: the same stub upto-verify.mjs gives the
// official facilitator.
type nodeStub struct{ withCode map[common.Address]bool }

func (n nodeStub) CodeAt(_ context.Context, a common.Address, _ *big.Int) ([]byte, error) {
	if n.withCode[a] {
		return []byte{0x60, 0x00}, nil
	}
	return nil, nil
}

func (n nodeStub) CallContract(context.Context, ethereum.CallMsg, *big.Int) ([]byte, error) {
	return nil, nil
}

func uptoVerifier(now time.Time) *upto.Verifier {
	return &upto.Verifier{
		Chain:        nodeStub{withCode: map[common.Address]bool{uptoAsset: true, upto.ProxyAddress: true}},
		ChainID:      big.NewInt(1337),
		Facilitators: []common.Address{testchain.DevAddress(facilitatorIdx)},
		Now:          func() time.Time { return now },
	}
}

// TestUptoOfficialClientSigns: the official upto client signs a payment; Go
// parses it strictly, re-encodes it to the same bytes, computes the digest
// viem signed, recovers the payer and verifies it.
func TestUptoOfficialClientSigns(t *testing.T) {
	req := uptoRequirements()
	pr := x402.PaymentRequired{
		X402Version: 2, Error: "Payment required",
		Resource: &x402.ResourceInfo{URL: "http://127.0.0.1/metered"},
		Accepts:  []x402.PaymentRequirements{req},
	}
	before := time.Now()
	out := runNodeScript(t, "upto-sign.mjs", mustMarshal(t, pr), "PAYER_KEY="+keyHex(testchain.DevKey(payerIdx)))
	var got struct {
		PaymentPayload x402.PaymentPayload
		Digest         common.Hash
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("upto-sign output %q: %v", out, err)
	}
	p := &got.PaymentPayload

	pl, err := upto.ParsePayload(p.Payload)
	if err != nil {
		t.Fatalf("ParsePayload of the official payload %s: %v", p.Payload, err)
	}
	// The wire form, byte for byte: key order, checksummed addresses, a
	// decimal nonce.
	if again := mustMarshal(t, pl.JSON()); !bytes.Equal(again, p.Payload) {
		t.Errorf("re-encoded payload differs:\n ours %s\n npm  %s", again, p.Payload)
	}
	a := pl.Authorization
	if a.From != testchain.DevAddress(payerIdx) || a.Spender != upto.ProxyAddress || a.Witness.ValidAfter.Sign() != 0 ||
		a.Witness.Facilitator != testchain.DevAddress(facilitatorIdx) || a.Witness.To != testchain.DevAddress(payToIdx) ||
		a.Permitted.Token != uptoAsset || a.Permitted.Amount.String() != uptoMax {
		t.Errorf("authorization %+v", a)
	}
	if d := a.Deadline.Int64(); d < before.Unix()+maxTimeoutSeconds || d > time.Now().Unix()+maxTimeoutSeconds {
		t.Errorf("deadline %d is not now + %d", d, maxTimeoutSeconds)
	}
	if a.Nonce.BitLen() < 200 {
		t.Errorf("nonce %s does not look like 256 random bits", a.Nonce)
	}

	v := uptoVerifier(time.Now())
	vd, recovered, err := v.Check(p, req)
	if err != nil || !recovered {
		t.Fatalf("Check of the official payload: recovered %v, %v", recovered, err)
	}
	if vd.Digest != got.Digest {
		t.Errorf("digest %s, viem signed %s", vd.Digest.Hex(), got.Digest.Hex())
	}
	if _, err := v.Verify(context.Background(), p, req); err != nil {
		t.Errorf("Verify of the official payload: %v", err)
	}
	// Settling a part of it is allowed; more is not.
	req.Amount = "1234"
	if vd, _, err := v.CheckSettle(p, req); err != nil || vd.Amount.Int64() != 1234 {
		t.Errorf("CheckSettle(1234) = %v", err)
	}
}

// uptoCase is one payment Go signs, and the verdicts expected of our
// verifier and of the official one on the same stub node.
type uptoCase struct {
	name string
	edit func(c *uptoEdit)
	// goWant and npmWant are the expected reasons, "" for valid. They differ
	// only for checks of our own, and where npm is laxer.
	goWant, npmWant x402.Reason
	// sigValid is whether viem's verifyTypedData accepts the signature.
	sigValid bool
}

// uptoEdit is what a case may change: the permit before signing, the
// signature, the echoed requirement, the payload text, the signing key.
type uptoEdit struct {
	now      int64
	auth     upto.Authorization
	req      x402.PaymentRequirements
	accepted x402.PaymentRequirements
	key      int
	sig      func([]byte) []byte
	body     func(string) string
}

func uptoCases() []uptoCase {
	stranger := testchain.DevAddress(strangerIdx)
	return []uptoCase{
		{"valid", nil, "", "", true},
		{"hex nonce on the wire", func(c *uptoEdit) {
			c.body = func(s string) string {
				return strings.Replace(s, `"nonce":"`+c.auth.Nonce.String()+`"`, `"nonce":"0x`+c.auth.Nonce.Text(16)+`"`, 1)
			}
		}, "", "", true},
		{"v 0 or 1", func(c *uptoEdit) { c.sig = func(s []byte) []byte { s[64] -= 27; return s } }, "", "", true},
		// viem refuses the malleated twin too, although ecrecover (and so
		// Permit2) would take it.
		{"high s", func(c *uptoEdit) { c.sig = highS }, x402.ReasonPermit2Signature, x402.ReasonPermit2Signature, false},
		{"spender the exact proxy", func(c *uptoEdit) { c.auth.Spender = common.HexToAddress("0x402085c248EeA27D92E8b30b2C58ed07f9E20001") },
			x402.ReasonPermit2Spender, x402.ReasonPermit2Spender, true},
		{"witness.to another", func(c *uptoEdit) { c.auth.Witness.To = stranger }, x402.ReasonPermit2RecipientMismatch, x402.ReasonPermit2RecipientMismatch, true},
		{"witness.facilitator another", func(c *uptoEdit) { c.auth.Witness.Facilitator = stranger }, x402.ReasonUptoFacilitatorMismatch, x402.ReasonUptoFacilitatorMismatch, true},
		{"deadline passed", func(c *uptoEdit) { c.auth.Deadline = big.NewInt(c.now - 100) }, x402.ReasonPermit2DeadlineExpired, x402.ReasonPermit2DeadlineExpired, true},
		{"deadline an hour away", func(c *uptoEdit) { c.auth.Deadline = big.NewInt(c.now + 3600) }, x402.ReasonUptoDeadlineTooFar, "", true},
		{"validAfter in the future", func(c *uptoEdit) { c.auth.Witness.ValidAfter = big.NewInt(c.now + 100) }, x402.ReasonPermit2NotYetValid, x402.ReasonPermit2NotYetValid, true},
		{"permitted less", func(c *uptoEdit) { c.auth.Permitted.Amount = big.NewInt(1) }, x402.ReasonPermit2AmountMismatch, x402.ReasonPermit2AmountMismatch, true},
		{"another token", func(c *uptoEdit) { c.auth.Permitted.Token = stranger }, x402.ReasonPermit2TokenMismatch, x402.ReasonPermit2TokenMismatch, true},
		{"asset without code", func(c *uptoEdit) {
			c.auth.Permitted.Token = uptoUndeployed
			c.req.Asset, c.accepted.Asset = uptoUndeployed.Hex(), uptoUndeployed.Hex()
		}, x402.ReasonAssetNotDeployed, x402.ReasonAssetNotDeployed, true},
		{"signed by another key", func(c *uptoEdit) { c.key = strangerIdx }, x402.ReasonPermit2Signature, x402.ReasonPermit2Signature, false},
		{"nonce changed after signing", func(c *uptoEdit) {
			c.body = func(s string) string {
				return strings.Replace(s, `"nonce":"`+c.auth.Nonce.String()+`"`, `"nonce":"1"`, 1)
			}
		}, x402.ReasonPermit2Signature, x402.ReasonPermit2Signature, false},
		{"accepted scheme exact", func(c *uptoEdit) { c.accepted.Scheme = "exact" }, x402.ReasonUptoScheme, x402.ReasonUptoScheme, true},
		{"accepted other network", func(c *uptoEdit) { c.accepted.Network = "eip155:8453" }, x402.ReasonUptoNetworkMismatch, x402.ReasonUptoNetworkMismatch, true},
		{"accepted other amount", func(c *uptoEdit) { c.accepted.Amount = "1" }, x402.ReasonUptoAcceptedMismatch, "", true},
		{"payload without witness.facilitator", func(c *uptoEdit) {
			c.body = func(s string) string {
				return strings.Replace(s, `"facilitator":"`+c.auth.Witness.Facilitator.Hex()+`",`, ``, 1)
			}
		}, x402.ReasonUnsupportedPayloadType, x402.ReasonUnsupportedPayloadType, false},
		// Two faults: both implementations give the first.
		{"spender and recipient", func(c *uptoEdit) {
			c.auth.Spender = stranger
			c.auth.Witness.To = stranger
		}, x402.ReasonPermit2Spender, x402.ReasonPermit2Spender, true},
		{"facilitator and deadline", func(c *uptoEdit) {
			c.auth.Witness.Facilitator = stranger
			c.auth.Deadline = big.NewInt(c.now - 100)
		}, x402.ReasonUptoFacilitatorMismatch, x402.ReasonUptoFacilitatorMismatch, true},
		{"amount and token", func(c *uptoEdit) {
			c.auth.Permitted.Amount = big.NewInt(1)
			c.auth.Permitted.Token = stranger
		}, x402.ReasonPermit2AmountMismatch, x402.ReasonPermit2AmountMismatch, true},
	}
}

// TestUptoGoSignsOfficialVerifies: Go signs permits; viem's verifyTypedData
// with the official types accepts the signatures and hashes the same digest,
// and the official facilitator reaches the same verdict as ours, case by case.
func TestUptoGoSignsOfficialVerifies(t *testing.T) {
	requireTools(t)
	now := time.Now().Unix()
	cases := uptoCases()
	type tsCase struct {
		PaymentPayload      *x402.PaymentPayload     `json:"paymentPayload"`
		PaymentRequirements x402.PaymentRequirements `json:"paymentRequirements"`
	}
	var in []tsCase
	var digests []common.Hash
	var goReasons []x402.Reason
	for _, tc := range cases {
		p, req, digest := uptoSign(t, now, tc)
		in = append(in, tsCase{p, req})
		digests = append(digests, digest)
		_, err := uptoVerifier(time.Unix(now, 0)).Verify(context.Background(), p, req)
		var reason x402.Reason
		if err != nil {
			ve, ok := errors.AsType[*x402.VerifyError](err)
			if !ok {
				t.Fatalf("%s: Verify: %v", tc.name, err)
			}
			reason = ve.Reason
		}
		goReasons = append(goReasons, reason)
	}
	out := runNodeScript(t, "upto-verify.mjs", mustMarshal(t, map[string]any{
		"facilitators": []string{testchain.DevAddress(facilitatorIdx).Hex()},
		"contracts":    []string{uptoAsset.Hex(), upto.ProxyAddress.Hex()},
		"cases":        in,
	}))
	var got []struct {
		SignatureValid bool         `json:"signatureValid"`
		Digest         *common.Hash `json:"digest"`
		Verify         struct {
			IsValid       bool        `json:"isValid"`
			InvalidReason x402.Reason `json:"invalidReason"`
			Thrown        string      `json:"thrown"`
		} `json:"verify"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("upto-verify output %q: %v", out, err)
	}
	if len(got) != len(cases) {
		t.Fatalf("%d results for %d cases", len(got), len(cases))
	}
	if time.Now().Unix()-now > 50 {
		t.Fatal("the node script ran so long that the permits' times no longer mean what the cases say")
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := got[i]
			if goReasons[i] != tc.goWant {
				t.Errorf("our verdict %q, want %q", goReasons[i], tc.goWant)
			}
			npm := g.Verify.InvalidReason
			if g.Verify.IsValid {
				npm = ""
			} else if npm == "" {
				npm = x402.Reason("thrown: " + g.Verify.Thrown)
			}
			if npm != tc.npmWant {
				t.Errorf("npm verdict %q, want %q", npm, tc.npmWant)
			}
			if g.SignatureValid != tc.sigValid {
				t.Errorf("viem verifyTypedData = %v, want %v", g.SignatureValid, tc.sigValid)
			}
			if tc.sigValid && (g.Digest == nil || *g.Digest != digests[i]) {
				t.Errorf("viem digest %v, ours %s", g.Digest, digests[i].Hex())
			}
		})
	}
}

// uptoSign builds one case: a permit for uptoRequirements, edited and signed
// by Go, in a PaymentPayload. It returns the requirements to verify against
// and the digest of what was signed.
func uptoSign(tb testing.TB, now int64, tc uptoCase) (*x402.PaymentPayload, x402.PaymentRequirements, common.Hash) {
	tb.Helper()
	req := uptoRequirements()
	signer := exact.NewKeySigner(testchain.DevKey(payerIdx))
	p, err := upto.CreatePayload(context.Background(), signer, req, upto.SignOptions{Now: func() time.Time { return time.Unix(now, 0) }})
	if err != nil {
		tb.Fatal(err)
	}
	c := &uptoEdit{now: now, auth: p.Authorization, req: req, accepted: req, key: payerIdx}
	if tc.edit != nil {
		tc.edit(c)
	}
	digest := upto.Digest(big.NewInt(1337), &c.auth)
	sig, err := exact.NewKeySigner(testchain.DevKey(c.key)).SignDigest(context.Background(), digest)
	if err != nil {
		tb.Fatal(err)
	}
	if c.sig != nil {
		sig = c.sig(sig)
	}
	body := string(mustMarshal(tb, (&upto.Payload{Authorization: c.auth, Signature: sig}).JSON()))
	if c.body != nil {
		body = c.body(body)
	}
	return &x402.PaymentPayload{
		X402Version: 2,
		Resource:    &x402.ResourceInfo{URL: "http://127.0.0.1/metered"},
		Accepted:    mustMarshal(tb, c.accepted),
		Payload:     json.RawMessage(body),
	}, c.req, digest
}

// highS turns a signature into its high-s twin, which recovers to the same
// key: valid to ecrecover, refused by us and by viem as no wallet makes it.
func highS(sig []byte) []byte {
	n := crypto.S256().Params().N
	out := append([]byte(nil), sig...)
	new(big.Int).Sub(n, new(big.Int).SetBytes(sig[32:64])).FillBytes(out[32:64])
	out[64] ^= 1 // 27 <-> 28
	return out
}
