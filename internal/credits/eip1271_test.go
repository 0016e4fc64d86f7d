package credits

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/internal/testchain"
)

// Hand-assembled runtime code of contracts that misbehave as wallets.
var (
	// revertCode reverts on any call, with no data: PUSH0 PUSH0 REVERT.
	revertCode = []byte{0x5f, 0x5f, 0xfd}
	// echoCode returns its calldata: CALLDATASIZE PUSH0 PUSH0 CALLDATACOPY
	// CALLDATASIZE PUSH0 RETURN. Asked isValidSignature, it answers a word
	// that starts with the magic value, as a proxy's fallback might.
	echoCode = []byte{0x36, 0x5f, 0x5f, 0x37, 0x36, 0x5f, 0xf3}
)

// deployKey sends the deployments of deployRuntime: not Keys[0], which the
// chain's own helpers send from.
const deployKey = 8

// deployRuntime deploys a contract whose runtime code is code (under 256
// bytes) and returns its address.
func deployRuntime(tb testing.TB, s *testchain.Simulated, code []byte) common.Address {
	tb.Helper()
	n := byte(len(code))
	// CODECOPY the runtime that follows this 10-byte prefix to memory 0,
	// then RETURN it: PUSH1 n PUSH1 10 PUSH0 CODECOPY PUSH1 n PUSH0 RETURN.
	initCode := append([]byte{0x60, n, 0x60, 10, 0x5f, 0x39, 0x60, n, 0x5f, 0xf3}, code...)
	addr, tx, _, err := bind.DeployContract(s.Transactor(tb, deployKey), abi.ABI{}, initCode, s.Client)
	if err != nil {
		tb.Fatalf("deploy: %v", err)
	}
	if r := s.Mine(tb, tx); r.Status != types.ReceiptStatusSuccessful {
		tb.Fatal("deploy reverted")
	}
	return addr
}

// contractMessage returns a valid sign-in message for address on the
// simulated chain, with nonce.
func contractMessage(address common.Address, nonce string) string {
	return (&Message{
		Scheme: "https", Domain: testHost, Address: address,
		Statement: "Sign in to read your llm4agents receipts.", URI: testOrigin + "/", Version: "1",
		ChainID: testchain.SimulatedChainID, Nonce: nonce, IssuedAt: t0,
	}).String()
}

// newChainAuth returns an Auth on a fresh store for the simulated chain's
// id, asking contracts (nil: none).
func newChainAuth(t *testing.T, logs *logBuffer, contracts ContractSigs) *Auth {
	t.Helper()
	clk := &testClock{now: t0}
	a, err := NewAuth(openStore(t, clk), testOrigin, testchain.SimulatedChainID, logs.logger())
	if err != nil {
		t.Fatal(err)
	}
	a.Now = clk.Now
	a.Contracts = contracts
	return a
}

