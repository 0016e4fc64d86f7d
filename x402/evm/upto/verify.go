package upto

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/internal/codecache"
)

// Chain is what verification needs from a node. *ethclient.Client and
// simulated.Client satisfy it.
type Chain interface {
	ethereum.ContractCaller
	CodeAt(ctx context.Context, account common.Address, blockNumber *big.Int) ([]byte, error)
}

// Verified is a payment that passed verification, parsed and ready to settle.
type Verified struct {
	Payload *Payload
	Network string
	ChainID *big.Int
	Asset   common.Address
	PayTo   common.Address
	// Amount is what settling charges: the permit's full amount after Check
	// and Verify, the requirements' amount (the actual charge, at most the
	// permit's) after CheckSettle and VerifySettle. Zero means there is
	// nothing to send: the permit simply expires.
	Amount *big.Int
	Digest common.Hash
	Kind   exact.SignatureKind
	// Signature is what goes on chain, set by Verify: an EOA signature with v
	// in {27, 28} (Permit2's ecrecover takes no other), a wallet's as sent.
	Signature []byte
}

// Payer returns the permit's owner.
func (v *Verified) Payer() common.Address { return v.Payload.Authorization.From }

// Verifier checks upto payments for one chain. The zero value is not usable;
// set Chain (for Verify), ChainID and Facilitators.
type Verifier struct {
	Chain   Chain
	ChainID *big.Int
	// Facilitators are the addresses this facilitator settles from. Only the
	// witness's facilitator can call the proxy's settle, so a permit naming
	// any other address is refused; simulations run from the named one.
	Facilitators []common.Address
	// Now defaults to time.Now.
	Now func() time.Time

	deployed sync.Map // common.Address -> struct{}: contracts known to have code
	payers   codecache.Cache
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

// Check runs every verification step that needs no node, in the official
// facilitator's order: scheme, network, spender, recipient, facilitator,
// deadline, validAfter, amount, token; then, for a 65-byte signature, ECDSA
// recovery. Between them sit checks of our own: accepted against requirements
// (x402.Match) after the network, and a deadline no later than now +
// maxTimeoutSeconds + exact.FreshnessSlack after the deadline's expiry. Here
// requirements.amount is the authorized maximum, which the permit's amount
// must equal. A protocol failure is a *x402.VerifyError.
//
// A signature that does not recover to from is not refused here: from may be
// a contract wallet, which only the node can tell. Verify decides.
func (v *Verifier) Check(p *x402.PaymentPayload, req x402.PaymentRequirements) (*Verified, bool, error) {
	return v.check(p, req, false)
}

// CheckSettle is Check for the settle phase, where requirements.amount is the
// charge the resource server chose after serving the request. As the official
// facilitator does, it checks the payment with the amount replaced by the
// permit's, then refuses a charge above the permit's amount
// (invalid_upto_evm_payload_settlement_exceeds_amount). The result's Amount is
// the charge.
func (v *Verifier) CheckSettle(p *x402.PaymentPayload, req x402.PaymentRequirements) (*Verified, bool, error) {
	return v.check(p, req, true)
}

func (v *Verifier) check(p *x402.PaymentPayload, req x402.PaymentRequirements, settle bool) (*Verified, bool, error) {
	accepted, err := p.AcceptedRequirements()
	if err != nil {
		return nil, false, fail(x402.ReasonInvalidPayload, "", "%v", err)
	}
	// The official facilitator recognizes the payload's shape before anything
	// else; a payload that is not a permit2Authorization is not one it supports.
	w, err := scanPayload(p.Payload)
	if err != nil {
		return nil, false, fail(x402.ReasonUnsupportedPayloadType, "", "%v", err)
	}
	pl, err := w.Parse()
	if err != nil {
		return nil, false, fail(x402.ReasonInvalidPayload, "", "%v", err)
	}
	a := &pl.Authorization
	payer := a.From.Hex()

	var charge *big.Int
	if settle {
		if charge, err = exact.ParseUint256(req.Amount); err != nil {
			return nil, false, fail(x402.ReasonInvalidRequirements, payer, "amount: %v", err)
		}
		req.Amount = a.Permitted.Amount.String()
	}
	if accepted.Scheme != Scheme || req.Scheme != Scheme {
		return nil, false, fail(x402.ReasonUptoScheme, payer, "scheme must be %q", Scheme)
	}
	if accepted.Network != req.Network {
		return nil, false, fail(x402.ReasonUptoNetworkMismatch, payer, "accepted network %q, required %q", accepted.Network, req.Network)
	}
	chainID, err := exact.ChainID(req.Network)
	if err != nil || (v.ChainID != nil && chainID.Cmp(v.ChainID) != 0) {
		return nil, false, fail(x402.ReasonUptoNetworkMismatch, payer, "network %q is not served here", req.Network)
	}
	if err := x402.Match(req, accepted); err != nil {
		return nil, false, fail(x402.ReasonUptoAcceptedMismatch, payer, "%v", err)
	}
	asset, err := exact.ParseAddress(req.Asset)
	if err != nil {
		return nil, false, fail(x402.ReasonInvalidRequirements, payer, "asset: %v", err)
	}
	payTo, err := exact.ParseAddress(req.PayTo)
	if err != nil {
		return nil, false, fail(x402.ReasonInvalidRequirements, payer, "payTo: %v", err)
	}
	amount, err := exact.ParseUint256(req.Amount)
	if err != nil {
		return nil, false, fail(x402.ReasonInvalidRequirements, payer, "amount: %v", err)
	}

	if a.Spender != ProxyAddress {
		return nil, false, fail(x402.ReasonPermit2Spender, payer, "spender %s is not the upto proxy %s", a.Spender.Hex(), ProxyAddress.Hex())
	}
	if a.Witness.To != payTo {
		return nil, false, fail(x402.ReasonPermit2RecipientMismatch, payer, "witness.to %s is not payTo %s", a.Witness.To.Hex(), payTo.Hex())
	}
	if !slices.Contains(v.Facilitators, a.Witness.Facilitator) {
		return nil, false, fail(x402.ReasonUptoFacilitatorMismatch, payer, "witness.facilitator %s is not this facilitator", a.Witness.Facilitator.Hex())
	}
	now := v.now().Unix()
	buffer := int64(exact.BlockBuffer / time.Second)
	if cmpInt64(a.Deadline, now+buffer) < 0 {
		return nil, false, fail(x402.ReasonPermit2DeadlineExpired, payer, "deadline %s is less than %ds away", a.Deadline, buffer)
	}
	// maxTimeoutSeconds comes from the requirements and may be hostile: add in
	// big.Int only when the int64 sum could overflow.
	slack := int64(exact.FreshnessSlack / time.Second)
	var tooFar bool
	if req.MaxTimeoutSeconds < math.MaxInt64/4 {
		tooFar = cmpInt64(a.Deadline, now+req.MaxTimeoutSeconds+slack) > 0
	} else {
		limit := big.NewInt(now)
		limit.Add(limit, big.NewInt(req.MaxTimeoutSeconds)).Add(limit, big.NewInt(slack))
		tooFar = a.Deadline.Cmp(limit) > 0
	}
	if tooFar {
		return nil, false, fail(x402.ReasonUptoDeadlineTooFar, payer, "deadline %s is later than now + maxTimeoutSeconds + %ds", a.Deadline, slack)
	}
	if cmpInt64(a.Witness.ValidAfter, now) > 0 {
		return nil, false, fail(x402.ReasonPermit2NotYetValid, payer, "validAfter %s is in the future", a.Witness.ValidAfter)
	}
	if a.Permitted.Amount.Cmp(amount) != 0 {
		return nil, false, fail(x402.ReasonPermit2AmountMismatch, payer, "permitted amount %s is not the required %s", a.Permitted.Amount, amount)
	}
	if a.Permitted.Token != asset {
		return nil, false, fail(x402.ReasonPermit2TokenMismatch, payer, "permitted token %s is not the asset %s", a.Permitted.Token.Hex(), asset.Hex())
	}
	if len(pl.Signature) == 0 {
		return nil, false, fail(x402.ReasonPermit2Signature, payer, "signature is empty")
	}
	if settle && charge.Cmp(a.Permitted.Amount) > 0 {
		return nil, false, fail(x402.ReasonUptoSettlementExceedsAmount, payer, "charge %s is more than the permitted %s", charge, a.Permitted.Amount)
	}

	vd := &Verified{
		Payload: pl, Network: req.Network, ChainID: chainID, Asset: asset, PayTo: payTo,
		Amount: new(big.Int).Set(a.Permitted.Amount), Digest: Digest(chainID, a),
	}
	if settle {
		vd.Amount = charge
	}
	if len(pl.Signature) == 65 {
		signer, err := recoverEOA(vd.Digest, pl.Signature)
		if err == nil && signer == a.From {
			return vd, true, nil
		}
	}
	return vd, false, nil
}

// Verify runs Check and then the node checks: the asset deployed, the
// signature as Permit2 will check it (EIP-1271 when from has code, ECDSA
// otherwise), and a simulation of proxy.settle for the permit's full amount
// whose failure is diagnosed into the official reasons. A protocol failure is
// a *x402.VerifyError; any other error means no verdict.
func (v *Verifier) Verify(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*Verified, error) {
	vd, recovered, err := v.Check(p, req)
	if err != nil {
		return nil, err
	}
	return vd, v.finish(ctx, vd, recovered)
}

// VerifySettle is Verify for the settle phase (see CheckSettle). The
// simulation still charges the permit's full amount, as the official
// facilitator's does: a charge of zero sends nothing, and any other charge
// moves no more than the full amount would.
func (v *Verifier) VerifySettle(ctx context.Context, p *x402.PaymentPayload, req x402.PaymentRequirements) (*Verified, error) {
	vd, recovered, err := v.CheckSettle(p, req)
	if err != nil {
		return nil, err
	}
	return vd, v.finish(ctx, vd, recovered)
}

// VerifyForSettle finishes, for a payment that passed CheckSettle, what
// VerifySettle does except the simulation, for a caller about to send the
// settle: the asset deployed and the signature, which also fixes the bytes
// the settle carries. Nothing else is read: the sender runs the settle
// against the chain as it is before sending it (chain.Sender), so a permit
// already used (or revoked, or short of allowance) reverts there before
// anything is sent, and a caller diagnoses that revert with Simulate. recovered is CheckSettle's second
// result; vd is completed in place.
func (v *Verifier) VerifyForSettle(ctx context.Context, vd *Verified, recovered bool) error {
	if err := v.checkDeployed(ctx, vd.Asset, x402.ReasonAssetNotDeployed, vd.Payer()); err != nil {
		return err
	}
	return v.verifySignature(ctx, vd, recovered)
}

func (v *Verifier) finish(ctx context.Context, vd *Verified, recovered bool) error {
	if err := v.checkDeployed(ctx, vd.Asset, x402.ReasonAssetNotDeployed, vd.Payer()); err != nil {
		return err
	}
	if err := v.verifySignature(ctx, vd, recovered); err != nil {
		return err
	}
	return v.Simulate(ctx, vd)
}

// verifySignature checks the signature the way Permit2's SignatureVerification
// will: by EIP-1271 when the owner has code (a contract wallet, or an EOA
// delegated under EIP-7702), by ecrecover otherwise. ERC-6492 wrappers of
// wallets not yet deployed are not unwrapped, so they fail here. A payer seen
// without code moments ago is not asked again (codecache): the simulation
// that follows every verification, or the sender's run of the settle, runs
// Permit2's own check.
func (v *Verifier) verifySignature(ctx context.Context, vd *Verified, recovered bool) error {
	a := &vd.Payload.Authorization
	payer := a.From.Hex()
	code, err := v.payers.CodeAt(ctx, v.Chain, a.From)
	if err != nil {
		return fmt.Errorf("read code at payer: %w", err)
	}
	if len(code) == 0 {
		if !recovered {
			return fail(x402.ReasonPermit2Signature, payer, "signature does not recover to from")
		}
		vd.Kind, vd.Signature = exact.SignatureEOA, normalizeV(vd.Payload.Signature)
		return nil
	}
	ok, err := v.isValidSignature(ctx, a.From, vd.Digest, vd.Payload.Signature)
	if err != nil {
		return err
	}
	if !ok {
		return fail(x402.ReasonPermit2Signature, payer, "EIP-1271 wallet refused the signature")
	}
	vd.Kind, vd.Signature = exact.SignatureContract, vd.Payload.Signature
	return nil
}

func (v *Verifier) isValidSignature(ctx context.Context, wallet common.Address, digest common.Hash, sig []byte) (bool, error) {
	data, err := parsedABI.Pack("isValidSignature", digest, sig)
	if err != nil {
		return false, fmt.Errorf("pack isValidSignature: %w", err)
	}
	out, err := v.Chain.CallContract(ctx, ethereum.CallMsg{To: &wallet, Data: data}, nil)
	if err != nil {
		if RevertData(err) != nil {
			return false, nil // the wallet reverted: not a valid signature
		}
		return false, fmt.Errorf("call isValidSignature: %w", err)
	}
	return len(out) >= 4 && bytes.Equal(out[:4], eip1271Magic[:]), nil
}

// checkDeployed refuses a contract without code with reason r; a contract
// once seen with code is not asked about again.
func (v *Verifier) checkDeployed(ctx context.Context, addr common.Address, r x402.Reason, payer common.Address) error {
	if _, ok := v.deployed.Load(addr); ok {
		return nil
	}
	code, err := v.Chain.CodeAt(ctx, addr, nil)
	if err != nil {
		return fmt.Errorf("read code at %s: %w", addr.Hex(), err)
	}
	if len(code) == 0 {
		return fail(r, payer.Hex(), "no contract at %s", addr.Hex())
	}
	v.deployed.Store(addr, struct{}{})
	return nil
}

// Simulate runs proxy.settle for the permit's full amount with eth_call from
// the witness's facilitator (the only caller the proxy accepts) and, when it
// reverts, diagnoses why. The proxy's code is checked first: a call to an
// address without code succeeds, and would pass for a proxy that is not there.
func (v *Verifier) Simulate(ctx context.Context, vd *Verified) error {
	a := &vd.Payload.Authorization
	if err := v.checkDeployed(ctx, ProxyAddress, x402.ReasonPermit2ProxyNotDeployed, a.From); err != nil {
		return err
	}
	sig := vd.Signature
	if sig == nil {
		sig = vd.Payload.Signature
	}
	data, err := SettleCalldata(a, sig, a.Permitted.Amount)
	if err != nil {
		return err
	}
	to := ProxyAddress
	_, err = v.Chain.CallContract(ctx, ethereum.CallMsg{From: a.Witness.Facilitator, To: &to, Data: data}, nil)
	if err == nil {
		return nil
	}
	rd := RevertData(err)
	if rd == nil {
		return fmt.Errorf("simulate settle: %w", err)
	}
	revert := RevertName(rd)
	if revert == "" {
		revert = "execution reverted: " + hexutil.Encode(rd)
	}
	return v.diagnose(ctx, vd, revert)
}

// diagnose maps a failed simulation to the official reasons, in the official
// precedence: the proxy answers PERMIT2() (else permit2_proxy_not_deployed),
// the payer's balance, the payer's allowance to Permit2; then, our addition,
// a nonce already used (permit2_invalid_nonce, the reason the official
// facilitator gives when a settle reverts with InvalidNonce); else
// permit2_simulation_failed. A call that reverts or answers garbage skips its
// check, as a failed call of the official multicall does; a node that fails
// gives no verdict.
func (v *Verifier) diagnose(ctx context.Context, vd *Verified, revert string) error {
	a := &vd.Payload.Authorization
	payer := a.From.Hex()
	need := a.Permitted.Amount

	if _, err := v.callUint(ctx, ProxyAddress, "PERMIT2"); err != nil {
		if !skippable(err) {
			return fmt.Errorf("diagnose: %w", err)
		}
		return fail(x402.ReasonPermit2ProxyNotDeployed, payer, "proxy does not answer PERMIT2()")
	}
	bal, err := v.callUint(ctx, vd.Asset, "balanceOf", a.From)
	if err != nil && !skippable(err) {
		return fmt.Errorf("diagnose: %w", err)
	}
	if err == nil && bal.Cmp(need) < 0 {
		return fail(x402.ReasonPermit2InsufficientBalance, payer, "balance %s is less than %s", bal, need)
	}
	allowance, err := Permit2Allowance(ctx, v.Chain, vd.Asset, a.From)
	if err != nil && !skippable(err) {
		return fmt.Errorf("diagnose: %w", err)
	}
	if err == nil && allowance.Cmp(need) < 0 {
		return fail(x402.ReasonPermit2AllowanceRequired, payer, "allowance to Permit2 %s is less than %s", allowance, need)
	}
	used, err := NonceUsed(ctx, v.Chain, a.From, a.Nonce)
	if err != nil && !skippable(err) {
		return fmt.Errorf("diagnose: %w", err)
	}
	if err == nil && used {
		return fail(x402.ReasonPermit2InvalidNonce, payer, "Permit2 nonce is used or invalidated")
	}
	return fail(x402.ReasonPermit2SimulationFailed, payer, "%s", revert)
}

// callUint calls a view method returning one uint256 or address, as an
// integer.
func (v *Verifier) callUint(ctx context.Context, to common.Address, method string, args ...any) (*big.Int, error) {
	return callUint(ctx, v.Chain, to, method, args...)
}

// Permit2Allowance returns what Permit2 may move of owner's token: the
// token's ERC-20 allowance to Permit2, which every upto payment spends.
func Permit2Allowance(ctx context.Context, c ethereum.ContractCaller, token, owner common.Address) (*big.Int, error) {
	return callUint(ctx, c, token, "allowance", owner, Permit2Address)
}

func callUint(ctx context.Context, c ethereum.ContractCaller, to common.Address, method string, args ...any) (*big.Int, error) {
	data, err := parsedABI.Pack(method, args...)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", method, err)
	}
	out, err := c.CallContract(ctx, ethereum.CallMsg{To: &to, Data: data}, nil)
	if err != nil {
		return nil, fmt.Errorf("call %s: %w", method, err)
	}
	vals, err := parsedABI.Unpack(method, out)
	if err != nil || len(vals) != 1 {
		return nil, fmt.Errorf("%w: %s", errBadReturn, method)
	}
	switch x := vals[0].(type) {
	case *big.Int:
		return x, nil
	case common.Address:
		return new(big.Int).SetBytes(x[:]), nil
	default:
		return nil, fmt.Errorf("%w: %s", errBadReturn, method)
	}
}

