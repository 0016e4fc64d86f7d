package exact

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/internal/codecache"
)

// Chain is what verification needs from a node. *ethclient.Client and
// simulated.Client satisfy it.
type Chain interface {
	ethereum.ContractCaller
	CodeAt(ctx context.Context, account common.Address, blockNumber *big.Int) ([]byte, error)
}

// Timing constants of the facilitator's time window. BlockBuffer is the official
// facilitators' rule; FreshnessSlack is ours.
const (
	// BlockBuffer is how long before validBefore an authorization stops being
	// accepted, so that it cannot expire while its transaction waits for a block.
	BlockBuffer = 6 * time.Second
	// FreshnessSlack is how far past now + maxTimeoutSeconds a validBefore may lie
	// (clock skew between buyer and us).
	FreshnessSlack = 30 * time.Second
)

// SignatureKind says how a signature was verified and so how it is settled.
type SignatureKind int

// Signature kinds.
const (
	SignatureEOA      SignatureKind = iota + 1 // 65-byte ECDSA, settled with (v, r, s)
	SignatureContract                          // EIP-1271 at a deployed wallet, settled with bytes
)

// Verified is a payment that passed verification, parsed and ready to settle.
type Verified struct {
	Payload   *Payload
	Network   string
	Asset     common.Address
	PayTo     common.Address
	Domain    Domain
	Digest    common.Hash
	Kind      SignatureKind
	Signature []byte // what goes on chain: the inner signature of an ERC-6492 wrapper
}

// Payer returns the authorization's from address.
func (v *Verified) Payer() common.Address { return v.Payload.Authorization.From }

// Verifier checks EIP-3009 exact payments for one chain. The zero value is not
// usable; set Chain and ChainID.
type Verifier struct {
	Chain   Chain
	ChainID *big.Int
	// Caller is the from address of simulations: the facilitator's signer.
	Caller common.Address
	// Now defaults to time.Now.
	Now func() time.Time

	deployed   sync.Map // common.Address -> struct{}: assets known to have code
	separators sync.Map // domainKey -> common.Hash
	cache      reqCache
	payers     codecache.Cache
}

// domainKey identifies a Domain by value, for the separator cache.
type domainKey struct {
	name, version string
	chainID       uint64
	contract      common.Address
}

// separator returns d's domain separator, computed once per domain.
func (v *Verifier) separator(d Domain) common.Hash {
	if !d.ChainID.IsUint64() {
		return d.Separator()
	}
	k := domainKey{d.Name, d.Version, d.ChainID.Uint64(), d.VerifyingContract}
	if h, ok := v.separators.Load(k); ok {
		return h.(common.Hash)
	}
	h := d.Separator()
	v.separators.Store(k, h)
	return h
}

