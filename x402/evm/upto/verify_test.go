package upto_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

const (
	payerIdx = 5 // dev account that pays
	chainID  = 1337
	maxAmt   = 5_000_000
	timeout  = 60
)

var (
	checkNow = time.Unix(1_800_000_000, 0)
	// facilitator is the address the verifier settles from; otherFacilitator is
	// a second one it also holds; stranger is neither.
	facilitator      = common.HexToAddress(vFacilitator)
	otherFacilitator = testchain.DevAddress(4)
	stranger         = testchain.DevAddress(6)
	// exactProxy is the exact scheme's Permit2 proxy: a valid spender, but not ours.
	exactProxy = common.HexToAddress("0x402085c248EeA27D92E8b30b2C58ed07f9E20001")
)

// fixture is one payment under construction: what the facilitator is asked to
// check (req), what the client echoes (accepted), and what it signed. Each
// field holds the valid default; a test case changes one thing.
type fixture struct {
	req      x402.PaymentRequirements
	accepted x402.PaymentRequirements
	auth     upto.Authorization
	key      *ecdsa.PrivateKey
	chainID  int64 // of the domain the client signs over

	sig  func(sig []byte) []byte // edits the signature sent
	body func(s string) string   // edits the JSON text of payload
}

func newFixture() *fixture {
	key := testchain.DevKey(payerIdx)
	return &fixture{
		req:      offer,
		accepted: offer,
		auth: upto.Authorization{
			From:      crypto.PubkeyToAddress(key.PublicKey),
			Permitted: upto.TokenPermissions{Token: common.HexToAddress(vToken), Amount: big.NewInt(maxAmt)},
			Spender:   upto.ProxyAddress,
			Nonce:     big.NewInt(42),
			Deadline:  big.NewInt(checkNow.Unix() + timeout),
			Witness:   upto.Witness{To: common.HexToAddress(vPayTo), Facilitator: facilitator, ValidAfter: big.NewInt(0)},
		},
		key:     key,
		chainID: chainID,
	}
}

// both applies edit to the requirements and to the client's echo of them.
func (f *fixture) both(edit func(r *x402.PaymentRequirements)) {
	edit(&f.req)
	edit(&f.accepted)
}

func (f *fixture) payload(tb testing.TB) *x402.PaymentPayload {
	tb.Helper()
	sig, err := exact.NewKeySigner(f.key).SignDigest(context.Background(), upto.Digest(big.NewInt(f.chainID), &f.auth))
	if err != nil {
		tb.Fatal(err)
	}
	if f.sig != nil {
		sig = f.sig(sig)
	}
	body := string(mustJSON(tb, (&upto.Payload{Authorization: f.auth, Signature: sig}).JSON()))
	if f.body != nil {
		body = f.body(body)
	}
	return &x402.PaymentPayload{X402Version: 2, Accepted: mustJSON(tb, f.accepted), Payload: json.RawMessage(body)}
}