// errBadReturn marks a call that succeeded with a return value that does not
// decode: the contract is not what the check expected (or there is none), the
// node is fine.
var errBadReturn = errors.New("contract returned an undecodable value")

// skippable reports whether a diagnosis call failed because of the contract
// (a revert, a bad return value) rather than the node.
func skippable(err error) bool { return RevertData(err) != nil || errors.Is(err, errBadReturn) }

// SettleCalldata returns the calldata of proxy.settle(permit, amount, owner,
// witness, signature), which moves amount (at most the permit's) from the
// owner to witness.to. It must be sent by witness.facilitator.
func SettleCalldata(a *Authorization, signature []byte, amount *big.Int) ([]byte, error) {
	permit := permitArg{
		Permitted: tokenPermissionsArg{Token: a.Permitted.Token, Amount: a.Permitted.Amount},
		Nonce:     a.Nonce,
		Deadline:  a.Deadline,
	}
	witness := witnessArg{To: a.Witness.To, Facilitator: a.Witness.Facilitator, ValidAfter: a.Witness.ValidAfter}
	data, err := parsedABI.Pack("settle", permit, amount, a.From, witness, signature)
	if err != nil {
		return nil, fmt.Errorf("pack settle: %w", err)
	}
	return data, nil
}

// revertNames are the custom errors a settle can revert with, by selector:
// the proxy's (as its ABI in npm @x402/evm 2.27 declares them) and Permit2's
// SignatureTransfer and SignatureVerification errors. The official
// facilitator maps a revert by the error's name in viem's message; a node
// returns only the selector, so the names are looked up here.
var revertNames = func() map[[4]byte]string {
	m := make(map[[4]byte]string)
	for _, sig := range []string{
		"AmountExceedsPermitted()", "InvalidDestination()", "InvalidOwner()", "InvalidPermit2Address()",
		"PaymentTooEarly()", "Permit2612AmountMismatch()", "ReentrancyGuardReentrantCall()", "UnauthorizedFacilitator()",
		"InvalidAmount(uint256)", "LengthMismatch()", "InvalidNonce()", "SignatureExpired(uint256)",
		"InvalidSignature()", "InvalidSignatureLength()", "InvalidSigner()", "InvalidContractSignature()",
	} {
		m[[4]byte(crypto.Keccak256([]byte(sig))[:4])] = sig[:strings.IndexByte(sig, '(')]
	}
	return m
}()

