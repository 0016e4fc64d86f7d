// Package preflight checks, before a gateway or facilitator listens, that the
// chain agrees with its set-up: the node serves the configured network, each
// asset is a contract whose EIP-712 domain is the configured one, and the
// facilitator's signer holds gas. Without these checks a wrong address or
// domain only shows up as a refused payment (asset_not_deployed_contract,
// invalid signatures) at the first buyer, and an unfunded signer as a failed
// settlement.
//
// A finding is a *SetupError naming the configuration key or flag at fault and
// what the chain says instead; its text never carries a node's error, so it
// holds no URL. A node that fails is a plain wrapped error, for the caller to
// redact.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Chain is the part of a node client the checks read. *ethclient.Client and
// simulated.Client satisfy it.
type Chain interface {
	ethereum.ChainIDReader
	ethereum.ContractCaller
	CodeAt(ctx context.Context, account common.Address, blockNumber *big.Int) ([]byte, error)
	BalanceAt(ctx context.Context, account common.Address, blockNumber *big.Int) (*big.Int, error)
	SuggestGasTipCap(ctx context.Context) (*big.Int, error)
	HeaderByNumber(ctx context.Context, number *big.Int) (*types.Header, error)
}

// Setup is what Check compares with the chain, and the names its messages
// give each part: configuration keys for serve, flags for the facilitator.
type Setup struct {
	// Network is the CAIP-2 network, eip155:<chain id>, and NetworkKey where
	// it was set ("network.id").
	Network    string
	NetworkKey string
	// Node says which node was asked, for messages ("chain at
	// http://127.0.0.1:8545"). Never a URL that may carry a key.
	Node   string
	Assets []Asset
	// Signer is the in-process facilitator's account, which pays the gas of
	// every settlement, and SignerKey where its key was set
	// ("facilitator.key_env"). The zero address skips the gas check: a remote
	// facilitator holds its own key.
	Signer    common.Address
	SignerKey string
	// MaxFeePerGas caps the fee per gas the low-balance estimate assumes, as
	// it caps every settlement; nil for no cap.
	MaxFeePerGas *big.Int
}

// Asset is a token and the EIP-712 domain payments for it are signed over.
type Asset struct {
	Address common.Address
	// Name and Version are the domain's name and version. Both empty: the
	// token's own (its eip712Domain(), or its name() and version()), which
	// Check fills in.
	Name, Version string
	// Key, NameKey and VersionKey say where the address, name and version
	// were set ("network.asset", "network.asset_name").
	Key, NameKey, VersionKey string
}

// SetupError is a set-up the chain contradicts.
type SetupError struct {
	// Key is the configuration key or flag at fault.
	Key string
	// Msg says what was configured and what the chain says instead.
	Msg string
}

func (p *SetupError) Error() string { return p.Key + " " + p.Msg }

// Gas bounds behind the low-balance warning.
const (
	// LowBalanceSettlements is how many settlements the signer's balance
	// should pay for at the current fees; below that Check warns.
	LowBalanceSettlements = 100
	// settlementGas bounds the gas of one settlement: transferWithAuthorization
	// costs about 87k gas on anvil and up to 270k on geth's simulated backend.
	settlementGas = 300_000
	// callTimeout bounds each call to the node.
	callTimeout = 10 * time.Second
)