func newVerifier(c upto.Chain) *upto.Verifier {
	return &upto.Verifier{
		Chain: c, ChainID: big.NewInt(chainID),
		Facilitators: []common.Address{otherFacilitator, facilitator},
		Now:          func() time.Time { return checkNow },
	}
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// reasonOf returns the reason of a verdict, "" for nil, and fails the test for
// an error that is no verdict.
func reasonOf(tb testing.TB, err error) x402.Reason {
	tb.Helper()
	if err == nil {
		return ""
	}
	ve, ok := errors.AsType[*x402.VerifyError](err)
	if !ok {
		tb.Fatalf("error %v is not a *x402.VerifyError", err)
	}
	return ve.Reason
}

// checkCases are the node-free faults, each triggering exactly one reason.
var checkCases = []struct {
	name string
	edit func(f *fixture)
	want x402.Reason // "" when Check passes
	// recovered is Check's second result when it passes.
	recovered bool
}{
	{"valid", func(f *fixture) {}, "", true},
	{"lowercase addresses on the wire", func(f *fixture) {
		f.body = func(s string) string { return hexAddress.ReplaceAllStringFunc(s, strings.ToLower) }
	}, "", true},
	{"hex nonce on the wire", func(f *fixture) {
		f.body = func(s string) string { return strings.Replace(s, `"nonce":"42"`, `"nonce":"0x2a"`, 1) }
	}, "", true},
	{"v 0 or 1", func(f *fixture) { f.sig = func(s []byte) []byte { s[64] -= 27; return s } }, "", true},
	{"deadline exactly 6 s away", func(f *fixture) { f.auth.Deadline = big.NewInt(checkNow.Unix() + 6) }, "", true},
	{"deadline exactly at the freshness limit", func(f *fixture) { f.auth.Deadline = big.NewInt(checkNow.Unix() + timeout + 30) }, "", true},
	{"validAfter now", func(f *fixture) { f.auth.Witness.ValidAfter = big.NewInt(checkNow.Unix()) }, "", true},
	{"witness names our other facilitator", func(f *fixture) { f.auth.Witness.Facilitator = otherFacilitator }, "", true},
	{"client added a key to extra", func(f *fixture) {
		f.accepted.Extra = json.RawMessage(`{"facilitatorAddress":"` + vFacilitator + `","mine":1}`)
	}, "", true},
	// Signatures that do not recover: only the node can tell a wallet's.
	{"signed by another key", func(f *fixture) { f.key = testchain.DevKey(6) }, "", false},
	{"signed for another chain", func(f *fixture) { f.chainID = 8453 }, "", false},
	{"high s", func(f *fixture) { f.sig = malleate }, "", false},
	{"64-byte signature", func(f *fixture) { f.sig = func(s []byte) []byte { return s[:64] } }, "", false},

	{"accepted not JSON", func(f *fixture) {}, x402.ReasonInvalidPayload, false}, // edited in the test
	{"payload without permit2Authorization", func(f *fixture) { f.body = func(string) string { return `{"signature":"0x01"}` } }, x402.ReasonUnsupportedPayloadType, false},
	{"EIP-3009 payload", func(f *fixture) {
		f.body = func(string) string { return `{"signature":"0x01","authorization":{}}` }
	}, x402.ReasonUnsupportedPayloadType, false},
	{"payload amount not a string", func(f *fixture) {
		f.body = func(s string) string { return strings.Replace(s, `"amount":"5000000"`, `"amount":5000000`, 1) }
	}, x402.ReasonUnsupportedPayloadType, false},
	{"payload bad checksum", func(f *fixture) {
		f.body = func(s string) string { return strings.Replace(s, `"from":"0x9965507D`, `"from":"0x9965507d`, 1) }
	}, x402.ReasonInvalidPayload, false},
	{"payload amount above uint256", func(f *fixture) {
		f.body = func(s string) string {
			return strings.Replace(s, `"amount":"5000000"`, `"amount":"115792089237316195423570985008687907853269984665640564039457584007913129639936"`, 1)
		}
	}, x402.ReasonInvalidPayload, false},
	{"accepted exact scheme", func(f *fixture) { f.accepted.Scheme = "exact" }, x402.ReasonUptoScheme, false},
	{"requirements exact scheme", func(f *fixture) { f.both(func(r *x402.PaymentRequirements) { r.Scheme = "exact" }) }, x402.ReasonUptoScheme, false},
	{"accepted other network", func(f *fixture) { f.accepted.Network = "eip155:8453" }, x402.ReasonUptoNetworkMismatch, false},
	{"network not served here", func(f *fixture) { f.both(func(r *x402.PaymentRequirements) { r.Network = "eip155:8453" }) }, x402.ReasonUptoNetworkMismatch, false},
	{"network not eip155", func(f *fixture) { f.both(func(r *x402.PaymentRequirements) { r.Network = "solana:x" }) }, x402.ReasonUptoNetworkMismatch, false},
	{"accepted other amount", func(f *fixture) { f.accepted.Amount = "1" }, x402.ReasonUptoAcceptedMismatch, false},
	{"accepted other payTo", func(f *fixture) { f.accepted.PayTo = stranger.Hex() }, x402.ReasonUptoAcceptedMismatch, false},
	{"accepted without facilitatorAddress", func(f *fixture) { f.accepted.Extra = json.RawMessage(`{}`) }, x402.ReasonUptoAcceptedMismatch, false},
	{"requirements asset not an address", func(f *fixture) { f.both(func(r *x402.PaymentRequirements) { r.Asset = "USDC" }) }, x402.ReasonInvalidRequirements, false},
	{"requirements amount not decimal", func(f *fixture) { f.both(func(r *x402.PaymentRequirements) { r.Amount = "5e6" }) }, x402.ReasonInvalidRequirements, false},
	{"spender the exact proxy", func(f *fixture) { f.auth.Spender = exactProxy }, x402.ReasonPermit2Spender, false},
	{"spender the facilitator", func(f *fixture) { f.auth.Spender = facilitator }, x402.ReasonPermit2Spender, false},
	{"witness.to another", func(f *fixture) { f.auth.Witness.To = stranger }, x402.ReasonPermit2RecipientMismatch, false},
	{"witness.facilitator another", func(f *fixture) { f.auth.Witness.Facilitator = stranger }, x402.ReasonUptoFacilitatorMismatch, false},
	{"deadline 5 s away", func(f *fixture) { f.auth.Deadline = big.NewInt(checkNow.Unix() + 5) }, x402.ReasonPermit2DeadlineExpired, false},
	{"deadline passed", func(f *fixture) { f.auth.Deadline = big.NewInt(checkNow.Unix() - 1) }, x402.ReasonPermit2DeadlineExpired, false},
	{"deadline zero", func(f *fixture) { f.auth.Deadline = big.NewInt(0) }, x402.ReasonPermit2DeadlineExpired, false},
	{"deadline past the freshness limit", func(f *fixture) { f.auth.Deadline = big.NewInt(checkNow.Unix() + timeout + 31) }, x402.ReasonUptoDeadlineTooFar, false},
	{"deadline max uint256", func(f *fixture) {
		f.auth.Deadline = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	}, x402.ReasonUptoDeadlineTooFar, false},
	{"validAfter in a second", func(f *fixture) { f.auth.Witness.ValidAfter = big.NewInt(checkNow.Unix() + 1) }, x402.ReasonPermit2NotYetValid, false},
	{"validAfter huge", func(f *fixture) { f.auth.Witness.ValidAfter = new(big.Int).Lsh(big.NewInt(1), 200) }, x402.ReasonPermit2NotYetValid, false},
	{"permitted less than the amount", func(f *fixture) { f.auth.Permitted.Amount = big.NewInt(maxAmt - 1) }, x402.ReasonPermit2AmountMismatch, false},
	{"permitted more than the amount", func(f *fixture) { f.auth.Permitted.Amount = big.NewInt(maxAmt + 1) }, x402.ReasonPermit2AmountMismatch, false},
	{"permitted another token", func(f *fixture) { f.auth.Permitted.Token = stranger }, x402.ReasonPermit2TokenMismatch, false},
	{"empty signature", func(f *fixture) { f.sig = func([]byte) []byte { return nil } }, x402.ReasonPermit2Signature, false},

	// Two faults: the first in the official order wins.
	{"scheme and spender", func(f *fixture) { f.accepted.Scheme = "exact"; f.auth.Spender = exactProxy }, x402.ReasonUptoScheme, false},
	{"network and recipient", func(f *fixture) { f.accepted.Network = "eip155:1"; f.auth.Witness.To = stranger }, x402.ReasonUptoNetworkMismatch, false},
	{"spender and recipient", func(f *fixture) { f.auth.Spender = exactProxy; f.auth.Witness.To = stranger }, x402.ReasonPermit2Spender, false},
	{"recipient and facilitator", func(f *fixture) { f.auth.Witness.To = stranger; f.auth.Witness.Facilitator = stranger }, x402.ReasonPermit2RecipientMismatch, false},
	{"facilitator and deadline", func(f *fixture) { f.auth.Witness.Facilitator = stranger; f.auth.Deadline = big.NewInt(0) }, x402.ReasonUptoFacilitatorMismatch, false},
	{"deadline and validAfter", func(f *fixture) {
		f.auth.Deadline = big.NewInt(0)
		f.auth.Witness.ValidAfter = big.NewInt(checkNow.Unix() + 1)
	}, x402.ReasonPermit2DeadlineExpired, false},
	{"validAfter and amount", func(f *fixture) {
		f.auth.Witness.ValidAfter = big.NewInt(checkNow.Unix() + 1)
		f.auth.Permitted.Amount = big.NewInt(1)
	}, x402.ReasonPermit2NotYetValid, false},
	{"amount and token", func(f *fixture) { f.auth.Permitted.Amount = big.NewInt(1); f.auth.Permitted.Token = stranger }, x402.ReasonPermit2AmountMismatch, false},
	{"token and signature", func(f *fixture) { f.auth.Permitted.Token = stranger; f.sig = func([]byte) []byte { return nil } }, x402.ReasonPermit2TokenMismatch, false},
}

func TestCheck(t *testing.T) {
	v := newVerifier(nil)
	for _, tc := range checkCases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			tc.edit(f)
			p := f.payload(t)
			if tc.name == "accepted not JSON" {
				p.Accepted = json.RawMessage(`{`)
			}
			vd, recovered, err := v.Check(p, f.req)
			if got := reasonOf(t, err); got != tc.want {
				t.Fatalf("Check reason = %q (%v), want %q", got, err, tc.want)
			}
			if err != nil {
				if vd != nil || recovered {
					t.Errorf("Check returned %+v, %v with an error", vd, recovered)
				}
				// Errors never carry the signature.
				var w upto.PayloadJSON
				_ = json.Unmarshal(p.Payload, &w)
				if len(w.Signature) > 10 && strings.Contains(err.Error(), w.Signature[2:]) {
					t.Errorf("error %q quotes the signature", err)
				}
				return
			}
			if recovered != tc.recovered {
				t.Errorf("recovered = %v, want %v", recovered, tc.recovered)
			}
			if vd.Amount.Cmp(big.NewInt(maxAmt)) != 0 || vd.Network != offer.Network || vd.PayTo != common.HexToAddress(vPayTo) {
				t.Errorf("Verified = %+v", vd)
			}
			if vd.Digest != upto.Digest(big.NewInt(chainID), &vd.Payload.Authorization) {
				t.Errorf("digest is not the authorization's")
			}
		})
	}
}