// RevertName returns the name of the custom error a revert payload carries,
// the decoded Error(string) message, or "" for anything else.
func RevertName(data []byte) string {
	if len(data) >= 4 {
		if name, ok := revertNames[[4]byte(data[:4])]; ok {
			return name
		}
	}
	if msg, err := abi.UnpackRevert(data); err == nil {
		return msg
	}
	return ""
}

// ReasonForRevert maps the revert of a settle transaction or of its gas
// estimation to the official reason, as the official facilitator does, by
// the custom error's name (RevertName); "Signature" covers Permit2's
// InvalidSigner and InvalidSignatureLength too. The official facilitator
// answers anything else invalid_exact_evm_transaction_failed followed by the
// node's message; this gives invalid_upto_evm_transaction_failed, a reason of
// the scheme, and leaves the message to the caller.
func ReasonForRevert(data []byte) x402.Reason {
	name := RevertName(data)
	switch {
	case name == "Permit2612AmountMismatch":
		return x402.ReasonPermit2612AmountMismatch
	case name == "InvalidAmount":
		return x402.ReasonPermit2InvalidAmount
	case name == "InvalidDestination":
		return x402.ReasonPermit2InvalidDestination
	case name == "InvalidOwner":
		return x402.ReasonPermit2InvalidOwner
	case name == "PaymentTooEarly":
		return x402.ReasonPermit2PaymentTooEarly
	case strings.HasPrefix(name, "InvalidSign"), name == "InvalidContractSignature", name == "SignatureExpired":
		return x402.ReasonPermit2Signature
	case name == "InvalidNonce":
		return x402.ReasonPermit2InvalidNonce
	case name == "AmountExceedsPermitted":
		return x402.ReasonUptoAmountExceedsPermitted
	case name == "UnauthorizedFacilitator":
		return x402.ReasonUptoUnauthorizedFacilitator
	default:
		return x402.ReasonUptoTransactionFailed
	}
}