// TestSignInContractWallet: sign-ins for contract wallets, and for things
// that look like them, on a real chain with a real EIP-1271 wallet.
func TestSignInContractWallet(t *testing.T) {
	s := testchain.NewSimulated(t)
	owner, stranger := s.Keys[2], s.Keys[3]
	wallet := s.DeployWallet(t, s.Addr(2))
	reverter := deployRuntime(t, s, revertCode)
	echo := deployRuntime(t, s, echoCode)
	noCode := common.HexToAddress("0x00000000000000000000000000000000C0FFEE01")

	sign := func(k *ecdsa.PrivateKey) func(*testing.T, string) []byte {
		return func(t *testing.T, text string) []byte { return personalSign(t, k, text) }
	}
	tests := []struct {
		name     string
		address  common.Address
		sign     func(t *testing.T, text string) []byte
		noChecks bool   // Auth.Contracts nil
		want     Reason // "": signed in
	}{
		{name: "wallet, signed by its owner", address: wallet, sign: sign(owner)},
		{name: "externally owned account, with contract checks on", address: s.Addr(2), sign: sign(owner)},
		{name: "wallet, signed by another key", address: wallet, sign: sign(stranger), want: ReasonSignature},
		{name: "wallet, signed by its owner without the EIP-191 prefix", address: wallet, sign: func(t *testing.T, text string) []byte {
			sig, err := crypto.Sign(crypto.Keccak256([]byte(text)), owner)
			if err != nil {
				t.Fatal(err)
			}
			sig[64] += 27
			return sig
		}, want: ReasonSignature},
		{name: "wallet, no contract checks", address: wallet, sign: sign(owner), noChecks: true, want: ReasonSignature},
		{name: "wallet, longest signature", address: wallet, sign: func(*testing.T, string) []byte { return make([]byte, maxSignatureBytes) }, want: ReasonSignature},
		{name: "wallet, signature too long", address: wallet, sign: func(*testing.T, string) []byte { return make([]byte, maxSignatureBytes+1) }, want: ReasonMalformed},
		{name: "wallet, empty signature", address: wallet, sign: func(*testing.T, string) []byte { return nil }, want: ReasonSignature},
		{name: "contract that reverts", address: reverter, sign: sign(owner), want: ReasonSignature},
		{name: "contract without isValidSignature", address: s.Token, sign: sign(owner), want: ReasonSignature},
		{name: "contract echoing its calldata", address: echo, sign: sign(owner), want: ReasonSignature},
		{name: "no code", address: noCode, sign: sign(owner), want: ReasonSignature},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logs := &logBuffer{}
			var contracts ContractSigs = NewEIP1271(s.Client)
			if tc.noChecks {
				contracts = nil
			}
			a := newChainAuth(t, logs, contracts)
			ctx := t.Context()
			nonce, _, err := a.IssueNonce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			text := contractMessage(tc.address, nonce)
			sig := tc.sign(t, text)
			token, sess, err := a.SignIn(ctx, text, sig)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("SignIn() = %v", err)
				}
				if want := strings.ToLower(tc.address.Hex()); sess.Owner != want || !strings.HasPrefix(token, SessionPrefix) {
					t.Errorf("SignIn() session of %q, want %q", sess.Owner, want)
				}
				if _, _, err := a.SignIn(ctx, text, sig); reason(err) != ReasonNonce {
					t.Errorf("SignIn() replayed = %v, want %s", err, ReasonNonce)
				}
				return
			}
			if got := reason(err); got != tc.want || token != "" {
				t.Fatalf("SignIn() = %q, %v, want reason %s", token, err, tc.want)
			}
			assertNoSecret(t, "error", err.Error(), text, fmt.Sprintf("%x", sig), nonce)
			assertNoSecret(t, "log", logs.String(), text, nonce)
			// A refused sign-in does not burn the nonce: the wallet's owner
			// signs in with it now.
			a.Contracts = NewEIP1271(s.Client)
			good := contractMessage(wallet, nonce)
			if _, _, err := a.SignIn(ctx, good, personalSign(t, owner, good)); err != nil {
				t.Errorf("SignIn() with the nonce after a refusal: %v", err)
			}
		})
	}
}

// callerFunc is a chain whose eth_call is a function, for the faults a
// real chain does not make on demand.
type callerFunc func(ctx context.Context) ([]byte, error)

func (f callerFunc) CallContract(ctx context.Context, _ ethereum.CallMsg, _ *big.Int) ([]byte, error) {
	return f(ctx)
}

// revertError is a node's answer to a call that reverted with no data.
type revertError struct{}

func (revertError) Error() string  { return "execution reverted" }
func (revertError) ErrorData() any { return "0x" }

// TestSignInContractChainFaults: a chain that cannot be asked is an error,
// not a refusal, and does not burn the nonce; a revert is a refusal.
func TestSignInContractChainFaults(t *testing.T) {
	errDown := errors.New("connection refused")
	wallet := common.HexToAddress("0x00000000000000000000000000000000C0FFEE02")
	tests := []struct {
		name    string
		call    callerFunc
		wantErr error  // nil: a refusal
		want    Reason // with wantErr nil
	}{
		{name: "node down", call: func(context.Context) ([]byte, error) { return nil, errDown }, wantErr: errDown},
		{name: "reverts", call: func(context.Context) ([]byte, error) { return nil, revertError{} }, want: ReasonSignature},
		{name: "short answer", call: func(context.Context) ([]byte, error) { return eip1271Magic[:], nil }, want: ReasonSignature},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newChainAuth(t, &logBuffer{}, NewEIP1271(tc.call))
			ctx := t.Context()
			nonce, _, err := a.IssueNonce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			text := contractMessage(wallet, nonce)
			_, _, err = a.SignIn(ctx, text, personalSign(t, newWallet(t), text))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || reason(err) != "" {
					t.Fatalf("SignIn() = %v, want an error wrapping %v and no refusal", err, tc.wantErr)
				}
			} else if got := reason(err); got != tc.want {
				t.Fatalf("SignIn() = %v, want reason %s", err, tc.want)
			}
			// The nonce is still good.
			a.Contracts = NewEIP1271(callerFunc(func(context.Context) ([]byte, error) { return magicWord(), nil }))
			if _, _, err := a.SignIn(ctx, text, personalSign(t, newWallet(t), text)); err != nil {
				t.Errorf("SignIn() with the nonce after a fault: %v", err)
			}
		})
	}
}

