package main

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/devchain"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// The test token devnet deploys: its EIP-712 domain and decimals are Base
// USDC's, so configurations written for USDC work unchanged.
const (
	devnetTokenName     = "USD Coin"
	devnetTokenVersion  = "2"
	devnetTokenDecimals = 6
)

// maxUint256 bounds a --mint amount and the sum of them all, which is the
// token's total supply.
var maxUint256 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))

// mintFlags collects repeated --mint values.
type mintFlags []string

func (m *mintFlags) String() string     { return strings.Join(*m, ",") }
func (m *mintFlags) Set(s string) error { *m = append(*m, s); return nil }

// devnetMint is one parsed --mint.
type devnetMint struct {
	to     common.Address
	amount *big.Int
}

type devnetFlags struct {
	rpc     string
	keyEnv  string
	timeout time.Duration
	mints   []devnetMint
}

const devnetUsage = `usage: llm4agents devnet --rpc URL [--mint 0xADDRESS=AMOUNT]... [--key-env NAME]

Sets up a running dev node (anvil) for llm4agents: places Permit2 and the x402
upto proxy at their canonical addresses (anvil_setCode), deploys the EIP-3009
test token ("USD Coin", version "2", 6 decimals, open mint) and then the
receipt log's anchor contract from the deployer key, and mints each --mint
amount. Prints one JSON object on stdout: network, chainId, token, permit2,
uptoProxy, receiptLogAnchor, deployer and balances.

On a fresh anvil with the default key the token lands at
0x5FbDB2315678afecb367f032d93F642f64180aa3 (examples/anvil.yaml's asset) and
the anchor contract at 0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512
(log.anchor.contract).
A node without anvil_setCode is refused before anything is sent.

The deployer is anvil's dev account 0 (0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266),
whose key is a well-known public test key. --key-env names an environment
variable holding another hex key; a key is never given on the command line.

AMOUNT is in atomic units, a plain decimal integer: 1000000 is 1.00 of the
6-decimal token. No sign, decimal point, exponent or leading zeros.

flags:
`

func parseDevnetFlags(args []string, e env) (*devnetFlags, error) {
	fs := flag.NewFlagSet("devnet", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		printf(e.stderr, "%s", devnetUsage)
		fs.PrintDefaults()
	}
	var f devnetFlags
	var mints mintFlags
	fs.StringVar(&f.rpc, "rpc", "", "JSON-RPC URL of the dev node, e.g. http://127.0.0.1:8545 (required)")
	fs.Var(&mints, "mint", "mint AMOUNT atomic units of the token to 0xADDRESS, as 0xADDRESS=AMOUNT (repeatable)")
	fs.StringVar(&f.keyEnv, "key-env", "", "environment variable holding the deployer's hex private key (default: anvil's public dev key 0)")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "how long the whole set-up may take")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("devnet: unexpected argument #%d (flags go before it; values are not echoed)", fs.NArg())
	}
	switch {
	case f.rpc == "":
		return nil, errors.New("devnet: --rpc is required")
	case f.timeout <= 0:
		return nil, errors.New("devnet: --timeout must be positive")
	}
	var err error
	if f.mints, err = parseMints(mints); err != nil {
		return nil, fmt.Errorf("devnet: %w", err)
	}
	return &f, nil
}

// parseMints reads the --mint values. Each address may appear once, and the
// amounts must fit the token's uint256 total supply together.
func parseMints(values []string) ([]devnetMint, error) {
	mints := make([]devnetMint, 0, len(values))
	seen := make(map[common.Address]bool, len(values))
	total := new(big.Int)
	for _, v := range values {
		addrText, amountText, ok := strings.Cut(v, "=")
		if !ok {
			return nil, fmt.Errorf("--mint %q: want 0xADDRESS=AMOUNT", v)
		}
		addr, err := exact.ParseAddress(addrText)
		if err != nil {
			return nil, fmt.Errorf("--mint %q: %q is not a 0x-prefixed 20-byte hex address: %w", v, addrText, err)
		}
		amount, err := exact.ParseUint256(amountText)
		if err != nil {
			return nil, fmt.Errorf("--mint %q: the amount must be a whole number of atomic units below 2^256 (no sign, decimal point, exponent or leading zeros)", v)
		}
		if amount.Sign() == 0 {
			return nil, fmt.Errorf("--mint %q: the amount must be positive", v)
		}
		if seen[addr] {
			return nil, fmt.Errorf("--mint %q: %s is minted to twice; give one amount per address", v, addr.Hex())
		}
		seen[addr] = true
		if total.Add(total, amount).Cmp(maxUint256) > 0 {
			return nil, fmt.Errorf("--mint %q: the amounts add up to more than the token's uint256 supply", v)
		}
		mints = append(mints, devnetMint{to: addr, amount: amount})
	}
	return mints, nil
}

// devnetResult is what devnet prints: everything a configuration or a test
// needs to use the node.
type devnetResult struct {
	Network      string   `json:"network"`
	ChainID      *big.Int `json:"chainId"`
	Token        string   `json:"token"`
	TokenName    string   `json:"tokenName"`
	TokenVersion string   `json:"tokenVersion"`
	Decimals     int      `json:"decimals"`
	Permit2      string   `json:"permit2"`
	UptoProxy    string   `json:"uptoProxy"`
	// ReceiptLogAnchor is the contract log.anchor.contract names.
	ReceiptLogAnchor string            `json:"receiptLogAnchor"`
	Deployer         string            `json:"deployer"`
	Balances         map[string]string `json:"balances"` // address -> atomic units, decimal
}