// TestCheckPayerInVerdicts: a verdict reached after the payload parsed names
// the payer, as the official facilitator's does.
func TestCheckPayerInVerdicts(t *testing.T) {
	f := newFixture()
	f.auth.Witness.To = stranger
	_, _, err := newVerifier(nil).Check(f.payload(t), f.req)
	ve, ok := errors.AsType[*x402.VerifyError](err)
	if !ok || ve.Payer != f.auth.From.Hex() {
		t.Errorf("verdict %+v, want payer %s", err, f.auth.From.Hex())
	}
}

func TestCheckSettle(t *testing.T) {
	tests := []struct {
		name   string
		charge string
		edit   func(f *fixture)
		want   x402.Reason
	}{
		{"the full amount", "5000000", nil, ""},
		{"less", "1234567", nil, ""},
		{"one unit", "1", nil, ""},
		{"zero", "0", nil, ""},
		{"one unit more", "5000001", nil, x402.ReasonUptoSettlementExceedsAmount},
		{"far more", "115792089237316195423570985008687907853269984665640564039457584007913129639935", nil, x402.ReasonUptoSettlementExceedsAmount},
		{"not a number", "lots", nil, x402.ReasonInvalidRequirements},
		{"negative", "-1", nil, x402.ReasonInvalidRequirements},
		// The payment is verified first, against the permit's own amount.
		{"more, and a bad recipient", "5000001", func(f *fixture) { f.auth.Witness.To = stranger }, x402.ReasonPermit2RecipientMismatch},
		{"less, and expired", "1", func(f *fixture) { f.auth.Deadline = big.NewInt(0) }, x402.ReasonPermit2DeadlineExpired},
		{"less, and the echo is not the offer", "1", func(f *fixture) { f.accepted.Amount = "4000000" }, x402.ReasonUptoAcceptedMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			if tc.edit != nil {
				tc.edit(f)
			}
			p := f.payload(t)
			req := f.req
			req.Amount = tc.charge
			vd, recovered, err := newVerifier(nil).CheckSettle(p, req)
			if got := reasonOf(t, err); got != tc.want {
				t.Fatalf("CheckSettle reason = %q (%v), want %q", got, err, tc.want)
			}
			if err != nil {
				return
			}
			if !recovered || vd.Amount.String() != tc.charge {
				t.Errorf("CheckSettle: recovered %v, amount %s; want %s", recovered, vd.Amount, tc.charge)
			}
			if vd.Payload.Authorization.Permitted.Amount.Int64() != maxAmt {
				t.Errorf("permitted amount changed to %s", vd.Payload.Authorization.Permitted.Amount)
			}
		})
	}
	// At verify time the amount must equal the permit's: a lower requirement
	// is a mismatch there, not a charge.
	f := newFixture()
	f.both(func(r *x402.PaymentRequirements) { r.Amount = "1" })
	if _, _, err := newVerifier(nil).Check(f.payload(t), f.req); reasonOf(t, err) != x402.ReasonPermit2AmountMismatch {
		t.Errorf("Check with a lower amount: %v", err)
	}
}

