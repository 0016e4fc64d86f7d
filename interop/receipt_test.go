package interop_test

import (
	"encoding/json"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/credits"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// The test in this file checks the gateway's signed receipts (D18) with viem's
// verifyTypedData from npm, the verifier a JavaScript buyer would use: every
// receipt credits.Signer
// signs verifies against the published signer address, and a receipt with
// any one field changed, in another domain, under another signer or with a
// changed signature does not.

// receiptCase is one envelope for verify-receipt.mjs and what viem must say.
type receiptCase struct {
	Name     string      `json:"name"`
	Envelope string      `json:"envelope"`
	Signer   *string     `json:"signer,omitempty"`
	Domain   *wireDomain `json:"domain,omitempty"`

	valid  bool        // what viem must answer
	digest common.Hash // what Go hashes for the message and domain sent
}

// wireDomain is a receipt domain with its chain id as a decimal string, so
// no JSON number has to carry it into JavaScript.
type wireDomain struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	ChainID string `json:"chainId"`
}

func toWire(d receipt.Domain) *wireDomain {
	return &wireDomain{Name: d.Name, Version: d.Version, ChainID: d.ChainID.String()}
}

// viemResult is verify-receipt.mjs's answer for one case.
type viemResult struct {
	Name      string         `json:"name"`
	Valid     bool           `json:"valid"`
	Digest    common.Hash    `json:"digest"`
	Recovered common.Address `json:"recovered"`
	Thrown    string         `json:"thrown"`
}

// maxUint256 is 2^256 - 1.
var maxUint256 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))

// receipts are the receipts signed and verified: a key-paid call, a
// wallet-paid one (zero key id) that delivered nothing, every uint256 at its
// maximum, and model names viem must hash as UTF-8.
func receipts() map[string]receipt.Receipt {
	base := receipt.Receipt{
		RequestID:    crypto.Keccak256Hash([]byte("request 1")),
		Account:      common.HexToAddress("0x857b06519E91e3A54538791bDbb0E22373e36b66"),
		KeyID:        crypto.Keccak256Hash([]byte("key 1")),
		Model:        "gpt-4o-mini",
		InputTokens:  big.NewInt(1234),
		OutputTokens: big.NewInt(567),
		Amount:       big.NewInt(12_345),
		BalanceAfter: big.NewInt(987_654_321),
		LedgerSeq:    big.NewInt(42),
		IssuedAt:     1_764_000_000,
		Rail:         receipt.RailCredits,
		Salt:         crypto.Keccak256Hash([]byte("salt 1")),
		LogBy:        1_764_000_002,
	}
	wallet := base
	wallet.KeyID, wallet.OutputTokens, wallet.Amount = common.Hash{}, big.NewInt(0), big.NewInt(0)
	wallet.Rail, wallet.Network, wallet.Payment = receipt.RailUpto, "eip155:8453", crypto.Keccak256Hash([]byte("permit2 nonce"))
	maxed := base
	maxed.InputTokens, maxed.OutputTokens, maxed.Amount, maxed.BalanceAfter, maxed.LedgerSeq =
		maxUint256, maxUint256, maxUint256, maxUint256, maxUint256
	maxed.IssuedAt, maxed.LogBy = 1<<53-1, 1<<53-1 // the wire's issuedAt and logBy are JSON numbers: exact in JavaScript up to 2^53 - 1
	unicode := base
	unicode.Model = "modèle-日本語-🚀\"quoted\"\\"
	return map[string]receipt.Receipt{"key-paid": base, "wallet-paid": wallet, "max-uint256": maxed,
		"unicode-model": unicode}
}

// tampered returns the base receipt with each field changed in turn.
func tampered(base receipt.Receipt) map[string]receipt.Receipt {
	plus1 := func(v *big.Int) *big.Int { return new(big.Int).Add(v, big.NewInt(1)) }
	out := map[string]receipt.Receipt{}
	for name, change := range map[string]func(r *receipt.Receipt){
		"requestId":    func(r *receipt.Receipt) { r.RequestID[31] ^= 1 },
		"account":      func(r *receipt.Receipt) { r.Account[19] ^= 1 },
		"keyId":        func(r *receipt.Receipt) { r.KeyID = common.Hash{} },
		"model":        func(r *receipt.Receipt) { r.Model = "gpt-4o" },
		"rail":         func(r *receipt.Receipt) { r.Rail, r.Network = receipt.RailExact, "eip155:8453" },
		"salt":         func(r *receipt.Receipt) { r.Salt[0] ^= 1 },
		"logBy":        func(r *receipt.Receipt) { r.LogBy++ },
		"inputTokens":  func(r *receipt.Receipt) { r.InputTokens = plus1(r.InputTokens) },
		"outputTokens": func(r *receipt.Receipt) { r.OutputTokens = plus1(r.OutputTokens) },
		"amount":       func(r *receipt.Receipt) { r.Amount = plus1(r.Amount) },
		"balanceAfter": func(r *receipt.Receipt) { r.BalanceAfter = plus1(r.BalanceAfter) },
		"ledgerSeq":    func(r *receipt.Receipt) { r.LedgerSeq = plus1(r.LedgerSeq) },
		"issuedAt":     func(r *receipt.Receipt) { r.IssuedAt++ },
	} {
		r := base
		change(&r)
		out["tampered "+name] = r
	}
	return out
}

