package contracts_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/common/math"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/testchain"
)

// Roles of the simulated chain's dev accounts in these tests.
const (
	payerIdx       = 1 // holds tokens, approves Permit2
	otherPayerIdx  = 2 // holds tokens, for tests that change the payer's state
	facilitatorIdx = 3
	strangerIdx    = 6 // holds no tokens, signs and calls what it should not
	payToIdx       = 7
)

// maxPermit is what every payment authorizes: 5 tokens at 6 decimals.
const maxPermit = 5_000_000

// uptoTypes are the EIP-712 types the official x402 upto client signs.
var uptoTypes = apitypes.Types{
	"EIP712Domain": {
		{Name: "name", Type: "string"},
		{Name: "chainId", Type: "uint256"},
		{Name: "verifyingContract", Type: "address"},
	},
	"PermitWitnessTransferFrom": {
		{Name: "permitted", Type: "TokenPermissions"},
		{Name: "spender", Type: "address"},
		{Name: "nonce", Type: "uint256"},
		{Name: "deadline", Type: "uint256"},
		{Name: "witness", Type: "Witness"},
	},
	"TokenPermissions": {
		{Name: "token", Type: "address"},
		{Name: "amount", Type: "uint256"},
	},
	"Witness": {
		{Name: "to", Type: "address"},
		{Name: "facilitator", Type: "address"},
		{Name: "validAfter", Type: "uint256"},
	},
}

// payment is one signed upto authorization and what settle takes with it.
type payment struct {
	permit  contracts.ISignatureTransferPermitTransferFrom
	owner   common.Address
	witness contracts.X402UptoPermit2ProxyWitness
	sig     []byte
}

// typedData is the EIP-712 message for p as the official client builds it,
// with the proxy as the spender.
func typedData(chainID *big.Int, p *payment) apitypes.TypedData {
	return apitypes.TypedData{
		Types:       uptoTypes,
		PrimaryType: "PermitWitnessTransferFrom",
		Domain: apitypes.TypedDataDomain{
			Name:              "Permit2",
			ChainId:           (*math.HexOrDecimal256)(chainID),
			VerifyingContract: contracts.Permit2AddressHex,
		},
		Message: apitypes.TypedDataMessage{
			"permitted": map[string]any{
				"token":  p.permit.Permitted.Token.Hex(),
				"amount": p.permit.Permitted.Amount.String(),
			},
			"spender":  contracts.UptoProxyAddressHex,
			"nonce":    p.permit.Nonce.String(),
			"deadline": p.permit.Deadline.String(),
			"witness": map[string]any{
				"to":          p.witness.To.Hex(),
				"facilitator": p.witness.Facilitator.Hex(),
				"validAfter":  p.witness.ValidAfter.String(),
			},
		},
	}
}

// digest is the EIP-712 hash the payer signs for p.
func digest(tb testing.TB, chainID *big.Int, p *payment) []byte {
	tb.Helper()
	h, _, err := apitypes.TypedDataAndHash(typedData(chainID, p))
	if err != nil {
		tb.Fatalf("EIP-712 hash: %v", err)
	}
	return h
}

// newPayment returns an authorization from Keys[payer] for maxPermit tokens
// to payTo, settled by the facilitator account, valid from 0 until an hour
// after the latest block, with a random nonce, and signed by Keys[payer].
// mutate may change it before it is signed.
func newPayment(tb testing.TB, s *testchain.Simulated, payer int, mutate func(*payment)) *payment {
	tb.Helper()
	nonce, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 256))
	if err != nil {
		tb.Fatal(err)
	}
	p := &payment{
		permit: contracts.ISignatureTransferPermitTransferFrom{
			Permitted: contracts.ISignatureTransferTokenPermissions{Token: s.Token, Amount: big.NewInt(maxPermit)},
			Nonce:     nonce,
			Deadline:  big.NewInt(s.BlockTime(tb).Add(time.Hour).Unix()),
		},
		owner: s.Addr(payer),
		witness: contracts.X402UptoPermit2ProxyWitness{
			To:          s.Addr(payToIdx),
			Facilitator: s.Addr(facilitatorIdx),
			ValidAfter:  new(big.Int),
		},
	}
	if mutate != nil {
		mutate(p)
	}
	p.sig = signDigest(tb, s.Keys[payer], digest(tb, s.ChainID, p))
	return p
}