// malleate turns a signature into its high-s twin, which recovers to the same
// key.
func malleate(sig []byte) []byte {
	n := crypto.S256().Params().N
	s := new(big.Int).SetBytes(sig[32:64])
	out := append([]byte(nil), sig...)
	new(big.Int).Sub(n, s).FillBytes(out[32:64])
	out[64] ^= 1 // 27 <-> 28
	return out
}

// revertError is what go-ethereum's RPC client returns for a reverted
// eth_call: an error carrying the revert data.
type revertError struct{ data string }

func (e revertError) Error() string  { return "execution reverted" }
func (e revertError) ErrorData() any { return e.data }

// fakeChain is a node for the Verify tests: code by address, and eth_call
// answers by method.
type fakeChain struct {
	code  map[common.Address][]byte
	calls map[string]func(msg ethereum.CallMsg, args []any) ([]byte, error)
	log   []ethereum.CallMsg
}

var contracts = upto.ContractsABIForTest()

func (c *fakeChain) CodeAt(_ context.Context, a common.Address, _ *big.Int) ([]byte, error) {
	if c.code == nil {
		return nil, errors.New("node down")
	}
	return c.code[a], nil
}

func (c *fakeChain) CallContract(_ context.Context, msg ethereum.CallMsg, _ *big.Int) ([]byte, error) {
	c.log = append(c.log, msg)
	m, err := contracts.MethodById(msg.Data)
	if err != nil {
		return nil, fmt.Errorf("unknown method %x", msg.Data[:4])
	}
	args, err := m.Inputs.Unpack(msg.Data[4:])
	if err != nil {
		return nil, err
	}
	if h, ok := c.calls[m.Name]; ok {
		return h(msg, args)
	}
	return nil, revertError{"0x"}
}

