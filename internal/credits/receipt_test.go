package credits

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

func testReceipt() receipt.Receipt {
	return receipt.Receipt{
		RequestID: common.HexToHash("0x01"), Account: common.HexToAddress("0x857b06519e91e3a54538791bdbb0e22373e36b66"),
		KeyID: common.HexToHash("0x02"), Model: "gpt-4o-mini",
		InputTokens: big.NewInt(120), OutputTokens: big.NewInt(80), Amount: big.NewInt(1234),
		BalanceAfter: big.NewInt(998766), LedgerSeq: big.NewInt(42), IssuedAt: 1_790_000_000,
		Rail: receipt.RailCredits,
	}
}

func TestSignerRoundTrip(t *testing.T) {
	key := newWallet(t)
	s, err := NewSigner(key, big.NewInt(testChain))
	if err != nil {
		t.Fatal(err)
	}
	signed, err := s.Sign(testReceipt())
	if err != nil {
		t.Fatal(err)
	}
	if v := signed.Signature[64]; v != 27 && v != 28 {
		t.Errorf("v = %d, want 27 or 28", v)
	}
	// The well-known document, through its wire form, is what a buyer uses.
	b, err := json.Marshal(s.WellKnown())
	if err != nil {
		t.Fatal(err)
	}
	wk, err := receipt.ParseWellKnown(b)
	if err != nil {
		t.Fatalf("ParseWellKnown(%s): %v", b, err)
	}
	if wk.Receipts.Signer != crypto.PubkeyToAddress(key.PublicKey) || wk.Receipts.Domain.ChainID.Int64() != testChain {
		t.Errorf("well-known = %+v", wk.Receipts)
	}
	// The header and the JSON envelope decode to what was signed and verify.
	h, err := signed.Header()
	if err != nil {
		t.Fatal(err)
	}
	r, sig, err := receipt.DecodeHeader(h)
	if err != nil {
		t.Fatal(err)
	}
	env, err := signed.JSON()
	if err != nil {
		t.Fatal(err)
	}
	r2, sig2, err := receipt.ParseEnvelope(env)
	if err != nil || !bytes.Equal(sig, sig2) {
		t.Fatalf("receipt.ParseEnvelope() = %v, sig equal %v", err, bytes.Equal(sig, sig2))
	}
	if diff := cmp.Diff(r, r2, cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("header and envelope differ:\n%s", diff)
	}
	got, err := receipt.Verify(r, sig, wk.Receipts.Domain)
	if err != nil || got != wk.Receipts.Signer {
		t.Fatalf("receipt.Verify() = %v, %v, want %v", got, err, wk.Receipts.Signer)
	}

	// Tampering with any field, the domain or the signature is caught.
	tamper := map[string]func(r *receipt.Receipt){
		"requestId":    func(r *receipt.Receipt) { r.RequestID[31] ^= 1 },
		"account":      func(r *receipt.Receipt) { r.Account[0] ^= 1 },
		"keyId":        func(r *receipt.Receipt) { r.KeyID = common.Hash{} },
		"model":        func(r *receipt.Receipt) { r.Model = "gpt-4o" },
		"inputTokens":  func(r *receipt.Receipt) { r.InputTokens = big.NewInt(119) },
		"outputTokens": func(r *receipt.Receipt) { r.OutputTokens = big.NewInt(81) },
		"amount":       func(r *receipt.Receipt) { r.Amount = big.NewInt(1) },
		"balanceAfter": func(r *receipt.Receipt) { r.BalanceAfter = big.NewInt(1_000_000) },
		"ledgerSeq":    func(r *receipt.Receipt) { r.LedgerSeq = big.NewInt(43) },
		"issuedAt":     func(r *receipt.Receipt) { r.IssuedAt++ },
	}
	for name, f := range tamper {
		r := testReceipt()
		f(&r)
		if got, err := receipt.Verify(&r, sig, wk.Receipts.Domain); err == nil && got == wk.Receipts.Signer {
			t.Errorf("tampered %s still verifies", name)
		}
	}
	other := receipt.NewDomain(big.NewInt(1))
	if got, err := receipt.Verify(r, sig, other); err == nil && got == wk.Receipts.Signer {
		t.Error("receipt verifies in another chain's domain")
	}
	bad := bytes.Clone(sig)
	bad[10] ^= 1
	if got, err := receipt.Verify(r, bad, wk.Receipts.Domain); err == nil && got == wk.Receipts.Signer {
		t.Error("tampered signature still verifies")
	}
}

func p256(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSignerRejects(t *testing.T) {
	key := newWallet(t)
	for name, chain := range map[string]*big.Int{"nil": nil, "zero": big.NewInt(0), "negative": big.NewInt(-1),
		"over uint256": new(big.Int).Lsh(big.NewInt(1), 256)} {
		if _, err := NewSigner(key, chain); err == nil {
			t.Errorf("NewSigner(chain %s) succeeded", name)
		}
	}
	for name, k := range map[string]*ecdsa.PrivateKey{
		"nil":       nil,
		"empty":     {},
		"no scalar": {PublicKey: ecdsa.PublicKey{Curve: crypto.S256()}},
		"P-256 key": p256(t),
	} {
		if _, err := NewSigner(k, big.NewInt(1)); err == nil {
			t.Errorf("NewSigner(%s key) succeeded", name)
		}
	}
	s, err := NewSigner(key, big.NewInt(1))
	if err != nil {
		t.Fatal(err)
	}
	r := testReceipt()
	r.Amount = nil
	if _, err := s.Sign(r); err == nil {
		t.Error("Sign() of a receipt without amount succeeded")
	}
	r = testReceipt()
	r.BalanceAfter = big.NewInt(-1)
	if _, err := s.Sign(r); err == nil || errors.Is(err, nil) {
		t.Error("Sign() of a negative balance succeeded")
	}
	// The domain handed out is a copy: changing it changes nothing signed.
	d := s.Domain()
	d.ChainID.SetInt64(99)
	if s.Domain().ChainID.Int64() != 1 {
		t.Error("Domain() shares its chain id")
	}
}

// TestWellKnownHandler: what the handler serves, client.FetchWellKnown
// fetches and parses to the signer and domain.
func TestWellKnownHandler(t *testing.T) {
	key := newWallet(t)
	s, err := NewSigner(key, big.NewInt(testChain))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(receipt.WellKnownPath, WellKnownHandler(s.WellKnown()))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	wk, err := client.FetchWellKnown(t.Context(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if wk.Receipts.Signer != s.Address() || wk.Receipts.Domain.ChainID.Int64() != testChain || wk.Receipts.Domain.Name != receipt.DomainName {
		t.Errorf("well-known = %+v", wk.Receipts)
	}
	// A receipt signed by s verifies through a ReceiptVerifier on this origin.
	signed, err := s.Sign(testReceipt())
	if err != nil {
		t.Fatal(err)
	}
	v := &client.ReceiptVerifier{Client: srv.Client()}
	if err := v.Verify(t.Context(), srv.URL, &signed.Receipt, signed.Signature); err != nil {
		t.Errorf("ReceiptVerifier.Verify(): %v", err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+receipt.WellKnownPath, nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST well-known: %d", resp.StatusCode)
	}
}