// Check runs the checks of s against c, in order: the node's chain id, then
// each asset's code and EIP-712 domain, then the signer's balance. It returns
// the assets with every domain filled in, and an error: the *Problems found,
// joined, or the first failure of the node. A chain id that does not match
// stops the checks there: nothing else on that chain is the configured one.
//
// A balance too low for LowBalanceSettlements settlements at the current fees
// is a warning on log, not an error: it still pays for some.
func Check(ctx context.Context, c Chain, s Setup, log *slog.Logger) ([]Asset, error) {
	log = log.With("component", "preflight", "network", s.Network)
	want, err := exact.ChainID(s.Network)
	if err != nil {
		return nil, &SetupError{Key: s.NetworkKey, Msg: err.Error()}
	}
	got, err := call(ctx, c.ChainID)
	if err != nil {
		return nil, fmt.Errorf("read chain id: %w", err)
	}
	if got.Cmp(want) != 0 {
		return nil, &SetupError{Key: s.NetworkKey, Msg: fmt.Sprintf("%s does not match the node's chain id %s%s", s.Network, got, s.at())}
	}
	var problems []error
	assets := make([]Asset, 0, len(s.Assets))
	for _, a := range s.Assets {
		a, err := s.checkAsset(ctx, c, want, a, log)
		switch {
		case errors.As(err, new(*SetupError)):
			problems = append(problems, err)
		case err != nil:
			return nil, err
		}
		assets = append(assets, a)
	}
	if s.Signer != (common.Address{}) {
		switch err := s.checkSigner(ctx, c, log); {
		case errors.As(err, new(*SetupError)):
			problems = append(problems, err)
		case err != nil:
			return nil, err
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return assets, nil
}

// at is the node, for the end of a message.
func (s *Setup) at() string {
	if s.Node == "" {
		return ""
	}
	return " (" + s.Node + ")"
}

// checkAsset checks that a is a contract with the configured EIP-712 domain
// on chainID, and returns it with its domain filled in.
func (s *Setup) checkAsset(ctx context.Context, c Chain, chainID *big.Int, a Asset, log *slog.Logger) (Asset, error) {
	code, err := call(ctx, func(ctx context.Context) ([]byte, error) { return c.CodeAt(ctx, a.Address, nil) })
	if err != nil {
		return a, fmt.Errorf("read the code of %s %s: %w", a.Key, a.Address.Hex(), err)
	}
	if len(code) == 0 {
		return a, &SetupError{Key: a.Key, Msg: fmt.Sprintf("%s has no contract code on %s%s", a.Address.Hex(), s.Network, s.at())}
	}
	d, err := readDomain(ctx, c, a.Address)
	if err != nil {
		return a, fmt.Errorf("read the EIP-712 domain of %s %s: %w", a.Key, a.Address.Hex(), err)
	}
	if d != nil {
		if a.Name == "" && a.Version == "" {
			a.Name, a.Version = d.Name, d.Version
		}
		return a, s.compare5267(a, chainID, d)
	}
	return s.compareSeparator(ctx, c, chainID, a, log)
}

// compare5267 compares a with the domain the token declares (EIP-5267).
func (s *Setup) compare5267(a Asset, chainID *big.Int, d *domain5267) error {
	if d.Fields != fieldsExact {
		return &SetupError{Key: a.Key, Msg: fmt.Sprintf("%s declares an EIP-712 domain of %s (eip712Domain()); x402 payments are signed over name, version, chainId and verifyingContract",
			a.Address.Hex(), d.fieldNames())}
	}
	problems := []error{compareNames(a, &d.Name, &d.Version)}
	if d.ChainID.Cmp(chainID) != 0 {
		problems = append(problems, &SetupError{Key: a.Key, Msg: fmt.Sprintf("%s has an EIP-712 domain for chain id %s, but %s is chain id %s%s", a.Address.Hex(), d.ChainID, s.Network, chainID, s.at())})
	}
	if d.VerifyingContract != a.Address {
		problems = append(problems, &SetupError{Key: a.Key, Msg: fmt.Sprintf("%s has an EIP-712 domain whose verifying contract is %s, not itself", a.Address.Hex(), d.VerifyingContract.Hex())})
	}
	return errors.Join(problems...)
}

// compareSeparator checks a against the token's DOMAIN_SEPARATOR(), naming
// which of name and version differ by trying the token's name() and
// version() in their place. A token with neither eip712Domain() nor
// DOMAIN_SEPARATOR() is compared by name() and version() alone, with a
// warning that its chain id and address could not be checked; a contract
// that answers none of the four is no token.
func (s *Setup) compareSeparator(ctx context.Context, c Chain, chainID *big.Int, a Asset, log *slog.Logger) (Asset, error) {
	sep, err := readSeparator(ctx, c, a.Address)
	if err != nil {
		return a, fmt.Errorf("read DOMAIN_SEPARATOR() of %s %s: %w", a.Key, a.Address.Hex(), err)
	}
	name, err := readString(ctx, c, a.Address, "name")
	if err != nil {
		return a, fmt.Errorf("read name() of %s %s: %w", a.Key, a.Address.Hex(), err)
	}
	version, err := readString(ctx, c, a.Address, "version")
	if err != nil {
		return a, fmt.Errorf("read version() of %s %s: %w", a.Key, a.Address.Hex(), err)
	}
	if sep == nil && name == nil && version == nil {
		return a, &SetupError{Key: a.Key, Msg: fmt.Sprintf("%s answers none of eip712Domain(), DOMAIN_SEPARATOR(), name() and version(): it is not an EIP-3009 token", a.Address.Hex())}
	}
	resolve := a.Name == "" && a.Version == ""
	if resolve {
		if name == nil || version == nil {
			return a, &SetupError{Key: a.Key, Msg: fmt.Sprintf("%s has no eip712Domain(), nor both name() and version(), to read its EIP-712 domain from; give its domain's name and version", a.Address.Hex())}
		}
		a.Name, a.Version = *name, *version
	}
	if sep == nil {
		log.Warn("the token has neither eip712Domain() nor DOMAIN_SEPARATOR(): its EIP-712 domain's chain id and address cannot be checked", "asset", a.Address.Hex())
		return a, compareNames(a, name, version)
	}
	domain := func(name, version string) common.Hash {
		return exact.Domain{Name: name, Version: version, ChainID: chainID, VerifyingContract: a.Address}.Separator()
	}
	if domain(a.Name, a.Version) == *sep {
		return a, nil
	}
	if resolve {
		return a, &SetupError{Key: a.Key, Msg: fmt.Sprintf("%s: DOMAIN_SEPARATOR() is not that of its name() %q and version() %q on chain id %s at its address; give its EIP-712 domain's name and version",
			a.Address.Hex(), *name, *version, chainID)}
	}
	// Say which of name and version differ when the token's name() or
	// version() in its place gives the token's separator.
	switch {
	case name != nil && domain(*name, a.Version) == *sep:
		return a, compareNames(a, name, nil)
	case version != nil && domain(a.Name, *version) == *sep:
		return a, compareNames(a, nil, version)
	case name != nil && version != nil && domain(*name, *version) == *sep:
		return a, compareNames(a, name, version)
	}
	return a, &SetupError{Key: a.Key, Msg: fmt.Sprintf("%s: DOMAIN_SEPARATOR() %s is not that of name %q, version %q, chain id %s and its address: its EIP-712 domain is another one",
		a.Address.Hex(), sep.Hex(), a.Name, a.Version, chainID)}
}

// compareNames reports the configured name and version that differ from the
// token's (nil: not known).
func compareNames(a Asset, name, version *string) error {
	var problems []error
	for _, f := range []struct {
		key, configured string
		token           *string
	}{{a.NameKey, a.Name, name}, {a.VersionKey, a.Version, version}} {
		if f.token != nil && *f.token != f.configured {
			problems = append(problems, &SetupError{Key: f.key, Msg: fmt.Sprintf("is %q but the token's EIP-712 domain says %q", f.configured, *f.token)})
		}
	}
	return errors.Join(problems...)
}

// checkSigner fails on a signer without gas and warns about one with little.
func (s *Setup) checkSigner(ctx context.Context, c Chain, log *slog.Logger) error {
	bal, err := call(ctx, func(ctx context.Context) (*big.Int, error) { return c.BalanceAt(ctx, s.Signer, nil) })
	if err != nil {
		return fmt.Errorf("read the balance of signer %s: %w", s.Signer.Hex(), err)
	}
	if bal.Sign() == 0 {
		return &SetupError{Key: s.SignerKey, Msg: fmt.Sprintf("is the key of signer %s, which has no balance on %s%s: the signer pays the gas of every settlement in the chain's native coin; fund it",
			s.Signer.Hex(), s.Network, s.at())}
	}
	fee, err := s.feePerGas(ctx, c)
	if err != nil {
		return err
	}
	low := new(big.Int).Mul(fee, big.NewInt(settlementGas*LowBalanceSettlements))
	if bal.Cmp(low) < 0 {
		log.Warn(fmt.Sprintf("the facilitator signer's balance pays for fewer than %d settlements at the current fees; settlements fail once it runs out", LowBalanceSettlements),
			"signer", s.Signer.Hex(), "balance_wei", bal.String(), "low_wei", low.String(), "fee_per_gas_wei", fee.String())
	}
	return nil
}

// feePerGas is the fee cap a settlement sent now would carry, as the
// facilitator's sender sets it: twice the base fee plus the suggested tip,
// at most MaxFeePerGas.
func (s *Setup) feePerGas(ctx context.Context, c Chain) (*big.Int, error) {
	tip, err := call(ctx, c.SuggestGasTipCap)
	if err != nil {
		return nil, fmt.Errorf("suggest gas tip: %w", err)
	}
	head, err := call(ctx, func(ctx context.Context) (*types.Header, error) { return c.HeaderByNumber(ctx, nil) })
	if err != nil {
		return nil, fmt.Errorf("read the latest header: %w", err)
	}
	fee := new(big.Int).Set(tip)
	if head.BaseFee != nil {
		fee.Add(fee, new(big.Int).Lsh(head.BaseFee, 1))
	}
	if s.MaxFeePerGas != nil && fee.Cmp(s.MaxFeePerGas) > 0 {
		fee.Set(s.MaxFeePerGas)
	}
	return fee, nil
}

// call runs one node call with its own deadline.
func call[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return f(ctx)
}

// tokenABI is the part of a token the checks read: EIP-5267's eip712Domain(),
// the DOMAIN_SEPARATOR() of EIP-2612 and FiatToken, name() and version().
const tokenABI = `[
{"type":"function","name":"eip712Domain","stateMutability":"view","inputs":[],"outputs":[{"name":"fields","type":"bytes1"},{"name":"name","type":"string"},{"name":"version","type":"string"},{"name":"chainId","type":"uint256"},{"name":"verifyingContract","type":"address"},{"name":"salt","type":"bytes32"},{"name":"extensions","type":"uint256[]"}]},
{"type":"function","name":"DOMAIN_SEPARATOR","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"bytes32"}]},
{"type":"function","name":"name","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"string"}]},
{"type":"function","name":"version","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"string"}]}
]` // #nosec G101 -- an ABI, not a credential

var parsedABI = func() abi.ABI {
	a, err := abi.JSON(strings.NewReader(tokenABI))
	if err != nil {
		panic(err)
	}
	return a
}()

// fieldsExact is EIP-5267's fields value of a domain of name, version,
// chainId and verifyingContract: the domain x402's exact scheme signs over.
const fieldsExact = 0x0f

// domain5267 is what eip712Domain() returns.
type domain5267 struct {
	Fields            byte
	Name, Version     string
	ChainID           *big.Int
	VerifyingContract common.Address
}

// fieldNames lists the fields d declares.
func (d *domain5267) fieldNames() string {
	var names []string
	for i, n := range []string{"name", "version", "chainId", "verifyingContract", "salt"} {
		if d.Fields&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if d.Fields>>5 != 0 {
		names = append(names, fmt.Sprintf("unknown fields 0x%02x", d.Fields&^0x1f))
	}
	if len(names) == 0 {
		return "no fields"
	}
	return strings.Join(names, ", ")
}

// readDomain calls eip712Domain(); nil when the token does not implement it
// (the call reverts or answers something else).
func readDomain(ctx context.Context, c Chain, token common.Address) (*domain5267, error) {
	out, ok, err := callToken(ctx, c, token, "eip712Domain")
	if err != nil || !ok {
		return nil, err
	}
	vals, err := parsedABI.Unpack("eip712Domain", out)
	if err != nil || len(vals) != 7 {
		return nil, nil //nolint:nilerr // an answer that does not decode means the token lacks the method
	}
	fields, ok1 := vals[0].([1]byte)
	name, ok2 := vals[1].(string)
	version, ok3 := vals[2].(string)
	chainID, ok4 := vals[3].(*big.Int)
	contract, ok5 := vals[4].(common.Address)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return nil, nil
	}
	return &domain5267{Fields: fields[0], Name: name, Version: version, ChainID: chainID, VerifyingContract: contract}, nil
}

// readSeparator calls DOMAIN_SEPARATOR(); nil when the token does not
// implement it.
func readSeparator(ctx context.Context, c Chain, token common.Address) (*common.Hash, error) {
	out, ok, err := callToken(ctx, c, token, "DOMAIN_SEPARATOR")
	if err != nil || !ok || len(out) != common.HashLength {
		return nil, err
	}
	h := common.BytesToHash(out)
	return &h, nil
}

// readString calls a view returning a string; nil when the token does not
// implement it.
func readString(ctx context.Context, c Chain, token common.Address, method string) (*string, error) {
	out, ok, err := callToken(ctx, c, token, method)
	if err != nil || !ok {
		return nil, err
	}
	vals, err := parsedABI.Unpack(method, out)
	if err != nil || len(vals) != 1 {
		return nil, nil //nolint:nilerr // an answer that does not decode means the token lacks the method
	}
	s, ok := vals[0].(string)
	if !ok {
		return nil, nil
	}
	return &s, nil
}

// callToken calls a method without arguments. ok is false when the call
// reverted: the token does not implement it.
func callToken(ctx context.Context, c Chain, token common.Address, method string) (out []byte, ok bool, err error) {
	data, err := parsedABI.Pack(method)
	if err != nil {
		return nil, false, err
	}
	out, err = call(ctx, func(ctx context.Context) ([]byte, error) {
		return c.CallContract(ctx, ethereum.CallMsg{To: &token, Data: data}, nil)
	})
	switch {
	case exact.IsRevert(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("call %s(): %w", method, err)
	}
	return out, true, nil
}