// signDigest signs hash with key as r||s||v, v being 27 or 28 like viem's.
func signDigest(tb testing.TB, key *ecdsa.PrivateKey, hash []byte) []byte {
	tb.Helper()
	sig, err := crypto.Sign(hash, key)
	if err != nil {
		tb.Fatal(err)
	}
	sig[64] += 27
	return sig
}

// settle sends proxy.settle(p, amount) from Keys[from]. It returns the
// receipt of the mined transaction, or the name of the custom error (or the
// revert string) the call reverts with, found by gas estimation before
// anything is sent.
func settle(tb testing.TB, s *testchain.Simulated, from int, p *payment, amount int64) (*types.Receipt, string) {
	tb.Helper()
	tx, err := s.UptoProxy.Settle(s.Transactor(tb, from), p.permit, big.NewInt(amount), p.owner, p.witness, p.sig)
	if err != nil {
		return nil, revertName(tb, err)
	}
	r := s.Mine(tb, tx)
	if r.Status != types.ReceiptStatusSuccessful {
		tb.Fatalf("settle %s: estimated fine, then reverted", tx.Hash())
	}
	return r, ""
}

// errorABIs know every custom error the two contracts can revert with.
var errorABIs = []string{contracts.X402UptoPermit2ProxyMetaData.ABI, contracts.Permit2MetaData.ABI}

// revertName reads the revert data from err: "Name" for a custom error of
// Permit2 or the proxy, the reason for a revert string. It fails the test
// for an error that carries no revert data.
func revertName(tb testing.TB, err error) string {
	tb.Helper()
	var de rpc.DataError
	if !errors.As(err, &de) {
		tb.Fatalf("error without revert data: %v", err)
	}
	s, _ := de.ErrorData().(string)
	data, decodeErr := hexutil.Decode(s)
	if decodeErr != nil || len(data) < 4 {
		tb.Fatalf("revert data %q of %v", s, err)
	}
	if reason, err := abi.UnpackRevert(data); err == nil {
		return reason
	}
	for _, j := range errorABIs {
		parsed, err := abi.JSON(strings.NewReader(j))
		if err != nil {
			tb.Fatal(err)
		}
		if e, err := parsed.ErrorByID([4]byte(data[:4])); err == nil {
			return e.Name
		}
	}
	tb.Fatalf("unknown revert data %x", data)
	return ""
}

// approvePermit2 lets Permit2 move amount of Keys[i]'s tokens.
func approvePermit2(tb testing.TB, s *testchain.Simulated, i int, amount *big.Int) {
	tb.Helper()
	tx, err := s.TokenContract.Approve(s.Transactor(tb, i), contracts.Permit2Address, amount)
	if err != nil {
		tb.Fatalf("approve Permit2: %v", err)
	}
	if r := s.Mine(tb, tx); r.Status != types.ReceiptStatusSuccessful {
		tb.Fatal("approve Permit2 reverted")
	}
}

func newUptoChain(tb testing.TB) *testchain.Simulated {
	tb.Helper()
	s := testchain.NewSimulated(tb)
	approvePermit2(tb, s, payerIdx, abi.MaxUint256)
	approvePermit2(tb, s, otherPayerIdx, abi.MaxUint256)
	return s
}

// hasEvent reports whether r has a log of event name from addr.
func hasEvent(tb testing.TB, r *types.Receipt, addr common.Address, abiJSON, name string) bool {
	tb.Helper()
	parsed, err := abi.JSON(strings.NewReader(abiJSON))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range r.Logs {
		if l.Address == addr && len(l.Topics) > 0 && l.Topics[0] == parsed.Events[name].ID {
			return true
		}
	}
	return false
}