func TestReceiptVerifiedByViem(t *testing.T) {
	requireTools(t)
	for _, chainID := range []int64{84532, 8453} {
		key, err := crypto.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		signer, err := credits.NewSigner(key, big.NewInt(chainID))
		if err != nil {
			t.Fatal(err)
		}
		cases := receiptCases(t, signer)
		in := map[string]any{
			"signer": signer.Address().Hex(),
			"domain": toWire(signer.Domain()),
			"types":  map[string][]receipt.TypedField{receipt.PrimaryType: receipt.Types()[receipt.PrimaryType]},
			"cases":  cases,
		}
		var got []viemResult
		out := runNodeScript(t, "verify-receipt.mjs", mustMarshal(t, in))
		if err := json.Unmarshal(out, &got); err != nil || len(got) != len(cases) {
			t.Fatalf("chain %d: verify-receipt.mjs answered %s (%v), want %d results", chainID, out, err, len(cases))
		}
		for i, c := range cases {
			checkViem(t, chainID, signer.Address(), c, got[i])
		}
	}
}

// receiptCases signs every receipt with signer and builds the cases: each
// signed receipt as it is, the first with each field tampered, and the first
// with its signature, domain or signer changed.
func receiptCases(t *testing.T, signer *credits.Signer) []receiptCase {
	t.Helper()
	d := signer.Domain()
	var cases []receiptCase
	add := func(name string, r receipt.Receipt, sig []byte, d receipt.Domain, valid bool) *receiptCase {
		env, err := receipt.EncodeEnvelope(&r, sig)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		digest, err := receipt.Digest(d, &r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Our own verifier must agree with what viem is to answer.
		if from, err := receipt.Verify(&r, sig, d); (err == nil && from == signer.Address()) != valid {
			t.Fatalf("%s: receipt.Verify() = %v, %v; want valid %t", name, from, err, valid)
		}
		cases = append(cases, receiptCase{Name: name, Envelope: string(env), valid: valid, digest: digest})
		return &cases[len(cases)-1]
	}
	all := receipts()
	var base credits.SignedReceipt
	for _, name := range []string{"key-paid", "wallet-paid", "max-uint256", "unicode-model"} {
		s, err := signer.Sign(all[name])
		if err != nil {
			t.Fatalf("Sign(%s): %v", name, err)
		}
		if name == "key-paid" {
			base = s
		}
		add(name, s.Receipt, s.Signature, d, true)
	}
	for name, r := range tampered(base.Receipt) {
		add(name, r, base.Signature, d, false)
	}
	flip := func(i int) []byte {
		sig := append([]byte(nil), base.Signature...)
		sig[i] ^= 1
		return sig
	}
	add("tampered signature r", base.Receipt, flip(0), d, false)
	add("tampered signature s", base.Receipt, flip(63), d, false)
	swapped := append([]byte(nil), base.Signature...)
	swapped[64] = 27 + 28 - swapped[64] // the other valid parity: another address recovers
	add("tampered signature v", base.Receipt, swapped, d, false)
	add("invalid signature v", base.Receipt, flip(64), d, false) // 26 or 29: viem throws

	for name, other := range map[string]receipt.Domain{
		"other chainId": {Name: d.Name, Version: d.Version, ChainID: new(big.Int).Add(d.ChainID, big.NewInt(1))},
		"other name":    {Name: d.Name + "x", Version: d.Version, ChainID: d.ChainID},
		"other version": {Name: d.Name, Version: "1", ChainID: d.ChainID},
	} {
		c := add("domain with "+name, base.Receipt, base.Signature, other, false)
		c.Domain = toWire(other)
	}
	strangerKey, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	stranger := crypto.PubkeyToAddress(strangerKey.PublicKey).Hex()
	// Signed by signer (so our verifier recovers it), checked by viem
	// against another address.
	c := add("another signer's address", base.Receipt, base.Signature, d, true)
	c.Signer, c.valid = &stranger, false
	return cases
}

// checkViem compares viem's answer for c with what it must be: for a valid
// receipt, true and the signer recovered; otherwise false. Whenever viem
// hashed the message, its digest must be ours, so a refusal is the
// signature's doing, never a different encoding.
func checkViem(t *testing.T, chainID int64, signer common.Address, c receiptCase, got viemResult) {
	t.Helper()
	switch {
	case got.Name != c.Name:
		t.Errorf("chain %d: result %q for case %q", chainID, got.Name, c.Name)
	case got.Thrown != "" && c.valid:
		t.Errorf("chain %d %s: viem threw %q, want the receipt verified", chainID, c.Name, got.Thrown)
	case got.Valid != c.valid:
		t.Errorf("chain %d %s: viem verifyTypedData = %t, want %t (recovered %s, signer %s)",
			chainID, c.Name, got.Valid, c.valid, got.Recovered.Hex(), signer.Hex())
	case got.Thrown == "" && got.Digest != c.digest:
		t.Errorf("chain %d %s: viem hashTypedData = %s, Go receipt.Digest = %s", chainID, c.Name, got.Digest.Hex(), c.digest.Hex())
	case c.valid && got.Recovered != signer:
		t.Errorf("chain %d %s: viem recovered %s, want %s", chainID, c.Name, got.Recovered.Hex(), signer.Hex())
	case got.Thrown != "":
		t.Logf("chain %d %s: viem threw %q (refused)", chainID, c.Name, got.Thrown)
	}
}