// TestSignInContractTimeout: a node that never answers holds a sign-in for
// contractCheckTimeout, then fails it with an error, not a refusal.
func TestSignInContractTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// No store: the chain is asked before the nonce is.
		a, err := NewAuth(nil, testOrigin, testchain.SimulatedChainID, nil)
		if err != nil {
			t.Fatal(err)
		}
		a.Now = func() time.Time { return t0 }
		a.Contracts = NewEIP1271(callerFunc(func(ctx context.Context) ([]byte, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}))
		text := contractMessage(common.HexToAddress("0x00000000000000000000000000000000C0FFEE03"), "abcdefgh12345678")
		start := time.Now()
		_, _, err = a.SignIn(t.Context(), text, make([]byte, 65))
		if !errors.Is(err, context.DeadlineExceeded) || reason(err) != "" {
			t.Errorf("SignIn() = %v, want a deadline error and no refusal", err)
		}
		if waited := time.Since(start); waited != contractCheckTimeout {
			t.Errorf("SignIn() waited %v, want %v", waited, contractCheckTimeout)
		}
	})
}

// magicWord is a wallet's answer that it signed.
func magicWord() []byte {
	w := make([]byte, 32)
	copy(w, eip1271Magic[:])
	return w
}

// TestIsValidSignatureCall: the hand-made calldata is what go-ethereum's
// ABI encoder makes, for signatures of every padding.
func TestIsValidSignatureCall(t *testing.T) {
	parsed, err := abi.JSON(strings.NewReader(`[{"type":"function","name":"isValidSignature","stateMutability":"view",
		"inputs":[{"name":"hash","type":"bytes32"},{"name":"signature","type":"bytes"}],"outputs":[{"name":"","type":"bytes4"}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	hash := common.HexToHash("0x0102030405060708091011121314151617181920212223242526272829303132")
	for _, n := range []int{0, 1, 31, 32, 33, 65, maxSignatureBytes} {
		sig := make([]byte, n)
		for i := range sig {
			sig[i] = byte(i + 1)
		}
		want, err := parsed.Pack("isValidSignature", hash, sig)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, isValidSignatureCall(hash, sig)); diff != "" {
			t.Errorf("isValidSignatureCall(%d bytes) (-abi +ours):\n%s", n, diff)
		}
	}
}

// TestVerifyContractSignatureLength: the verify route takes signatures of
// any length up to maxSignatureBytes, with the longest message, and hands
// them to SignIn.
func TestVerifyContractSignatureLength(t *testing.T) {
	srv := newServer(t)
	longest := strings.Repeat(`\n`, MaxMessageBytes) // each newline JSON-escaped
	tests := []struct {
		name, message string
		sigBytes      int
		status        int
		code          string
	}{
		{"longest", longest, maxSignatureBytes, http.StatusBadRequest, "invalid_sign_in_message"},
		{"EOA length", "x", 65, http.StatusBadRequest, "invalid_sign_in_message"},
		{"one byte", "x", 1, http.StatusBadRequest, "invalid_sign_in_message"},
		{"empty", "x", 0, http.StatusBadRequest, "invalid_signature"},
		{"too long", "x", maxSignatureBytes + 1, http.StatusBadRequest, "invalid_signature"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"message":"%s","signature":"0x%s"}`, tc.message, strings.Repeat("ab", tc.sigBytes))
			status, _, got := srv.do(http.MethodPost, PathVerify, "application/json", body, nil)
			if status != tc.status || !strings.Contains(got, `"code":"`+tc.code+`"`) {
				t.Errorf("POST %s: %d %s, want %d %s", PathVerify, status, got, tc.status, tc.code)
			}
		})
	}
}