// TestUptoSettle: the facilitator settles less than the payer authorized; the
// payee receives exactly that, and the authorization cannot be used again.
func TestUptoSettle(t *testing.T) {
	s := newUptoChain(t)
	payer, payTo := s.Addr(payerIdx), s.Addr(payToIdx)
	payerBefore, payToBefore := s.BalanceOf(t, payer), s.BalanceOf(t, payTo)

	p := newPayment(t, s, payerIdx, nil)
	const actual = 1_234_567
	r, reverted := settle(t, s, facilitatorIdx, p, actual)
	if reverted != "" {
		t.Fatalf("settle reverted with %s", reverted)
	}
	if got := new(big.Int).Sub(s.BalanceOf(t, payTo), payToBefore); got.Int64() != actual {
		t.Errorf("payTo received %s, want %d", got, actual)
	}
	if got := new(big.Int).Sub(payerBefore, s.BalanceOf(t, payer)); got.Int64() != actual {
		t.Errorf("payer paid %s, want %d", got, actual)
	}
	if !hasEvent(t, r, contracts.UptoProxyAddress, contracts.X402UptoPermit2ProxyMetaData.ABI, "Settled") {
		t.Error("no Settled event from the proxy")
	}

	// The nonce's bit is set in the payer's bitmap.
	word := new(big.Int).Rsh(p.permit.Nonce, 8)
	bits, err := s.Permit2.NonceBitmap(&bind.CallOpts{Context: t.Context()}, payer, word)
	if err != nil {
		t.Fatal(err)
	}
	if bits.Bit(int(p.permit.Nonce.Uint64()&0xff)) != 1 {
		t.Errorf("nonce bit not set in word %s: %x", word, bits)
	}

	// Replaying the same authorization, even for the rest of the maximum, fails.
	if _, reverted := settle(t, s, facilitatorIdx, p, maxPermit-actual); reverted != "InvalidNonce" {
		t.Errorf("second settle: reverted %q, want InvalidNonce", reverted)
	}
	// Settling zero is allowed by the contract: the nonce is spent, nothing moves.
	if _, reverted := settle(t, s, facilitatorIdx, newPayment(t, s, payerIdx, nil), 0); reverted != "" {
		t.Errorf("settle of 0: reverted %q", reverted)
	}
}

// TestUptoSettleRefused: every guard of the proxy and of Permit2 refuses its
// case, with the custom error the official facilitator maps. Each case fails
// if its guard is taken out of the contract.
func TestUptoSettleRefused(t *testing.T) {
	s := newUptoChain(t)
	payTo := s.Addr(payToIdx)
	payToBefore := s.BalanceOf(t, payTo)
	now := s.BlockTime(t)

	tests := []struct {
		name   string
		from   int // the account calling settle
		amount int64
		pay    func(t *testing.T) *payment
		want   string
	}{
		{
			name: "caller is not the witness's facilitator", from: strangerIdx, amount: 1,
			pay:  func(t *testing.T) *payment { return newPayment(t, s, payerIdx, nil) },
			want: "UnauthorizedFacilitator",
		},
		{
			name: "facilitator changed after signing", from: strangerIdx, amount: 1,
			pay: func(t *testing.T) *payment {
				p := newPayment(t, s, payerIdx, nil)
				p.witness.Facilitator = s.Addr(strangerIdx)
				return p
			},
			want: "InvalidSigner",
		},
		{
			name: "amount above the permit", from: facilitatorIdx, amount: maxPermit + 1,
			pay:  func(t *testing.T) *payment { return newPayment(t, s, payerIdx, nil) },
			want: "AmountExceedsPermitted",
		},
		{
			name: "past the deadline", from: facilitatorIdx, amount: 1,
			pay: func(t *testing.T) *payment {
				return newPayment(t, s, payerIdx, func(p *payment) { p.permit.Deadline = big.NewInt(now.Add(-time.Minute).Unix()) })
			},
			want: "SignatureExpired",
		},
		{
			name: "validAfter in the future", from: facilitatorIdx, amount: 1,
			pay: func(t *testing.T) *payment {
				return newPayment(t, s, payerIdx, func(p *payment) { p.witness.ValidAfter = big.NewInt(now.Add(time.Hour).Unix()) })
			},
			want: "PaymentTooEarly",
		},
		{
			name: "signed by someone else", from: facilitatorIdx, amount: 1,
			pay: func(t *testing.T) *payment {
				p := newPayment(t, s, payerIdx, nil)
				p.sig = signDigest(t, s.Keys[strangerIdx], digest(t, s.ChainID, p))
				return p
			},
			want: "InvalidSigner",
		},
		{
			name: "recipient changed after signing", from: facilitatorIdx, amount: 1,
			pay: func(t *testing.T) *payment {
				p := newPayment(t, s, payerIdx, nil)
				p.witness.To = s.Addr(strangerIdx)
				return p
			},
			want: "InvalidSigner",
		},
		{
			name: "maximum raised after signing", from: facilitatorIdx, amount: maxPermit + 1,
			pay: func(t *testing.T) *payment {
				p := newPayment(t, s, payerIdx, nil)
				p.permit.Permitted.Amount = big.NewInt(maxPermit + 1)
				return p
			},
			want: "InvalidSigner",
		},
		{
			name: "signature of the wrong length", from: facilitatorIdx, amount: 1,
			pay: func(t *testing.T) *payment {
				p := newPayment(t, s, payerIdx, nil)
				p.sig = p.sig[:63]
				return p
			},
			want: "InvalidSignatureLength",
		},
		{
			name: "zero owner", from: facilitatorIdx, amount: 1,
			pay: func(t *testing.T) *payment {
				p := newPayment(t, s, payerIdx, nil)
				p.owner = common.Address{}
				return p
			},
			want: "InvalidOwner",
		},
		{
			name: "zero recipient", from: facilitatorIdx, amount: 1,
			pay: func(t *testing.T) *payment {
				return newPayment(t, s, payerIdx, func(p *payment) { p.witness.To = common.Address{} })
			},
			want: "InvalidDestination",
		},
		{
			name: "payer without the tokens", from: facilitatorIdx, amount: 1,
			pay: func(t *testing.T) *payment {
				approvePermit2(t, s, strangerIdx, abi.MaxUint256)
				return newPayment(t, s, strangerIdx, nil)
			},
			want: "TRANSFER_FROM_FAILED",
		},
		{
			name: "nonce invalidated by the payer", from: facilitatorIdx, amount: 1,
			pay: func(t *testing.T) *payment {
				p := newPayment(t, s, payerIdx, nil)
				word := new(big.Int).Rsh(p.permit.Nonce, 8)
				mask := new(big.Int).Lsh(big.NewInt(1), uint(p.permit.Nonce.Uint64()&0xff))
				tx, err := s.Permit2.InvalidateUnorderedNonces(s.Transactor(t, payerIdx), word, mask)
				if err != nil {
					t.Fatal(err)
				}
				r := s.Mine(t, tx)
				if !hasEvent(t, r, contracts.Permit2Address, contracts.Permit2MetaData.ABI, "UnorderedNonceInvalidation") {
					t.Error("no UnorderedNonceInvalidation event")
				}
				return p
			},
			want: "InvalidNonce",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, reverted := settle(t, s, tc.from, tc.pay(t), tc.amount); reverted != tc.want {
				t.Errorf("reverted %q, want %q", reverted, tc.want)
			}
		})
	}
	if got := s.BalanceOf(t, payTo); got.Cmp(payToBefore) != 0 {
		t.Errorf("payTo's balance moved from %s to %s", payToBefore, got)
	}
}