// RevertData returns the revert payload carried by an eth_call or gas
// estimation error (empty for a bare revert), or nil when the error is not a
// revert (a node that is down, a timeout).
func RevertData(err error) []byte {
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

// secp256k1HalfN is half the curve order as a 32-byte big-endian number.
var secp256k1HalfN = new(big.Int).Rsh(crypto.S256().Params().N, 1).FillBytes(make([]byte, 32))

// recoverEOA recovers the signer of a 65-byte signature with v in {0, 1, 27,
// 28}, refusing high s: Permit2 itself would take either s, but a high-s
// signature is a malleated copy no wallet produces.
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
	pub, err := crypto.SigToPub(digest[:], rsv[:])
	if err != nil {
		return common.Address{}, err
	}
	return crypto.PubkeyToAddress(*pub), nil
}

// normalizeV returns a 65-byte signature with v in {27, 28}: sig itself when
// it already is, else a copy.
func normalizeV(sig []byte) []byte {
	if sig[64] >= 27 {
		return sig
	}
	out := append([]byte(nil), sig...)
	out[64] += 27
	return out
}

// cmpInt64 compares x with y without allocating for x that fits in an int64.
func cmpInt64(x *big.Int, y int64) int {
	if x.IsInt64() {
		return cmpOrdered(x.Int64(), y)
	}
	return x.Cmp(big.NewInt(y))
}

func cmpOrdered(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	default:
		return 0
	}
}