func uint256(n int64) func(ethereum.CallMsg, []any) ([]byte, error) {
	return func(ethereum.CallMsg, []any) ([]byte, error) {
		return common.LeftPadBytes(big.NewInt(n).Bytes(), 32), nil
	}
}

func reverts(data string) func(ethereum.CallMsg, []any) ([]byte, error) {
	return func(ethereum.CallMsg, []any) ([]byte, error) { return nil, revertError{data} }
}

// healthyChain is a node where the payment goes through: the token and the
// proxy deployed, the payer an EOA with balance and allowance, settle
// succeeding.
func healthyChain() *fakeChain {
	code := []byte{0x60, 0x00}
	return &fakeChain{
		code: map[common.Address][]byte{common.HexToAddress(vToken): code, upto.ProxyAddress: code, upto.Permit2Address: code},
		calls: map[string]func(ethereum.CallMsg, []any) ([]byte, error){
			"settle": func(ethereum.CallMsg, []any) ([]byte, error) { return nil, nil },
			"PERMIT2": func(ethereum.CallMsg, []any) ([]byte, error) {
				return common.LeftPadBytes(upto.Permit2Address[:], 32), nil
			},
			"balanceOf":   uint256(maxAmt),
			"allowance":   uint256(maxAmt),
			"nonceBitmap": uint256(0),
		},
	}
}

var hexAddress = regexp.MustCompile(`0x[0-9a-fA-F]{40}\b`)

var selector = func(sig string) string { return hexutil.Encode(crypto.Keccak256([]byte(sig))[:4]) }