// TestUptoRevokedAllowance: once the payer takes Permit2's allowance back, a
// signed authorization can no longer be settled.
func TestUptoRevokedAllowance(t *testing.T) {
	s := newUptoChain(t)
	p := newPayment(t, s, otherPayerIdx, nil)
	approvePermit2(t, s, otherPayerIdx, new(big.Int))
	if _, reverted := settle(t, s, facilitatorIdx, p, 1); reverted != "TRANSFER_FROM_FAILED" {
		t.Errorf("reverted %q, want TRANSFER_FROM_FAILED", reverted)
	}
}

// TestPermit2SpenderBinding: the proxy is the spender the payer signed for, so
// nobody can take the signature to Permit2 directly.
func TestPermit2SpenderBinding(t *testing.T) {
	s := newUptoChain(t)
	p := newPayment(t, s, payerIdx, nil)
	witness := crypto.Keccak256Hash(
		crypto.Keccak256([]byte("Witness(address to,address facilitator,uint256 validAfter)")),
		common.LeftPadBytes(p.witness.To.Bytes(), 32),
		common.LeftPadBytes(p.witness.Facilitator.Bytes(), 32),
		common.LeftPadBytes(p.witness.ValidAfter.Bytes(), 32),
	)
	typeString, err := s.UptoProxy.WITNESSTYPESTRING(&bind.CallOpts{Context: t.Context()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Permit2.PermitWitnessTransferFrom(s.Transactor(t, facilitatorIdx),
		contracts.Permit2PermitTransferFrom{
			Permitted: contracts.Permit2TokenPermissions{Token: p.permit.Permitted.Token, Amount: p.permit.Permitted.Amount},
			Nonce:     p.permit.Nonce, Deadline: p.permit.Deadline,
		},
		contracts.Permit2SignatureTransferDetails{To: s.Addr(facilitatorIdx), RequestedAmount: big.NewInt(1)},
		p.owner, witness, typeString, p.sig)
	if err == nil {
		t.Fatal("Permit2 accepted the proxy's authorization from another spender")
	}
	if got := revertName(t, err); got != "InvalidSigner" {
		t.Errorf("reverted %q, want InvalidSigner", got)
	}
}

// TestUptoContractOwner: an EIP-1271 wallet pays through Permit2.
func TestUptoContractOwner(t *testing.T) {
	s := newUptoChain(t)
	ownerIdx := 8
	wallet := s.DeployWallet(t, s.Addr(ownerIdx))
	s.Mint(t, wallet, big.NewInt(maxPermit))
	w, err := contracts.NewERC1271Wallet(wallet, s.Client)
	if err != nil {
		t.Fatal(err)
	}
	tokenABI, err := contracts.EIP3009TokenMetaData.GetAbi()
	if err != nil {
		t.Fatal(err)
	}
	approve, err := tokenABI.Pack("approve", contracts.Permit2Address, abi.MaxUint256)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := w.Execute(s.Transactor(t, ownerIdx), s.Token, new(big.Int), approve)
	if err != nil {
		t.Fatal(err)
	}
	s.Mine(t, tx)

	p := newPayment(t, s, ownerIdx, func(p *payment) { p.owner = wallet })
	if _, reverted := settle(t, s, facilitatorIdx, p, 100); reverted != "" {
		t.Fatalf("settle from a wallet: reverted %q", reverted)
	}
	p = newPayment(t, s, strangerIdx, func(p *payment) { p.owner = wallet })
	if _, reverted := settle(t, s, facilitatorIdx, p, 100); reverted != "InvalidContractSignature" {
		t.Errorf("a stranger's signature for the wallet: reverted %q, want InvalidContractSignature", reverted)
	}
}

// TestUptoSettleWithPermit: the EIP-2612 value must equal the permit's
// maximum; a token without EIP-2612 (ours) fails the permit call, which is
// ignored, and the settlement goes through on the existing allowance.
func TestUptoSettleWithPermit(t *testing.T) {
	s := newUptoChain(t)
	p := newPayment(t, s, payerIdx, nil)
	eip2612 := contracts.X402UptoPermit2ProxyEIP2612Permit{Value: big.NewInt(maxPermit - 1), Deadline: p.permit.Deadline, V: 27}
	_, err := s.UptoProxy.SettleWithPermit(s.Transactor(t, facilitatorIdx), eip2612, p.permit, big.NewInt(10), p.owner, p.witness, p.sig)
	if err == nil || revertName(t, err) != "Permit2612AmountMismatch" {
		t.Fatalf("mismatched EIP-2612 value: %v, want Permit2612AmountMismatch", err)
	}
	eip2612.Value = big.NewInt(maxPermit)
	tx, err := s.UptoProxy.SettleWithPermit(s.Transactor(t, facilitatorIdx), eip2612, p.permit, big.NewInt(10), p.owner, p.witness, p.sig)
	if err != nil {
		t.Fatalf("settleWithPermit: %s", revertName(t, err))
	}
	r := s.Mine(t, tx)
	if r.Status != types.ReceiptStatusSuccessful || !hasEvent(t, r, contracts.UptoProxyAddress, contracts.X402UptoPermit2ProxyMetaData.ABI, "SettledWithPermit") {
		t.Errorf("settleWithPermit: status %d, want success with SettledWithPermit", r.Status)
	}
}

// TestCanonicalConstants: the domain separator, witness type and Permit2
// address the contracts report are those of the x402 spec.
func TestCanonicalConstants(t *testing.T) {
	s := testchain.NewSimulated(t)
	opts := &bind.CallOpts{Context: t.Context()}

	sep, err := s.Permit2.DOMAINSEPARATOR(opts)
	if err != nil {
		t.Fatal(err)
	}
	td := typedData(s.ChainID, &payment{
		permit:  contracts.ISignatureTransferPermitTransferFrom{Permitted: contracts.ISignatureTransferTokenPermissions{Amount: new(big.Int)}, Nonce: new(big.Int), Deadline: new(big.Int)},
		witness: contracts.X402UptoPermit2ProxyWitness{ValidAfter: new(big.Int)},
	})
	want, err := td.HashStruct("EIP712Domain", td.Domain.Map())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sep[:], want) {
		t.Errorf("DOMAIN_SEPARATOR = %x, want %x", sep, want)
	}

	typeString, err := s.UptoProxy.WITNESSTYPESTRING(opts)
	if err != nil {
		t.Fatal(err)
	}
	const wantTypeString = "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)"
	if typeString != wantTypeString {
		t.Errorf("WITNESS_TYPE_STRING = %q, want %q", typeString, wantTypeString)
	}
	// The full PermitWitnessTransferFrom type hash in the x402 upto spec.
	full := crypto.Keccak256Hash([]byte("PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline," + typeString))
	if full != common.HexToHash("0x51dff6974ad4388c499e7fcfe838d2bd767162553a144098ce20ea661d70c2ee") {
		t.Errorf("full witness type hash = %s, want the spec's", full)
	}
	if th := td.TypeHash("PermitWitnessTransferFrom"); !bytes.Equal(th, full[:]) {
		t.Errorf("EIP-712 type hash %x differs from Permit2's %s", []byte(th), full)
	}
	typeHash, err := s.UptoProxy.WITNESSTYPEHASH(opts)
	if err != nil {
		t.Fatal(err)
	}
	if typeHash != crypto.Keccak256Hash([]byte("Witness(address to,address facilitator,uint256 validAfter)")) {
		t.Errorf("WITNESS_TYPEHASH = %x", typeHash)
	}
	permit2, err := s.UptoProxy.PERMIT2(opts)
	if err != nil {
		t.Fatal(err)
	}
	if permit2 != contracts.Permit2Address {
		t.Errorf("PERMIT2 = %s, want %s", permit2, contracts.Permit2Address)
	}
}

// TestRuntimeCode: the runtime bytecode in runtime.go is exactly what the
// creation code in the bindings deploys, and what the simulated chain holds at
// the canonical addresses.
func TestRuntimeCode(t *testing.T) {
	s := testchain.NewSimulated(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	permit2, tx, _, err := contracts.DeployPermit2(s.Transactor(t, 0), s.Client)
	if err != nil {
		t.Fatal(err)
	}
	s.Mine(t, tx)
	proxy, tx, _, err := contracts.DeployX402UptoPermit2Proxy(s.Transactor(t, 0), s.Client)
	if err != nil {
		t.Fatal(err)
	}
	s.Mine(t, tx)
	for _, c := range []struct {
		name                string
		deployed, canonical common.Address
		want                string
	}{
		{"Permit2", permit2, contracts.Permit2Address, contracts.Permit2RuntimeBin},
		{"X402UptoPermit2Proxy", proxy, contracts.UptoProxyAddress, contracts.X402UptoPermit2ProxyRuntimeBin},
	} {
		for _, addr := range []common.Address{c.deployed, c.canonical} {
			code, err := s.Client.CodeAt(ctx, addr, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(code, common.FromHex(c.want)) {
				t.Errorf("%s: code at %s (%d bytes) differs from %sRuntimeBin (%d bytes)", c.name, addr, len(code), c.name, len(common.FromHex(c.want)))
			}
		}
	}
}

// TestPermit2TransferFrom: Permit2's plain permitTransferFrom, called by the
// spender the owner signed for, moves up to the signed amount, once.
func TestPermit2TransferFrom(t *testing.T) {
	s := newUptoChain(t)
	spender, to := s.Addr(facilitatorIdx), s.Addr(payToIdx)
	permit := contracts.Permit2PermitTransferFrom{
		Permitted: contracts.Permit2TokenPermissions{Token: s.Token, Amount: big.NewInt(1000)},
		Nonce:     big.NewInt(7),
		Deadline:  big.NewInt(s.BlockTime(t).Add(time.Hour).Unix()),
	}
	td := apitypes.TypedData{
		Types: apitypes.Types{
			"EIP712Domain": uptoTypes["EIP712Domain"],
			"PermitTransferFrom": {
				{Name: "permitted", Type: "TokenPermissions"},
				{Name: "spender", Type: "address"},
				{Name: "nonce", Type: "uint256"},
				{Name: "deadline", Type: "uint256"},
			},
			"TokenPermissions": uptoTypes["TokenPermissions"],
		},
		PrimaryType: "PermitTransferFrom",
		Domain: apitypes.TypedDataDomain{
			Name: "Permit2", ChainId: (*math.HexOrDecimal256)(s.ChainID), VerifyingContract: contracts.Permit2AddressHex,
		},
		Message: apitypes.TypedDataMessage{
			"permitted": map[string]any{"token": s.Token.Hex(), "amount": "1000"},
			"spender":   spender.Hex(),
			"nonce":     "7",
			"deadline":  permit.Deadline.String(),
		},
	}
	hash, _, err := apitypes.TypedDataAndHash(td)
	if err != nil {
		t.Fatal(err)
	}
	sig := signDigest(t, s.Keys[payerIdx], hash)
	transfer := func(amount int64) string {
		tx, err := s.Permit2.PermitTransferFrom(s.Transactor(t, facilitatorIdx), permit,
			contracts.Permit2SignatureTransferDetails{To: to, RequestedAmount: big.NewInt(amount)}, s.Addr(payerIdx), sig)
		if err != nil {
			return revertName(t, err)
		}
		if r := s.Mine(t, tx); r.Status != types.ReceiptStatusSuccessful {
			t.Fatal("permitTransferFrom reverted after estimating fine")
		}
		return ""
	}
	before := s.BalanceOf(t, to)
	if got := transfer(1001); got != "InvalidAmount" {
		t.Errorf("above the signed amount: reverted %q, want InvalidAmount", got)
	}
	if got := transfer(600); got != "" {
		t.Fatalf("permitTransferFrom: reverted %q", got)
	}
	if got := new(big.Int).Sub(s.BalanceOf(t, to), before); got.Int64() != 600 {
		t.Errorf("recipient received %s, want 600", got)
	}
	if got := transfer(1); got != "InvalidNonce" {
		t.Errorf("second use: reverted %q, want InvalidNonce", got)
	}
}

// TestUptoReentrancy: a token that calls settle again from inside Permit2's
// transferFrom is refused by the proxy's reentrancy guard, even with a valid
// authorization naming the token as its facilitator.
func TestUptoReentrancy(t *testing.T) {
	s := newUptoChain(t)
	addr, tx, hostile, err := contracts.DeployReentrantToken(s.Transactor(t, 0), s.Client)
	if err != nil {
		t.Fatal(err)
	}
	s.Mine(t, tx)
	for _, send := range []func() (*types.Transaction, error){
		func() (*types.Transaction, error) {
			return hostile.Mint(s.Transactor(t, 0), s.Addr(payerIdx), big.NewInt(maxPermit))
		},
		func() (*types.Transaction, error) {
			return hostile.Approve(s.Transactor(t, payerIdx), contracts.Permit2Address, abi.MaxUint256)
		},
	} {
		tx, err := send()
		if err != nil {
			t.Fatal(err)
		}
		s.Mine(t, tx)
	}
	outer := newPayment(t, s, payerIdx, func(p *payment) { p.permit.Permitted.Token = addr })
	inner := newPayment(t, s, payerIdx, func(p *payment) {
		p.permit.Permitted.Token = addr
		p.witness.Facilitator = addr // the token is the caller of the inner settle
	})
	proxyABI, err := contracts.X402UptoPermit2ProxyMetaData.GetAbi()
	if err != nil {
		t.Fatal(err)
	}
	data, err := proxyABI.Pack("settle", inner.permit, big.NewInt(1), inner.owner, inner.witness, inner.sig)
	if err != nil {
		t.Fatal(err)
	}
	if tx, err = hostile.SetReentry(s.Transactor(t, 0), contracts.UptoProxyAddress, data); err != nil {
		t.Fatal(err)
	}
	s.Mine(t, tx)

	if _, reverted := settle(t, s, facilitatorIdx, outer, 100); reverted != "" {
		t.Fatalf("outer settle: reverted %q", reverted)
	}
	opts := &bind.CallOpts{Context: t.Context()}
	ok, err := hostile.LastReentrySucceeded(opts)
	if err != nil {
		t.Fatal(err)
	}
	result, err := hostile.LastReentryResult(opts)
	if err != nil {
		t.Fatal(err)
	}
	want := proxyABI.Errors["ReentrancyGuardReentrantCall"].ID
	if ok || len(result) < 4 || !bytes.Equal(result[:4], want[:4]) {
		t.Errorf("reentrant settle: succeeded %t, result %x; want a ReentrancyGuardReentrantCall revert", ok, result)
	}
}