func (v *Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

func fail(r x402.Reason, payer string, format string, args ...any) *x402.VerifyError {
	return &x402.VerifyError{Reason: r, Payer: payer, Message: fmt.Sprintf(format, args...)}
}

// Check runs every verification step that needs no node: scheme, domain, network,
// accepted against requirements (x402.Match), payload shape, recipient, time window,
// value, and, for a 65-byte signature, ECDSA recovery. A protocol failure is a
// *x402.VerifyError.
//
// A signature that does not recover to from is not refused here: from may be a
// contract wallet, which only the node can tell. Verify decides.
func (v *Verifier) Check(p *x402.PaymentPayload, req x402.PaymentRequirements) (*Verified, bool, error) {
	accepted, err := p.AcceptedRequirements()
	if err != nil {
		return nil, false, fail(x402.ReasonInvalidPayload, "", "%v", err)
	}
	if accepted.Scheme != Scheme || req.Scheme != Scheme {
		return nil, false, fail(x402.ReasonEVMScheme, "", "scheme must be %q", Scheme)
	}
	extra, err := v.cache.extra(req.Extra)
	if err != nil {
		return nil, false, fail(x402.ReasonEVMMissingDomain, "", "%v", err)
	}
	if accepted.Network != req.Network {
		return nil, false, fail(x402.ReasonEVMNetworkMismatch, "", "accepted network %q, required %q", accepted.Network, req.Network)
	}
	chainID, err := v.cache.chainID(req.Network)
	if err != nil || (v.ChainID != nil && chainID.Cmp(v.ChainID) != 0) {
		return nil, false, fail(x402.ReasonEVMNetworkMismatch, "", "network %q is not served here", req.Network)
	}
	if err := x402.Match(req, accepted); err != nil {
		return nil, false, fail(x402.ReasonAcceptedMismatch, "", "%v", err)
	}
	asset, err := v.cache.address(req.Asset)
	if err != nil {
		return nil, false, fail(x402.ReasonInvalidRequirements, "", "asset: %v", err)
	}
	payTo, err := v.cache.address(req.PayTo)
	if err != nil {
		return nil, false, fail(x402.ReasonInvalidRequirements, "", "payTo: %v", err)
	}
	amount, err := ParseUint256(req.Amount)
	if err != nil {
		return nil, false, fail(x402.ReasonInvalidRequirements, "", "amount: %v", err)
	}
	pl, err := ParsePayload(p.Payload)
	if err != nil {
		return nil, false, fail(x402.ReasonEVMPayload, "", "%v", err)
	}
	a := &pl.Authorization
	if len(pl.Signature) == 0 {
		return nil, false, fail(x402.ReasonEVMMissingSignature, a.From.Hex(), "signature is empty")
	}
	vd := &Verified{
		Payload: pl, Network: req.Network, Asset: asset, PayTo: payTo,
		Domain: Domain{Name: extra.Name, Version: extra.Version, ChainID: chainID, VerifyingContract: asset},
	}
	vd.Digest = digestWith(v.separator(vd.Domain), a)

	// The payer's address string is built only when a check fails.
	if a.To != payTo {
		return nil, false, fail(x402.ReasonEVMRecipientMismatch, a.From.Hex(), "authorization.to %s is not payTo %s", a.To.Hex(), payTo.Hex())
	}
	now := v.now().Unix()
	if cmpInt64(a.ValidBefore, now+int64(BlockBuffer/time.Second)) < 0 {
		return nil, false, fail(x402.ReasonEVMValidBefore, a.From.Hex(), "validBefore %s is less than %ds away", a.ValidBefore, int64(BlockBuffer/time.Second))
	}
	// maxTimeoutSeconds comes from the requirements and may be hostile: add in
	// big.Int only when the int64 sum could overflow.
	slack := int64(FreshnessSlack / time.Second)
	tooFar := false
	if req.MaxTimeoutSeconds < math.MaxInt64/4 {
		tooFar = cmpInt64(a.ValidBefore, now+req.MaxTimeoutSeconds+slack) > 0
	} else {
		limit := new(big.Int).SetInt64(now)
		limit.Add(limit, big.NewInt(req.MaxTimeoutSeconds)).Add(limit, big.NewInt(slack))
		tooFar = a.ValidBefore.Cmp(limit) > 0
	}
	if tooFar {
		return nil, false, fail(x402.ReasonEVMValidBeforeTooFar, a.From.Hex(), "validBefore %s is later than now + maxTimeoutSeconds + %ds", a.ValidBefore, slack)
	}
	if cmpInt64(a.ValidAfter, now) > 0 {
		return nil, false, fail(x402.ReasonEVMValidAfter, a.From.Hex(), "validAfter %s is in the future", a.ValidAfter)
	}
	if a.Value.Cmp(amount) != 0 {
		return nil, false, fail(x402.ReasonEVMValueMismatch, a.From.Hex(), "value %s is not the required %s", a.Value, amount)
	}
	if len(pl.Signature) == 65 {
		signer, err := recoverEOA(vd.Digest, pl.Signature)
		if err == nil && signer == a.From {
			vd.Kind, vd.Signature = SignatureEOA, normalizeV(pl.Signature)
			return vd, true, nil
		}
	}
	return vd, false, nil
}

// Verify runs Check and then the node checks: signature by EIP-1271 when from has
// code, the asset deployed, and a simulation of the transfer whose failure is
// diagnosed into the official reasons (balance, authorization state, domain).
// A protocol failure is a *x402.VerifyError; any other error means no verdict.
func (v *Verifier) Verify(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*Verified, error) {
	vd, recovered, err := v.Check(p, req)
	if err != nil {
		return nil, err
	}
	if err := v.verifySignature(ctx, vd, recovered); err != nil {
		return nil, err
	}
	if err := v.checkAsset(ctx, vd); err != nil {
		return nil, err
	}
	if err := v.Simulate(ctx, vd); err != nil {
		return nil, err
	}
	return vd, nil
}

// VerifyForSettle finishes, for a payment that passed Check, what Verify does
// except the simulation, for a caller about to send the transfer: the sender
// runs it on the node before sending it anyway (chain.Sender), and a revert
// there is diagnosed with Simulate. It still reads authorizationState, so an
// authorization already used on chain is refused before anything is sent.
// recovered is Check's second result; vd is completed in place.
func (v *Verifier) VerifyForSettle(ctx context.Context, vd *Verified, recovered bool) error {
	if err := v.verifySignature(ctx, vd, recovered); err != nil {
		return err
	}
	if err := v.checkAsset(ctx, vd); err != nil {
		return err
	}
	a := &vd.Payload.Authorization
	used, err := AuthorizationState(ctx, v.Chain, vd.Asset, a.From, a.Nonce)
	if err != nil {
		if IsRevert(err) {
			return fail(x402.ReasonEVMEIP3009NotSupported, a.From.Hex(), "authorizationState reverted")
		}
		return err
	}
	if used {
		return fail(x402.ReasonEVMNonceAlreadyUsed, a.From.Hex(), "authorization is used or canceled")
	}
	return nil
}

func (v *Verifier) verifySignature(ctx context.Context, vd *Verified, recovered bool) error {
	a := &vd.Payload.Authorization
	payer := a.From.Hex()
	sig := vd.Payload.Signature
	inner, wrapped, werr := unwrap6492(sig)
	// A payer seen without code moments ago is not asked again (codecache):
	// the simulation that follows every verification, or the sender's run of
	// the transfer, runs the token's own signature check. A counterfactual
	// wallet's signature is always judged on fresh code: its wallet may just
	// have been deployed.
	var code []byte
	var err error
	if wrapped || werr != nil {
		code, err = v.Chain.CodeAt(ctx, a.From, nil)
	} else {
		code, err = v.payers.CodeAt(ctx, v.Chain, a.From)
	}
	if err != nil {
		return fmt.Errorf("read code at payer: %w", err)
	}
	if len(code) == 0 {
		switch {
		case wrapped || werr != nil:
			return fail(x402.ReasonEVMCounterfactualWallet, payer, "ERC-6492 signature for a wallet that is not deployed")
		case recovered:
			return nil
		default:
			return fail(x402.ReasonEVMSignature, payer, "signature does not recover to from")
		}
	}
	if werr != nil {
		return fail(x402.ReasonEVMSignature, payer, "malformed ERC-6492 wrapper: %v", werr)
	}
	if wrapped {
		sig = inner
	}
	ok, err := v.isValidSignature(ctx, a.From, vd.Digest, sig)
	if err != nil {
		return err
	}
	if !ok {
		return fail(x402.ReasonEVMSignature, payer, "EIP-1271 wallet refused the signature")
	}
	vd.Kind, vd.Signature = SignatureContract, sig
	return nil
}

func (v *Verifier) isValidSignature(ctx context.Context, wallet common.Address, digest common.Hash, sig []byte) (bool, error) {
	data, err := parsedABI.Pack("isValidSignature", digest, sig)
	if err != nil {
		return false, fmt.Errorf("pack isValidSignature: %w", err)
	}
	out, err := v.Chain.CallContract(ctx, ethereum.CallMsg{To: &wallet, Data: data}, nil)
	if err != nil {
		if revertData(err) != nil {
			return false, nil // the wallet reverted: not a valid signature
		}
		return false, fmt.Errorf("call isValidSignature: %w", err)
	}
	return len(out) >= 4 && bytes.Equal(out[:4], eip1271Magic[:]), nil
}

func (v *Verifier) checkAsset(ctx context.Context, vd *Verified) error {
	if _, ok := v.deployed.Load(vd.Asset); ok {
		return nil
	}
	code, err := v.Chain.CodeAt(ctx, vd.Asset, nil)
	if err != nil {
		return fmt.Errorf("read code at asset: %w", err)
	}
	if len(code) == 0 {
		return fail(x402.ReasonAssetNotDeployed, vd.Payer().Hex(), "no contract at %s", vd.Asset.Hex())
	}
	v.deployed.Store(vd.Asset, struct{}{})
	return nil
}

// Simulate runs the transfer with eth_call and, when it reverts, diagnoses why.
func (v *Verifier) Simulate(ctx context.Context, vd *Verified) error {
	data, err := TransferCalldata(vd)
	if err != nil {
		return err
	}
	_, err = v.Chain.CallContract(ctx, ethereum.CallMsg{From: v.Caller, To: &vd.Asset, Data: data}, nil)
	if err == nil {
		return nil
	}
	rd := revertData(err)
	if rd == nil {
		return fmt.Errorf("simulate transfer: %w", err)
	}
	return v.diagnose(ctx, vd, RevertReason(rd))
}

// diagnose maps a failed simulation to the official reasons, in the official
// precedence: authorization state, token name, token version, balance.
//
// A settlement mined between a read of authorizationState and the simulation
// makes the simulation fail while the earlier read said unused (and may leave
// the payer short of the amount it just paid): so before blaming anything
// else, the authorization state is read once more, after the simulation, and
// an authorization now used is reported as such, as the official facilitator
// reports it.
func (v *Verifier) diagnose(ctx context.Context, vd *Verified, revert string) error {
	err := v.diagnoseState(ctx, vd, revert)
	if verr, ok := errors.AsType[*x402.VerifyError](err); !ok || verr.Reason == x402.ReasonEVMNonceAlreadyUsed ||
		verr.Reason == x402.ReasonEVMEIP3009NotSupported {
		return err
	}
	a := &vd.Payload.Authorization
	if used, rerr := AuthorizationState(ctx, v.Chain, vd.Asset, a.From, a.Nonce); rerr == nil && used {
		return fail(x402.ReasonEVMNonceAlreadyUsed, a.From.Hex(), "%s (the authorization was used meanwhile)", revert)
	}
	return err
}

func (v *Verifier) diagnoseState(ctx context.Context, vd *Verified, revert string) error {
	a := &vd.Payload.Authorization
	payer := a.From.Hex()
	used, err := AuthorizationState(ctx, v.Chain, vd.Asset, a.From, a.Nonce)
	if err != nil {
		if revertData(err) != nil {
			return fail(x402.ReasonEVMEIP3009NotSupported, payer, "authorizationState reverted")
		}
		return fmt.Errorf("diagnose: %w", err)
	}
	if used {
		return fail(x402.ReasonEVMNonceAlreadyUsed, payer, "%s", revert)
	}
	// A call that reverts or answers garbage (a token without name() or
	// version()) skips its check; a node that fails gives no verdict at all.
	name, err := v.callString(ctx, vd.Asset, "name")
	if err != nil && !skippable(err) {
		return fmt.Errorf("diagnose: %w", err)
	}
	if err == nil && name != vd.Domain.Name {
		return fail(x402.ReasonEVMTokenNameMismatch, payer, "token name is %q, extra.name is %q", name, vd.Domain.Name)
	}
	ver, err := v.callString(ctx, vd.Asset, "version")
	if err != nil && !skippable(err) {
		return fmt.Errorf("diagnose: %w", err)
	}
	if err == nil && ver != vd.Domain.Version {
		return fail(x402.ReasonEVMTokenVersionMismatch, payer, "token version is %q, extra.version is %q", ver, vd.Domain.Version)
	}
	bal, err := BalanceOf(ctx, v.Chain, vd.Asset, a.From)
	if err != nil && !skippable(err) {
		return fmt.Errorf("diagnose: %w", err)
	}
	if err == nil && bal.Cmp(a.Value) < 0 {
		return fail(x402.ReasonEVMInsufficientBalance, payer, "balance %s is less than %s", bal, a.Value)
	}
	return fail(x402.ReasonEVMSimulationFailed, payer, "%s", revert)
}

func (v *Verifier) callString(ctx context.Context, token common.Address, method string) (string, error) {
	data, err := parsedABI.Pack(method)
	if err != nil {
		return "", err
	}
	out, err := v.Chain.CallContract(ctx, ethereum.CallMsg{To: &token, Data: data}, nil)
	if err != nil {
		return "", err
	}
	vals, err := parsedABI.Unpack(method, out)
	if err != nil || len(vals) != 1 {
		return "", fmt.Errorf("%w: %s", errBadReturn, method)
	}
	s, _ := vals[0].(string)
	return s, nil
}

// AuthorizationState reads token.authorizationState(from, nonce): true once the
// authorization was used or canceled.
func AuthorizationState(ctx context.Context, c ethereum.ContractCaller, token, from common.Address, nonce common.Hash) (bool, error) {
	data, err := parsedABI.Pack("authorizationState", from, nonce)
	if err != nil {
		return false, fmt.Errorf("pack authorizationState: %w", err)
	}
	out, err := c.CallContract(ctx, ethereum.CallMsg{To: &token, Data: data}, nil)
	if err != nil {
		return false, fmt.Errorf("call authorizationState: %w", err)
	}
	vals, err := parsedABI.Unpack("authorizationState", out)
	if err != nil {
		return false, fmt.Errorf("unpack authorizationState: %w", err)
	}
	if len(vals) != 1 {
		return false, fmt.Errorf("unpack authorizationState: %d values, want 1", len(vals))
	}
	used, _ := vals[0].(bool)
	return used, nil
}

// BalanceOf reads token.balanceOf(account).
func BalanceOf(ctx context.Context, c ethereum.ContractCaller, token, account common.Address) (*big.Int, error) {
	data, err := parsedABI.Pack("balanceOf", account)
	if err != nil {
		return nil, fmt.Errorf("pack balanceOf: %w", err)
	}
	out, err := c.CallContract(ctx, ethereum.CallMsg{To: &token, Data: data}, nil)
	if err != nil {
		return nil, fmt.Errorf("call balanceOf: %w", err)
	}
	vals, err := parsedABI.Unpack("balanceOf", out)
	if err != nil || len(vals) != 1 {
		return nil, fmt.Errorf("%w: balanceOf", errBadReturn)
	}
	b, _ := vals[0].(*big.Int)
	return b, nil
}

// TransferCalldata returns the calldata of transferWithAuthorization for a
// verified payment: the (v, r, s) overload for an EOA signature, the bytes
// overload otherwise.
func TransferCalldata(vd *Verified) ([]byte, error) {
	a := &vd.Payload.Authorization
	if vd.Kind == SignatureEOA {
		sig := vd.Signature
		var r, s [32]byte
		copy(r[:], sig[:32])
		copy(s[:], sig[32:64])
		data, err := parsedABI.Pack("transferWithAuthorization", a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, [32]byte(a.Nonce), sig[64], r, s)
		if err != nil {
			return nil, fmt.Errorf("pack transferWithAuthorization: %w", err)
		}
		return data, nil
	}
	data, err := parsedABI.Pack("transferWithAuthorization0", a.From, a.To, a.Value, a.ValidAfter, a.ValidBefore, [32]byte(a.Nonce), vd.Signature)
	if err != nil {
		return nil, fmt.Errorf("pack transferWithAuthorization: %w", err)
	}
	copy(data[:4], selectorTransferBytes)
	return data, nil
}

// secp256k1HalfN is half the curve order as a 32-byte big-endian number.
var secp256k1HalfN = new(big.Int).Rsh(crypto.S256().Params().N, 1).FillBytes(make([]byte, 32))

// recoverEOA recovers the signer of a 65-byte signature with v in {0, 1, 27, 28},
// refusing high s as USDC's ECRecover does.
func recoverEOA(digest common.Hash, sig []byte) (common.Address, error) {
	if len(sig) != 65 {
		return common.Address{}, errors.New("signature is not 65 bytes")
	}
	v := sig[64]
	if v >= 27 {
		v -= 27
	}
	if v > 1 {
		return common.Address{}, errors.New("signature v is not 0, 1, 27 or 28")
	}
	if bytes.Compare(sig[32:64], secp256k1HalfN) > 0 {
		return common.Address{}, errors.New("signature s is high")
	}
	var rsv [65]byte
	copy(rsv[:], sig)
	rsv[64] = v
	pub, err := crypto.Ecrecover(digest[:], rsv[:]) // 65-byte uncompressed key
	if err != nil {
		return common.Address{}, err
	}
	h := keccak256(pub[1:])
	return common.BytesToAddress(h[12:]), nil
}

// normalizeV returns a 65-byte signature with v in {27, 28} (sig itself when it
// already is, else a copy), the only
// form the token's (v, r, s) overload accepts.
func normalizeV(sig []byte) []byte {
	out := sig
	if sig[64] < 27 {
		out = append([]byte(nil), sig...)
		out[64] += 27
	}
	return out
}

// unwrap6492 returns the inner signature of an ERC-6492 wrapper
// abi.encode(address factory, bytes factoryCalldata, bytes innerSig) ‖ magic.
func unwrap6492(sig []byte) (inner []byte, wrapped bool, err error) {
	if len(sig) < 32 || !bytes.Equal(sig[len(sig)-32:], eip6492Suffix) {
		return nil, false, nil
	}
	args := abi.Arguments{{Type: mustType("address")}, {Type: mustType("bytes")}, {Type: mustType("bytes")}}
	vals, err := args.Unpack(sig[:len(sig)-32])
	if err != nil {
		return nil, true, fmt.Errorf("decode ERC-6492 wrapper: %w", err)
	}
	if len(vals) != 3 {
		return nil, true, fmt.Errorf("decode ERC-6492 wrapper: %d values, want 3", len(vals))
	}
	inner, _ = vals[2].([]byte)
	return inner, true, nil
}

func mustType(t string) abi.Type {
	ty, err := abi.NewType(t, "", nil)
	if err != nil {
		panic(err)
	}
	return ty
}

// revertData returns the revert payload carried by an eth_call or gas estimation
// error, or nil when the error is not a revert (a node that is down, a timeout).
func revertData(err error) []byte {
	var de interface{ ErrorData() any }
	if !errors.As(err, &de) {
		return nil
	}
	switch d := de.ErrorData().(type) {
	case string:
		b, derr := hexutil.Decode(d)
		if derr != nil {
			return []byte{}
		}
		return b
	case []byte:
		return d
	default:
		return []byte{}
	}
}

// IsRevert reports whether err is an execution revert rather than a transport or
// node failure.
func IsRevert(err error) bool { return revertData(err) != nil }

// RevertReason decodes an Error(string) revert payload; other payloads are shown
// as hex.
func RevertReason(data []byte) string {
	if len(data) == 0 {
		return "execution reverted"
	}
	if s, err := abi.UnpackRevert(data); err == nil {
		return s
	}
	return "execution reverted: " + hexutil.Encode(data)
}

// RevertReasonOf is RevertReason for an error; "" when err is not a revert.
func RevertReasonOf(err error) string {
	d := revertData(err)
	if d == nil {
		return ""
	}
	return RevertReason(d)
}

// errBadReturn marks a call that succeeded with a return value that does not
// decode: the contract is not what the check expected, the node is fine.
var errBadReturn = errors.New("contract returned an undecodable value")

// skippable reports whether a diagnosis call failed because of the contract
// (a revert, a bad return value) rather than the node.
func skippable(err error) bool { return IsRevert(err) || errors.Is(err, errBadReturn) }

// ReasonForRevert maps a token's revert message to the official reason, as the
// official facilitator does when a transaction or its gas estimation reverts.
func ReasonForRevert(msg string) x402.Reason {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "expired"):
		return x402.ReasonEVMValidBefore
	case strings.Contains(m, "not yet valid"):
		return x402.ReasonEVMValidAfter
	case strings.Contains(m, "used or canceled"), strings.Contains(m, "already used"):
		return x402.ReasonEVMNonceAlreadyUsed
	case strings.Contains(m, "exceeds balance"):
		return x402.ReasonEVMInsufficientBalance
	case strings.Contains(m, "invalid signature"):
		return x402.ReasonEVMSignature
	default:
		return x402.ReasonEVMTransactionFailed
	}
}