func TestVerify(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(f *fixture)
		chain func(c *fakeChain)
		want  x402.Reason
		kind  exact.SignatureKind
	}{
		{"valid", nil, nil, "", exact.SignatureEOA},
		{"asset not deployed", nil, func(c *fakeChain) { delete(c.code, common.HexToAddress(vToken)) }, x402.ReasonAssetNotDeployed, 0},
		{"asset not deployed and a bad signature", func(f *fixture) { f.key = testchain.DevKey(6) },
			func(c *fakeChain) { delete(c.code, common.HexToAddress(vToken)) }, x402.ReasonAssetNotDeployed, 0},
		{"bad signature", func(f *fixture) { f.key = testchain.DevKey(6) }, nil, x402.ReasonPermit2Signature, 0},
		{"high s", func(f *fixture) { f.sig = malleate }, nil, x402.ReasonPermit2Signature, 0},
		{"wallet accepts", func(f *fixture) { f.key = testchain.DevKey(6) }, func(c *fakeChain) {
			c.code[testchain.DevAddress(payerIdx)] = []byte{1}
			c.calls["isValidSignature"] = func(ethereum.CallMsg, []any) ([]byte, error) {
				return common.RightPadBytes([]byte{0x16, 0x26, 0xba, 0x7e}, 32), nil
			}
		}, "", exact.SignatureContract},
		{"wallet refuses", nil, func(c *fakeChain) {
			c.code[testchain.DevAddress(payerIdx)] = []byte{1}
			c.calls["isValidSignature"] = uint256(0)
		}, x402.ReasonPermit2Signature, 0},
		{"wallet reverts", nil, func(c *fakeChain) { c.code[testchain.DevAddress(payerIdx)] = []byte{1} }, x402.ReasonPermit2Signature, 0},
		{"proxy not deployed", nil, func(c *fakeChain) { delete(c.code, upto.ProxyAddress) }, x402.ReasonPermit2ProxyNotDeployed, 0},
		{"simulation fails, proxy without PERMIT2()", nil, func(c *fakeChain) {
			c.calls["settle"] = reverts("0x")
			c.calls["PERMIT2"] = reverts("0x")
		}, x402.ReasonPermit2ProxyNotDeployed, 0},
		{"simulation fails, balance short", nil, func(c *fakeChain) {
			c.calls["settle"] = reverts("0x")
			c.calls["balanceOf"] = uint256(maxAmt - 1)
			c.calls["allowance"] = uint256(0)
		}, x402.ReasonPermit2InsufficientBalance, 0},
		{"simulation fails, allowance short", nil, func(c *fakeChain) {
			c.calls["settle"] = reverts("0x")
			c.calls["allowance"] = uint256(maxAmt - 1)
		}, x402.ReasonPermit2AllowanceRequired, 0},
		{"simulation fails, balance unreadable, allowance short", nil, func(c *fakeChain) {
			c.calls["settle"] = reverts("0x")
			c.calls["balanceOf"] = reverts("0x")
			c.calls["allowance"] = uint256(0)
		}, x402.ReasonPermit2AllowanceRequired, 0},
		{"simulation fails, nonce used", nil, func(c *fakeChain) {
			c.calls["settle"] = reverts(selector("InvalidNonce()"))
			c.calls["nonceBitmap"] = func(_ ethereum.CallMsg, args []any) ([]byte, error) {
				if args[0].(common.Address) != testchain.DevAddress(payerIdx) || args[1].(*big.Int).Sign() != 0 {
					return nil, errors.New("wrong nonceBitmap arguments")
				}
				return common.LeftPadBytes(new(big.Int).Lsh(big.NewInt(1), 42).Bytes(), 32), nil // bit 42: nonce 42
			}
		}, x402.ReasonPermit2InvalidNonce, 0},
		{"simulation fails, another nonce of the word used", nil, func(c *fakeChain) {
			c.calls["settle"] = reverts("0x")
			c.calls["nonceBitmap"] = uint256(1 << 41)
		}, x402.ReasonPermit2SimulationFailed, 0},
		{"simulation fails, nothing to blame", nil, func(c *fakeChain) { c.calls["settle"] = reverts(selector("UnauthorizedFacilitator()")) },
			x402.ReasonPermit2SimulationFailed, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			if tc.edit != nil {
				tc.edit(f)
			}
			c := healthyChain()
			if tc.chain != nil {
				tc.chain(c)
			}
			vd, err := newVerifier(c).Verify(context.Background(), f.payload(t), f.req)
			if got := reasonOf(t, err); got != tc.want {
				t.Fatalf("Verify reason = %q (%v), want %q", got, err, tc.want)
			}
			if err != nil {
				return
			}
			if vd.Kind != tc.kind {
				t.Errorf("kind = %v, want %v", vd.Kind, tc.kind)
			}
			// The simulation: settle for the full amount, from the witness's
			// facilitator, to the proxy.
			var sim *ethereum.CallMsg
			for i := range c.log {
				if bytes.HasPrefix(c.log[i].Data, contracts.Methods["settle"].ID) {
					sim = &c.log[i]
				}
			}
			if sim == nil {
				t.Fatal("no settle simulation")
			}
			want, err := upto.SettleCalldata(&vd.Payload.Authorization, vd.Signature, big.NewInt(maxAmt))
			if err != nil {
				t.Fatal(err)
			}
			if sim.From != facilitator || *sim.To != upto.ProxyAddress || !bytes.Equal(sim.Data, want) {
				t.Errorf("simulation from %s to %s, calldata as SettleCalldata: %v", sim.From.Hex(), sim.To.Hex(), bytes.Equal(sim.Data, want))
			}
		})
	}
}