func runDevnet(ctx context.Context, args []string, e env) error {
	f, err := parseDevnetFlags(args, e)
	if err != nil {
		return err
	}
	key := devchain.Key(0)
	if f.keyEnv != "" {
		raw, err := config.ReadSecret("", f.keyEnv, e.getenv)
		if err != nil {
			return fmt.Errorf("devnet: --key-env: %w", err)
		}
		if key, err = parseKey(raw, "deployer"); err != nil {
			return fmt.Errorf("devnet: --key-env %s: %w", f.keyEnv, err)
		}
	}

	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	// The node's errors may repeat its URL, which may carry a key: redact it.
	rc, err := rpc.DialContext(ctx, f.rpc)
	if err != nil {
		return fmt.Errorf("devnet: --rpc: %w", redactURL(err, f.rpc))
	}
	defer rc.Close()
	res, err := setUpDevnet(ctx, rc, key, f.mints)
	if err != nil {
		return fmt.Errorf("devnet: %w", redactURL(err, f.rpc))
	}
	out, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("devnet: %w", err)
	}
	printf(e.stdout, "%s\n", out)
	return nil
}

// setUpDevnet places the canonical contracts first, so that a node which
// cannot take them is refused before any transaction is sent, then deploys the
// token and mints.
func setUpDevnet(ctx context.Context, rc *rpc.Client, key *ecdsa.PrivateKey, mints []devnetMint) (*devnetResult, error) {
	ec := ethclient.NewClient(rc)
	chainID, err := ec.ChainID(ctx)
	if err != nil {
		return nil, fmt.Errorf("chain id: %w", err)
	}
	if err := contracts.InstallCanonical(ctx, rc); err != nil {
		return nil, err
	}
	auth, err := bind.NewKeyedTransactorWithChainID(key, chainID)
	if err != nil {
		return nil, fmt.Errorf("transactor: %w", err)
	}
	auth.Context = ctx

	tokenAddr, tx, token, err := contracts.DeployEIP3009Token(auth, ec, devnetTokenName, devnetTokenVersion, devnetTokenDecimals)
	if err != nil {
		return nil, fmt.Errorf("deploy the token: %w", err)
	}
	if err := waitSucceeded(ctx, ec, tx, "deploy the token"); err != nil {
		return nil, err
	}
	// Right after the token, so that both addresses depend on nothing but
	// the deployer.
	anchorAddr, tx, _, err := contracts.DeployReceiptLogAnchor(auth, ec)
	if err != nil {
		return nil, fmt.Errorf("deploy the receipt log anchor: %w", err)
	}
	if err := waitSucceeded(ctx, ec, tx, "deploy the receipt log anchor"); err != nil {
		return nil, err
	}

	// Send every mint before waiting for any, so a node that seals blocks on a
	// timer (anvil --block-time) takes one block for all of them. The nonces
	// are set here: the node's pending nonce may lag behind what was just sent.
	nonce, err := ec.PendingNonceAt(ctx, auth.From)
	if err != nil {
		return nil, fmt.Errorf("nonce of %s: %w", auth.From.Hex(), err)
	}
	txs := make([]*types.Transaction, 0, len(mints))
	for i, m := range mints {
		auth.Nonce = new(big.Int).SetUint64(nonce + uint64(i))
		tx, err := token.Mint(auth, m.to, m.amount)
		if err != nil {
			return nil, fmt.Errorf("mint %s to %s: %w", m.amount, m.to.Hex(), err)
		}
		txs = append(txs, tx)
	}
	for i, tx := range txs {
		if err := waitSucceeded(ctx, ec, tx, "mint to "+mints[i].to.Hex()); err != nil {
			return nil, err
		}
	}

	res := &devnetResult{
		Network:          fmt.Sprintf("eip155:%s", chainID),
		ChainID:          chainID,
		Token:            tokenAddr.Hex(),
		TokenName:        devnetTokenName,
		TokenVersion:     devnetTokenVersion,
		Decimals:         devnetTokenDecimals,
		Permit2:          contracts.Permit2Address.Hex(),
		UptoProxy:        contracts.UptoProxyAddress.Hex(),
		ReceiptLogAnchor: anchorAddr.Hex(),
		Deployer:         crypto.PubkeyToAddress(key.PublicKey).Hex(),
		Balances:         make(map[string]string, len(mints)),
	}
	for _, m := range mints {
		bal, err := token.BalanceOf(&bind.CallOpts{Context: ctx}, m.to)
		if err != nil {
			return nil, fmt.Errorf("balance of %s: %w", m.to.Hex(), err)
		}
		res.Balances[m.to.Hex()] = bal.String()
	}
	return res, nil
}

// waitSucceeded waits for tx's receipt and fails unless it succeeded.
func waitSucceeded(ctx context.Context, ec *ethclient.Client, tx *types.Transaction, what string) error {
	r, err := bind.WaitMined(ctx, ec, tx)
	if err != nil {
		return fmt.Errorf("%s: transaction %s: %w", what, tx.Hash().Hex(), err)
	}
	if r.Status != types.ReceiptStatusSuccessful {
		return fmt.Errorf("%s: transaction %s reverted", what, tx.Hash().Hex())
	}
	return nil
}
