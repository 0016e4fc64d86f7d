package receipt_test

import (
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

func testReceipt() *receipt.Receipt {
	return &receipt.Receipt{
		RequestID:    common.HexToHash("0x8f3a0c1e9a8b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d"),
		Account:      testchain.DevAddress(0),
		KeyID:        common.Hash{},
		Model:        "gpt-4o-mini",
		InputTokens:  big.NewInt(1234),
		OutputTokens: big.NewInt(567),
		Amount:       big.NewInt(10000),
		BalanceAfter: big.NewInt(0),
		LedgerSeq:    big.NewInt(42),
		IssuedAt:     1_800_000_000,
		Rail:         receipt.RailExact,
		Network:      "eip155:8453",
		Payment:      common.HexToHash("0x6a1f00000000000000000000000000000000000000000000000000000000c0de"),
		Salt:         common.HexToHash("0x5a175a175a175a175a175a175a175a175a175a175a175a175a175a175a175a17"),
		LogBy:        1_800_000_002,
	}
}

// typedData builds r in d as go-ethereum's apitypes takes it, from the public
// type definition and the wire form: the independent EIP-712 implementation
// the digest is checked against.
func typedData(tb testing.TB, d receipt.Domain, r *receipt.Receipt) apitypes.TypedData {
	tb.Helper()
	types := apitypes.Types{}
	for name, fields := range receipt.Types() {
		for _, f := range fields {
			types[name] = append(types[name], apitypes.Type{Name: f.Name, Type: f.Type})
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		tb.Fatal(err)
	}
	var msg map[string]any
	if err := json.Unmarshal(b, &msg); err != nil {
		tb.Fatal(err)
	}
	msg["issuedAt"] = strconv.FormatUint(r.IssuedAt, 10) // exact, where float64 is not
	msg["logBy"] = strconv.FormatUint(r.LogBy, 10)
	return apitypes.TypedData{
		Types:       types,
		PrimaryType: receipt.PrimaryType,
		Domain:      apitypes.TypedDataDomain{Name: d.Name, Version: d.Version, ChainId: (*math.HexOrDecimal256)(d.ChainID)},
		Message:     msg,
	}
}

// signReceipt signs r in d with key through apitypes' hashing, as a wallet
// or viem's signTypedData would.
func signReceipt(tb testing.TB, key *ecdsa.PrivateKey, d receipt.Domain, r *receipt.Receipt) []byte {
	tb.Helper()
	hash, _, err := apitypes.TypedDataAndHash(typedData(tb, d, r))
	if err != nil {
		tb.Fatal(err)
	}
	sig, err := crypto.Sign(hash, key)
	if err != nil {
		tb.Fatal(err)
	}
	sig[64] += 27
	return sig
}

func TestReceiptTypes(t *testing.T) {
	td := typedData(t, receipt.NewDomain(big.NewInt(1337)), testReceipt())
	if got := string(td.EncodeType(receipt.PrimaryType)); got != receipt.TypeString {
		t.Errorf("apitypes encodes the type as %q, want D18's %q", got, receipt.TypeString)
	}
	const d30 = "Receipt(bytes32 requestId,address account,bytes32 keyId,string model,uint256 inputTokens,uint256 outputTokens,uint256 amount,uint256 balanceAfter,uint256 ledgerSeq,uint64 issuedAt," +
		"string rail,string network,bytes32 payment,bytes32 salt,uint64 logBy)"
	if receipt.TypeString != d30 {
		t.Errorf("ReceiptTypeString = %q, want D30's %q", receipt.TypeString, d30)
	}
	if got := string(td.EncodeType("EIP712Domain")); got != "EIP712Domain(string name,string version,uint256 chainId)" {
		t.Errorf("domain type %q", got)
	}
	if d := receipt.NewDomain(big.NewInt(8453)); d.Name != "llm4agents" || d.Version != "2" || d.ChainID.Int64() != 8453 {
		t.Errorf("NewReceiptDomain = %+v", d)
	}
}

func TestReceiptDigest(t *testing.T) {
	maxU256 := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	huge := testReceipt()
	huge.InputTokens, huge.OutputTokens, huge.Amount, huge.BalanceAfter, huge.LedgerSeq = maxU256, maxU256, maxU256, maxU256, maxU256
	huge.IssuedAt, huge.LogBy = 1<<64-1, 1<<64-1
	huge.Salt, huge.Payment = common.HexToHash("0x"+strings.Repeat("ff", 32)), common.HexToHash("0x"+strings.Repeat("ff", 32))
	huge.Network = strings.Repeat("n", receipt.MaxTextLen)
	huge.KeyID = common.HexToHash("0xffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff")
	unicode := testReceipt()
	unicode.Model = "modèle/🦙\"quoted\"<b>"
	credits := testReceipt()
	credits.Rail, credits.Network, credits.Payment = receipt.RailCredits, "", common.Hash{}
	for name, r := range map[string]*receipt.Receipt{"typical": testReceipt(), "maximal": huge, "unicode model": unicode, "credits": credits} {
		for _, d := range []receipt.Domain{receipt.NewDomain(big.NewInt(1337)), receipt.NewDomain(big.NewInt(8453)), {Name: "other", Version: "2", ChainID: maxU256}} {
			want, _, err := apitypes.TypedDataAndHash(typedData(t, d, r))
			if err != nil {
				t.Fatal(err)
			}
			got, err := receipt.Digest(d, r)
			if err != nil {
				t.Fatal(err)
			}
			if got != common.BytesToHash(want) {
				t.Errorf("%s on %s: digest %s, apitypes %x", name, d.ChainID, got, want)
			}
		}
	}
	bad := testReceipt()
	bad.Amount = big.NewInt(-1)
	if _, err := receipt.Digest(receipt.NewDomain(big.NewInt(1)), bad); !errors.Is(err, receipt.ErrMalformed) {
		t.Errorf("negative amount: %v", err)
	}
	bad.Amount = nil
	if _, err := receipt.Digest(receipt.NewDomain(big.NewInt(1)), bad); !errors.Is(err, receipt.ErrMalformed) {
		t.Errorf("nil amount: %v", err)
	}
	if _, err := receipt.Digest(receipt.Domain{Name: "llm4agents", Version: "1"}, testReceipt()); err == nil {
		t.Error("a domain without chainId hashed")
	}
}

// TestVerifyReceipt: a receipt verifies to its signer, and changing any field
// of the receipt or the domain, or the signature, does not.
func TestVerifyReceipt(t *testing.T) {
	key := testchain.DevKey(3)
	signer := crypto.PubkeyToAddress(key.PublicKey)
	d := receipt.NewDomain(big.NewInt(1337))
	r := testReceipt()
	sig := signReceipt(t, key, d, r)
	got, err := receipt.Verify(r, sig, d)
	if err != nil || got != signer {
		t.Fatalf("VerifyReceipt = %s, %v; want %s", got, err, signer)
	}
	v01 := append([]byte(nil), sig...)
	v01[64] -= 27
	if got, err := receipt.Verify(r, v01, d); err != nil || got != signer {
		t.Errorf("v in {0,1}: %s, %v", got, err)
	}

	tamper := map[string]func(r *receipt.Receipt, d *receipt.Domain){
		"requestId":    func(r *receipt.Receipt, _ *receipt.Domain) { r.RequestID[31] ^= 1 },
		"account":      func(r *receipt.Receipt, _ *receipt.Domain) { r.Account = testchain.DevAddress(1) },
		"keyId":        func(r *receipt.Receipt, _ *receipt.Domain) { r.KeyID[0] = 1 },
		"model":        func(r *receipt.Receipt, _ *receipt.Domain) { r.Model = "gpt-4o" },
		"inputTokens":  func(r *receipt.Receipt, _ *receipt.Domain) { r.InputTokens = big.NewInt(1233) },
		"outputTokens": func(r *receipt.Receipt, _ *receipt.Domain) { r.OutputTokens = big.NewInt(568) },
		"amount":       func(r *receipt.Receipt, _ *receipt.Domain) { r.Amount = big.NewInt(1) },
		"balanceAfter": func(r *receipt.Receipt, _ *receipt.Domain) { r.BalanceAfter = big.NewInt(1) },
		"ledgerSeq":    func(r *receipt.Receipt, _ *receipt.Domain) { r.LedgerSeq = big.NewInt(43) },
		"issuedAt":     func(r *receipt.Receipt, _ *receipt.Domain) { r.IssuedAt++ },
		"domain name":  func(_ *receipt.Receipt, d *receipt.Domain) { d.Name = "llm4agentz" },
		"version":      func(_ *receipt.Receipt, d *receipt.Domain) { d.Version = "1" },
		"rail":         func(r *receipt.Receipt, _ *receipt.Domain) { r.Rail = receipt.RailUpto },
		"network":      func(r *receipt.Receipt, _ *receipt.Domain) { r.Network = "eip155:84532" },
		"payment":      func(r *receipt.Receipt, _ *receipt.Domain) { r.Payment[0] ^= 1 },
		"salt":         func(r *receipt.Receipt, _ *receipt.Domain) { r.Salt[31] ^= 1 },
		"logBy":        func(r *receipt.Receipt, _ *receipt.Domain) { r.LogBy++ },
		"chainId":      func(_ *receipt.Receipt, d *receipt.Domain) { d.ChainID = big.NewInt(1) },
	}
	for name, f := range tamper {
		t.Run(name, func(t *testing.T) {
			r2, d2 := *testReceipt(), d
			f(&r2, &d2)
			got, err := receipt.Verify(&r2, sig, d2)
			if err == nil && got == signer {
				t.Error("a tampered receipt verifies")
			}
		})
	}

	n := crypto.S256().Params().N
	highS := append([]byte(nil), sig...)
	s := new(big.Int).Sub(n, new(big.Int).SetBytes(sig[32:64]))
	s.FillBytes(highS[32:64])
	highS[64] = 27 + 28 - highS[64] // the other parity
	if got, err := receipt.Verify(r, highS, d); err == nil || got == signer {
		t.Errorf("the high-s twin of the signature verifies to %s, %v", got, err)
	}
	badSigs := map[string][]byte{
		"empty":  nil,
		"short":  sig[:64],
		"long":   append(append([]byte(nil), sig...), 0),
		"v 29":   append(append([]byte(nil), sig[:64]...), 29),
		"high s": highS,
		"zero r": append(make([]byte, 32), sig[32:]...),
		"flipped bit": func() []byte {
			b := append([]byte(nil), sig...)
			b[10] ^= 0x80
			return b
		}(),
	}
	for name, bs := range badSigs {
		t.Run("signature "+name, func(t *testing.T) {
			got, err := receipt.Verify(r, bs, d)
			if err == nil && got == signer {
				t.Error("a bad signature verifies")
			}
		})
	}
}

// TestReceiptWire: the envelope round trips through the header and the JSON
// form; hostile encodings are refused with ErrMalformed.
func TestReceiptWire(t *testing.T) {
	key := testchain.DevKey(3)
	d := receipt.NewDomain(big.NewInt(1337))
	r := testReceipt()
	sig := signReceipt(t, key, d, r)
	h, err := receipt.EncodeHeader(r, sig)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(h)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"receipt":{"requestId":"0x8f3a0c1e9a8b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d","account":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",` +
		`"keyId":"0x0000000000000000000000000000000000000000000000000000000000000000","model":"gpt-4o-mini","inputTokens":"1234","outputTokens":"567",` +
		`"amount":"10000","balanceAfter":"0","ledgerSeq":"42","issuedAt":1800000000,"rail":"exact","network":"eip155:8453",` +
		`"payment":"0x6a1f00000000000000000000000000000000000000000000000000000000c0de",` +
		`"salt":"0x5a175a175a175a175a175a175a175a175a175a175a175a175a175a175a175a17","logBy":1800000002},"signature":"0x`
	if !strings.HasPrefix(string(raw), want) {
		t.Errorf("envelope\n%s\nwant prefix\n%s", raw, want)
	}
	r2, sig2, err := receipt.DecodeHeader(h)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, r2, cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if string(sig2) != string(sig) {
		t.Error("signature changed in the round trip")
	}
	if _, _, err := receipt.DecodeHeader(""); !errors.Is(err, receipt.ErrMissing) {
		t.Errorf("empty header: %v", err)
	}

	good := string(raw)
	field := func(name, value string) string {
		var env struct{ Receipt map[string]json.RawMessage }
		if err := json.Unmarshal(raw, &env); err != nil {
			t.Fatal(err)
		}
		i := strings.Index(good, `"`+name+`":`)
		old := `"` + name + `":` + string(env.Receipt[name])
		if i < 0 || !strings.Contains(good, old) {
			t.Fatalf("no field %s", name)
		}
		if value == "" {
			return strings.Replace(good, old+",", "", 1)
		}
		return strings.Replace(good, old, `"`+name+`":`+value, 1)
	}
	hostile := map[string]string{
		"not JSON":               "receipt",
		"array":                  `[` + good + `]`,
		"trailing data":          good + `{}`,
		"unknown envelope field": strings.Replace(good, `{"receipt"`, `{"x":1,"receipt"`, 1),
		"duplicate receipt":      strings.Replace(good, `{"receipt"`, `{"receipt":{},"receipt"`, 1),
		"no receipt":             `{"signature":"0x` + strings.Repeat("00", 65) + `"}`,
		"null receipt":           `{"receipt":null,"signature":"0x` + strings.Repeat("00", 65) + `"}`,
		"unknown receipt field":  strings.Replace(good, `"model"`, `"extra":"x","model"`, 1),
		"duplicate field":        strings.Replace(good, `"model"`, `"amount":"1","model"`, 1),
		"missing amount":         field("amount", ""),
		"numeric amount":         field("amount", `10000`),
		"negative amount":        field("amount", `"-1"`),
		"leading zero":           field("amount", `"010000"`),
		"hex amount":             field("amount", `"0x2710"`),
		"amount over uint256":    field("amount", `"115792089237316195423570985008687907853269984665640564039457584007913129639936"`),
		"float amount":           field("amount", `"1.5"`),
		"string issuedAt":        field("issuedAt", `"1800000000"`),
		"negative issuedAt":      field("issuedAt", `-1`),
		"float issuedAt":         field("issuedAt", `1.5`),
		"issuedAt over uint64":   field("issuedAt", `18446744073709551616`),
		"short requestId":        field("requestId", `"0x1234"`),
		"requestId not hex":      field("requestId", `"0x`+strings.Repeat("zz", 32)+`"`),
		"requestId no 0x":        field("requestId", `"`+strings.Repeat("00", 33)+`"`),
		"bad checksum":           field("account", `"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92267"`),
		"short account":          field("account", `"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb922"`),
		"numeric model":          field("model", `1`),
		"null model":             field("model", `null`),
		"empty model":            field("model", `""`),
		"model with a space":     field("model", `"gpt 4"`),
		"model with a newline":   field("model", `"gpt\n4"`),
		"unknown rail":           field("rail", `"card"`),
		"missing rail":           field("rail", ""),
		"x402 without network":   field("network", `""`),
		"network over the limit": field("network", `"`+strings.Repeat("n", receipt.MaxTextLen+1)+`"`),
		"short salt":             field("salt", `"0x1234"`),
		"missing salt":           field("salt", ""),
		"payment not hex":        field("payment", `"0x`+strings.Repeat("zz", 32)+`"`),
		"string logBy":           field("logBy", `"1"`),
		"negative logBy":         field("logBy", `-1`),
		"deep":                   strings.Replace(good, `{"receipt"`, `{"x":`+strings.Repeat("[", 64)+strings.Repeat("]", 64)+`,"receipt"`, 1),
		"short signature":        strings.Replace(good, `"signature":"0x`, `"signature":"0x00`, 1)[:len(good)-4] + `"}`,
		"signature without 0x":   strings.Replace(good, `"signature":"0x`, `"signature":"00`, 1),
		"signature not hex":      good[:len(good)-4] + `zz"}`,
	}
	for name, body := range hostile {
		t.Run(name, func(t *testing.T) {
			if _, _, err := receipt.ParseEnvelope([]byte(body)); !errors.Is(err, receipt.ErrMalformed) {
				t.Errorf("ParseEnvelope = %v, want ErrMalformed", err)
			}
			if _, _, err := receipt.DecodeHeader(base64.StdEncoding.EncodeToString([]byte(body))); !errors.Is(err, receipt.ErrMalformed) {
				t.Errorf("DecodeHeader = %v, want ErrMalformed", err)
			}
		})
	}
	for name, h := range map[string]string{
		"base64url": base64.URLEncoding.EncodeToString(append(raw, '?', '?', '>')),
		"unpadded":  unpadded(t, raw),
		"oversize":  strings.Repeat("A", 1<<20),
	} {
		if _, _, err := receipt.DecodeHeader(h); !errors.Is(err, receipt.ErrMalformed) {
			t.Errorf("%s header: %v, want ErrMalformed", name, err)
		}
	}
}

// unpadded is b, with spaces appended until its base64 needs padding, in
// base64 without the padding.
func unpadded(tb testing.TB, b []byte) string {
	for range 3 {
		if e := base64.StdEncoding.EncodeToString(b); strings.HasSuffix(e, "=") {
			return strings.TrimRight(e, "=")
		}
		b = append(b, ' ')
	}
	tb.Fatal("no padding")
	return ""
}

func TestParseWellKnown(t *testing.T) {
	const signer = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
	doc := func(receipts string) string { return `{"receipts":` + receipts + `}` }
	valid := `{"signer":"` + signer + `","domain":{"name":"llm4agents","version":"1","chainId":1337}}`
	wk, err := receipt.ParseWellKnown([]byte(`{"service":"llm4agents","receipts":` + valid + `,"future":{"x":[1]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if wk.Receipts.Signer != common.HexToAddress(signer) || wk.Receipts.Domain.Name != "llm4agents" || wk.Receipts.Domain.Version != "1" || wk.Receipts.Domain.ChainID.Int64() != 1337 {
		t.Errorf("ParseWellKnown = %+v", wk.Receipts)
	}
	// The document the gateway will serve is this package's own encoding.
	b, err := json.Marshal(wk)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != doc(valid) {
		t.Errorf("encoding\n%s\nwant\n%s", got, doc(valid))
	}

	hostile := map[string]string{
		"empty":             ``,
		"not an object":     `[]`,
		"null":              `null`,
		"no receipts":       `{"signer":"` + signer + `"}`,
		"receipts null":     doc(`null`),
		"receipts array":    doc(`[]`),
		"unknown field":     doc(strings.Replace(valid, `{"signer"`, `{"x":1,"signer"`, 1)),
		"unknown domain":    doc(strings.Replace(valid, `"chainId"`, `"verifyingContract":"0x0","chainId"`, 1)),
		"duplicate signer":  doc(strings.Replace(valid, `{"signer"`, `{"signer":"0x0000000000000000000000000000000000000001","signer"`, 1)),
		"duplicate top":     `{"receipts":` + valid + `,"receipts":` + valid + `}`,
		"no signer":         doc(`{"domain":{"name":"llm4agents","version":"1","chainId":1337}}`),
		"no domain":         doc(`{"signer":"` + signer + `"}`),
		"no chainId":        doc(strings.Replace(valid, `,"chainId":1337`, ``, 1)),
		"no version":        doc(strings.Replace(valid, `"version":"1",`, ``, 1)),
		"empty name":        doc(strings.Replace(valid, `"llm4agents"`, `""`, 1)),
		"chainId string":    doc(strings.Replace(valid, `1337`, `"1337"`, 1)),
		"chainId zero":      doc(strings.Replace(valid, `1337`, `0`, 1)),
		"chainId negative":  doc(strings.Replace(valid, `1337`, `-1337`, 1)),
		"chainId float":     doc(strings.Replace(valid, `1337`, `1337.5`, 1)),
		"chainId exponent":  doc(strings.Replace(valid, `1337`, `1.337e3`, 1)),
		"chainId huge":      doc(strings.Replace(valid, `1337`, `1`+strings.Repeat("0", 100), 1)),
		"signer checksum":   doc(strings.Replace(valid, signer, "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293Bc", 1)),
		"signer zero":       doc(strings.Replace(valid, signer, "0x0000000000000000000000000000000000000000", 1)),
		"signer number":     doc(strings.Replace(valid, `"`+signer+`"`, `1`, 1)),
		"trailing data":     doc(valid) + `x`,
		"deep":              `{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"receipts":` + valid + `}`,
		"non-UTF-8 name":    doc(strings.Replace(valid, `"llm4agents"`, "\"\xff\xfe\"", 1)),
		"signer whitespace": doc(strings.Replace(valid, signer, " "+signer, 1)),
	}
	for name, body := range hostile {
		t.Run(name, func(t *testing.T) {
			if wk, err := receipt.ParseWellKnown([]byte(body)); !errors.Is(err, receipt.ErrBadWellKnown) {
				t.Errorf("ParseWellKnown = %+v, %v; want ErrBadWellKnown", wk, err)
			}
		})
	}
}

func FuzzDecodeReceiptHeader(f *testing.F) {
	d := receipt.NewDomain(big.NewInt(1337))
	r := testReceipt()
	sig := signReceipt(f, testchain.DevKey(3), d, r)
	h, err := receipt.EncodeHeader(r, sig)
	if err != nil {
		f.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(h)
	f.Add(h)
	f.Add(base64.StdEncoding.EncodeToString([]byte(strings.Replace(string(raw), `"amount":"10000"`, `"amount":10000`, 1))))
	f.Add(base64.StdEncoding.EncodeToString([]byte(`{"receipt":{},"signature":""}`)))
	f.Add("%%%")
	f.Fuzz(func(t *testing.T, v string) {
		r, sig, err := receipt.DecodeHeader(v)
		if err != nil {
			if !errors.Is(err, receipt.ErrMalformed) && !errors.Is(err, receipt.ErrMissing) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if len(sig) != 65 {
			t.Fatalf("signature of %d bytes accepted", len(sig))
		}
		_, _ = receipt.Verify(r, sig, d) // must not panic
		again, err := receipt.EncodeHeader(r, sig)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		r2, sig2, err := receipt.DecodeHeader(again)
		if err != nil || string(sig2) != string(sig) {
			t.Fatalf("round trip: %v", err)
		}
		d1, err1 := receipt.Digest(d, r)
		d2, err2 := receipt.Digest(d, r2)
		if err1 != nil || err2 != nil || d1 != d2 {
			t.Fatalf("digest changed in the round trip: %v %v", err1, err2)
		}
	})
}

func FuzzParseWellKnown(f *testing.F) {
	f.Add(`{"receipts":{"signer":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","domain":{"name":"llm4agents","version":"1","chainId":1337}}}`)
	f.Add(`{"receipts":{"signer":"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC","domain":{"name":"llm4agents","version":"1","chainId":1e3}}}`)
	f.Add(`{"receipts":null}`)
	f.Add(`[[[[`)
	f.Fuzz(func(t *testing.T, doc string) {
		wk, err := receipt.ParseWellKnown([]byte(doc))
		if err != nil {
			if !errors.Is(err, receipt.ErrBadWellKnown) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		d := wk.Receipts.Domain
		if wk.Receipts.Signer == (common.Address{}) || d.Name == "" || d.Version == "" || d.ChainID == nil || d.ChainID.Sign() <= 0 {
			t.Fatalf("accepted %+v", wk.Receipts)
		}
		if _, err := receipt.Digest(d, testReceipt()); err != nil {
			t.Fatalf("accepted domain does not hash: %v", err)
		}
	})
}