// TestVerifyNoVerdict: a node that fails gives an error that is not a verdict.
func TestVerifyNoVerdict(t *testing.T) {
	nodeDown := func(ethereum.CallMsg, []any) ([]byte, error) { return nil, errors.New("connection refused") }
	tests := []struct {
		name  string
		chain func(c *fakeChain)
	}{
		{"getCode", func(c *fakeChain) { c.code = nil }},
		{"simulation", func(c *fakeChain) { c.calls["settle"] = nodeDown }},
		{"PERMIT2 in diagnosis", func(c *fakeChain) { c.calls["settle"] = reverts("0x"); c.calls["PERMIT2"] = nodeDown }},
		{"balance in diagnosis", func(c *fakeChain) { c.calls["settle"] = reverts("0x"); c.calls["balanceOf"] = nodeDown }},
		{"allowance in diagnosis", func(c *fakeChain) { c.calls["settle"] = reverts("0x"); c.calls["allowance"] = nodeDown }},
		{"nonce in diagnosis", func(c *fakeChain) { c.calls["settle"] = reverts("0x"); c.calls["nonceBitmap"] = nodeDown }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture()
			c := healthyChain()
			tc.chain(c)
			_, err := newVerifier(c).Verify(context.Background(), f.payload(t), f.req)
			if err == nil {
				t.Fatal("Verify passed")
			}
			if _, ok := errors.AsType[*x402.VerifyError](err); ok {
				t.Errorf("Verify gave the verdict %v for a node failure", err)
			}
		})
	}
}

// TestVerifySettle: the settle phase simulates the permit's full amount, as
// the official facilitator does, and reports the charge.
func TestVerifySettle(t *testing.T) {
	f := newFixture()
	f.sig = func(s []byte) []byte { s[64] -= 27; return s } // v 0 or 1: Permit2's ecrecover wants 27 or 28
	c := healthyChain()
	req := f.req
	req.Amount = "1234"
	vd, err := newVerifier(c).VerifySettle(context.Background(), f.payload(t), req)
	if err != nil {
		t.Fatalf("VerifySettle: %v", err)
	}
	if vd.Amount.Int64() != 1234 {
		t.Errorf("amount %s, want the charge 1234", vd.Amount)
	}
	if v := vd.Signature[64]; v != 27 && v != 28 {
		t.Errorf("on-chain signature has v %d", v)
	}
	if vd.Payload.Signature[64] > 1 {
		t.Errorf("the payload's signature was changed")
	}
	want, err := upto.SettleCalldata(&vd.Payload.Authorization, vd.Signature, big.NewInt(maxAmt))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range c.log {
		found = found || bytes.Equal(m.Data, want)
	}
	if !found {
		t.Error("no simulation of settle for the full amount with the normalized signature")
	}
	req.Amount = "5000001"
	if _, err := newVerifier(healthyChain()).VerifySettle(context.Background(), f.payload(t), req); reasonOf(t, err) != x402.ReasonUptoSettlementExceedsAmount {
		t.Errorf("VerifySettle of an over-charge: %v", err)
	}
}

func TestSettleCalldata(t *testing.T) {
	f := newFixture()
	sig := bytes.Repeat([]byte{0xab}, 65)
	data, err := upto.SettleCalldata(&f.auth, sig, big.NewInt(1234))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hexutil.Encode(data[:4]), selector("settle(((address,uint256),uint256,uint256),uint256,address,(address,address,uint256),bytes)"); got != want {
		t.Errorf("selector %s, want %s", got, want)
	}
	// Decoded by an ABI of its own, written from the official one, it gives
	// back every field.
	ty := func(s string, comps []abi.ArgumentMarshaling) abi.Type {
		t, err := abi.NewType(s, "", comps)
		if err != nil {
			panic(err)
		}
		return t
	}
	args := abi.Arguments{
		{Type: ty("tuple", []abi.ArgumentMarshaling{
			{Name: "permitted", Type: "tuple", Components: []abi.ArgumentMarshaling{{Name: "token", Type: "address"}, {Name: "amount", Type: "uint256"}}},
			{Name: "nonce", Type: "uint256"}, {Name: "deadline", Type: "uint256"}})},
		{Type: ty("uint256", nil)},
		{Type: ty("address", nil)},
		{Type: ty("tuple", []abi.ArgumentMarshaling{{Name: "to", Type: "address"}, {Name: "facilitator", Type: "address"}, {Name: "validAfter", Type: "uint256"}})},
		{Type: ty("bytes", nil)},
	}
	vals, err := args.Unpack(data[4:])
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%v", vals)
	want := fmt.Sprintf("[{{%v %v} %v %v} 1234 %v {%v %v %v} %v]", f.auth.Permitted.Token, f.auth.Permitted.Amount, f.auth.Nonce, f.auth.Deadline,
		f.auth.From, f.auth.Witness.To, f.auth.Witness.Facilitator, f.auth.Witness.ValidAfter, sig)
	if got != want {
		t.Errorf("decoded settle\n got %s\nwant %s", got, want)
	}
}

func TestReasonForRevert(t *testing.T) {
	errData := func(sig string, args ...byte) []byte {
		return append(crypto.Keccak256([]byte(sig))[:4], common.LeftPadBytes(args, 32*min(len(args), 1))...)
	}
	revertString, _ := abi.Arguments{{Type: func() abi.Type { t, _ := abi.NewType("string", "", nil); return t }()}}.Pack("ERC20: transfer amount exceeds balance")
	tests := []struct {
		data []byte
		want x402.Reason
	}{
		{errData("AmountExceedsPermitted()"), x402.ReasonUptoAmountExceedsPermitted},
		{errData("UnauthorizedFacilitator()"), x402.ReasonUptoUnauthorizedFacilitator},
		{errData("InvalidDestination()"), x402.ReasonPermit2InvalidDestination},
		{errData("InvalidOwner()"), x402.ReasonPermit2InvalidOwner},
		{errData("PaymentTooEarly()"), x402.ReasonPermit2PaymentTooEarly},
		{errData("Permit2612AmountMismatch()"), x402.ReasonPermit2612AmountMismatch},
		{errData("InvalidAmount(uint256)", 5), x402.ReasonPermit2InvalidAmount},
		{errData("InvalidNonce()"), x402.ReasonPermit2InvalidNonce},
		{errData("SignatureExpired(uint256)", 9), x402.ReasonPermit2Signature},
		{errData("InvalidSigner()"), x402.ReasonPermit2Signature},
		{errData("InvalidSignature()"), x402.ReasonPermit2Signature},
		{errData("InvalidSignatureLength()"), x402.ReasonPermit2Signature},
		{errData("InvalidContractSignature()"), x402.ReasonPermit2Signature},
		{append(crypto.Keccak256([]byte("Error(string)"))[:4], revertString...), x402.ReasonUptoTransactionFailed},
		{nil, x402.ReasonUptoTransactionFailed},
		{[]byte{1, 2}, x402.ReasonUptoTransactionFailed},
	}
	for _, tc := range tests {
		if got := upto.ReasonForRevert(tc.data); got != tc.want {
			t.Errorf("ReasonForRevert(%x) = %q, want %q", tc.data, got, tc.want)
		}
	}
	if got := upto.RevertName(append(crypto.Keccak256([]byte("Error(string)"))[:4], revertString...)); got != "ERC20: transfer amount exceeds balance" {
		t.Errorf("RevertName(Error(string)) = %q", got)
	}
}
