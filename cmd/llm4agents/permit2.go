package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/accounts/abi/bind"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/evm/upto"
)

// erc20ABI is the part of an ERC-20 token the Permit2 approval reads and
// calls. decimals and symbol are optional in ERC-20; a token without them
// is still approved.
const erc20ABI = `[
{"type":"function","name":"approve","stateMutability":"nonpayable","inputs":[{"name":"spender","type":"address"},{"name":"amount","type":"uint256"}],"outputs":[{"name":"","type":"bool"}]},
{"type":"function","name":"allowance","stateMutability":"view","inputs":[{"name":"owner","type":"address"},{"name":"spender","type":"address"}],"outputs":[{"name":"","type":"uint256"}]},
{"type":"function","name":"balanceOf","stateMutability":"view","inputs":[{"name":"account","type":"address"}],"outputs":[{"name":"","type":"uint256"}]},
{"type":"function","name":"decimals","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"uint8"}]},
{"type":"function","name":"symbol","stateMutability":"view","inputs":[],"outputs":[{"name":"","type":"string"}]}
]`

var parsedERC20 = func() abi.ABI {
	a, err := abi.JSON(strings.NewReader(erc20ABI))
	if err != nil {
		panic(err)
	}
	return a
}()

const walletUsage = `usage: llm4agents wallet <command> [flags]

commands:
  approve-permit2   let Permit2 move the wallet's tokens, once, so that upto payments can settle

Run 'llm4agents wallet <command> -h' for its flags.
`

const approveUsage = `usage: llm4agents wallet approve-permit2 --rpc URL --asset 0xTOKEN [--amount N | --unlimited] [--yes]

Sends one transaction from the wallet: the token's approve(Permit2, amount).
An upto payment is a Permit2 transfer of at most its maximum, signed by the
wallet and settled by the seller's facilitator for what the call cost; Permit2
can only move what the token lets it, so a wallet approves it once per token.
The approval lets Permit2 move up to the amount for any permit the wallet
signs; nothing is moved without one.

It shows what it will send (wallet, chain, token, amount, the allowance
today) and asks for confirmation on stdin. Without a terminal on stdin it
refuses unless --yes is given. The wallet key comes from --key-file or
$` + walletKeyEnv + `, never from the command line; it pays the gas.

flags:
`

// runWallet dispatches `llm4agents wallet <command>`.
func runWallet(ctx context.Context, args []string, e env, stdin io.Reader) error {
	if len(args) == 0 {
		printf(e.stderr, "%s", walletUsage)
		return errors.New("wallet: no command given")
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "approve-permit2":
		return runApprovePermit2(ctx, rest, e, stdin, isTerminal(stdin))
	case "-h", "-help", "--help", "help":
		printf(e.stdout, "%s", walletUsage)
		return nil
	default:
		printf(e.stderr, "%s", walletUsage)
		return fmt.Errorf("wallet: unknown command %q", cmd)
	}
}

// approveFlags is `llm4agents wallet approve-permit2` checked and parsed.
type approveFlags struct {
	rpc       string
	asset     common.Address
	amount    *big.Int // maxUint256 for --unlimited
	unlimited bool
	decimals  int
	yes       bool
	keyFile   string
	timeout   time.Duration
}

func parseApproveFlags(args []string, e env) (*approveFlags, error) {
	fs := flag.NewFlagSet("wallet approve-permit2", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		printf(e.stderr, "%s", approveUsage)
		fs.PrintDefaults()
	}
	var f approveFlags
	var asset, amount string
	fs.StringVar(&f.rpc, "rpc", "", "JSON-RPC URL of the token's chain (required)")
	fs.StringVar(&asset, "asset", "", "the token's address, 0x... (required)")
	fs.StringVar(&amount, "amount", defaultBudget, "how much Permit2 may move: whole tokens with a decimal point (1.00), or atomic units as an integer (1000000)")
	fs.BoolVar(&f.unlimited, "unlimited", false, "let Permit2 move any amount (2^256-1, the usual wallet approval) instead of --amount")
	fs.IntVar(&f.decimals, "decimals", defaultDecimals, "decimals of the token, to read --amount and print amounts; must match the token's own when it states them")
	fs.BoolVar(&f.yes, "yes", false, "send without asking")
	fs.StringVar(&f.keyFile, "key-file", "", "file holding the wallet's hex private key (or set "+walletKeyEnv+"; never a flag value)")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "how long reading the chain, sending and waiting for the transaction may take")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	amountSet := false
	fs.Visit(func(fl *flag.Flag) { amountSet = amountSet || fl.Name == "amount" })
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("wallet approve-permit2: unexpected argument #%d (flags go before it; values are not echoed)", fs.NArg())
	case f.rpc == "":
		return nil, errors.New("wallet approve-permit2: --rpc is required")
	case asset == "":
		return nil, errors.New("wallet approve-permit2: --asset is required")
	case f.unlimited && amountSet:
		return nil, errors.New("wallet approve-permit2: give --amount or --unlimited, not both")
	case f.timeout <= 0:
		return nil, errors.New("wallet approve-permit2: --timeout must be positive")
	}
	var err error
	if f.asset, err = exact.ParseAddress(asset); err != nil {
		return nil, fmt.Errorf("wallet approve-permit2: --asset %q: %w", asset, err)
	}
	if f.unlimited {
		f.amount = maxUint256
		return &f, nil
	}
	if f.amount, err = parseAmount(amount, f.decimals); err != nil {
		return nil, fmt.Errorf("wallet approve-permit2: --amount: %w", err)
	}
	return &f, nil
}

// tokenState is what the approval reads of a token before sending.
type tokenState struct {
	chainID   *big.Int
	symbol    string // "" when the token does not say
	decimals  *int   // nil when the token does not say
	allowance *big.Int
	balance   *big.Int
}

// runApprovePermit2 is `llm4agents wallet approve-permit2`. interactive says
// whether stdin is a terminal a person can answer on.
func runApprovePermit2(ctx context.Context, args []string, e env, stdin io.Reader, interactive bool) error {
	f, err := parseApproveFlags(args, e)
	if err != nil {
		return err
	}
	key, err := loadWallet(f.keyFile, e.getenv, e.stderr)
	if err != nil {
		return fmt.Errorf("wallet approve-permit2: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	ec, err := ethclient.DialContext(ctx, f.rpc)
	if err != nil {
		return fmt.Errorf("wallet approve-permit2: --rpc: %w", redactURL(err, f.rpc))
	}
	defer ec.Close()
	if err := approvePermit2(ctx, ec, key, f, e, stdin, interactive); err != nil {
		return fmt.Errorf("wallet approve-permit2: %w", redactURL(err, f.rpc))
	}
	return nil
}

// approvePermit2 reads the token, shows what will be sent, asks, sends and
// waits for the transaction.
func approvePermit2(ctx context.Context, ec *ethclient.Client, key *ecdsa.PrivateKey, f *approveFlags, e env, stdin io.Reader, interactive bool) error {
	owner := crypto.PubkeyToAddress(key.PublicKey)
	st, err := readToken(ctx, ec, f.asset, owner)
	if err != nil {
		return err
	}
	if st.decimals != nil && *st.decimals != f.decimals {
		return fmt.Errorf("the token has %d decimals, not %d; give --decimals %d", *st.decimals, f.decimals, *st.decimals)
	}
	amountText := f.amountText()
	token := f.asset.Hex()
	if st.symbol != "" {
		token += " (" + oneLine(st.symbol, 16) + ")"
	}
	printf(e.stderr, "approve Permit2 to move the wallet's tokens, for upto payments:\n"+
		"  wallet     %s\n  network    eip155:%s\n  token      %s\n  spender    Permit2 %s\n  amount     %s\n  allowance  %s today\n  balance    %s\n",
		owner.Hex(), st.chainID, token, upto.Permit2Address.Hex(), amountText,
		formatAtomic(st.allowance, f.decimals), formatAtomic(st.balance, f.decimals))
	if st.allowance.Cmp(f.amount) == 0 {
		printf(e.stdout, "Permit2 already has this allowance; nothing was sent.\n")
		return nil
	}
	printf(e.stderr, "This sends one transaction, approve(Permit2, amount), from the wallet, which pays its gas.\n")
	if !f.yes {
		if !interactive {
			return errors.New("stdin is not a terminal to confirm on; run it in one, or pass --yes to send without asking; nothing was sent")
		}
		printf(e.stderr, "Send it? [y/N] ")
		line, err := bufio.NewReader(io.LimitReader(stdin, 1024)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read the answer: %w", err)
		}
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return errors.New("not confirmed; nothing was sent")
		}
	}
	auth, err := bind.NewKeyedTransactorWithChainID(key, st.chainID)
	if err != nil {
		return fmt.Errorf("transactor: %w", err)
	}
	auth.Context = ctx
	tx, err := bind.NewBoundContract(f.asset, parsedERC20, ec, ec, ec).Transact(auth, "approve", upto.Permit2Address, f.amount)
	if err != nil {
		return fmt.Errorf("send approve: %w", err)
	}
	printf(e.stderr, "sent transaction %s; waiting for it to be mined\n", tx.Hash().Hex())
	r, err := bind.WaitMined(ctx, ec, tx)
	if err != nil {
		return fmt.Errorf("transaction %s: %w", tx.Hash().Hex(), err)
	}
	if r.Status != types.ReceiptStatusSuccessful {
		return fmt.Errorf("transaction %s reverted; the allowance is unchanged", tx.Hash().Hex())
	}
	now, err := upto.Permit2Allowance(ctx, ec, f.asset, owner)
	if err != nil {
		return fmt.Errorf("read the allowance after transaction %s: %w", tx.Hash().Hex(), err)
	}
	printf(e.stdout, "approved in transaction %s: Permit2 may move %s of %s from %s\n", tx.Hash().Hex(), formatAtomic(now, f.decimals), f.asset.Hex(), owner.Hex())
	return nil
}

// amountText shows the amount to approve for a person.
func (f *approveFlags) amountText() string {
	if f.unlimited {
		return "unlimited (2^256-1)"
	}
	return formatAtomic(f.amount, f.decimals)
}

// formatAtomic shows atomic units and whole tokens; the largest uint256, the
// usual unlimited approval, is named as such.
func formatAtomic(n *big.Int, decimals int) string {
	if n.Cmp(maxUint256) == 0 {
		return "unlimited (2^256-1)"
	}
	return fmt.Sprintf("%s atomic units = %s", n, formatAmount(n, decimals))
}

// readToken reads the chain id and what the owner holds and has approved of
// token, refusing an address without code.
func readToken(ctx context.Context, ec *ethclient.Client, token, owner common.Address) (*tokenState, error) {
	chainID, err := ec.ChainID(ctx)
	if err != nil {
		return nil, fmt.Errorf("chain id: %w", err)
	}
	code, err := ec.CodeAt(ctx, token, nil)
	if err != nil {
		return nil, fmt.Errorf("code of %s: %w", token.Hex(), err)
	}
	if len(code) == 0 {
		return nil, fmt.Errorf("no contract at %s on chain %s; check --asset and --rpc", token.Hex(), chainID)
	}
	st := &tokenState{chainID: chainID}
	if st.allowance, err = upto.Permit2Allowance(ctx, ec, token, owner); err != nil {
		return nil, fmt.Errorf("allowance of Permit2 on %s: %w", token.Hex(), err)
	}
	if st.balance, err = erc20Uint(ctx, ec, token, "balanceOf", owner); err != nil {
		return nil, fmt.Errorf("balance on %s: %w", token.Hex(), err)
	}
	if out, err := erc20Call(ctx, ec, token, "decimals"); err == nil && len(out) == 1 {
		if d, ok := out[0].(uint8); ok {
			n := int(d)
			st.decimals = &n
		}
	}
	if out, err := erc20Call(ctx, ec, token, "symbol"); err == nil && len(out) == 1 {
		st.symbol, _ = out[0].(string)
	}
	return st, nil
}

func erc20Uint(ctx context.Context, c ethereum.ContractCaller, token common.Address, method string, args ...any) (*big.Int, error) {
	out, err := erc20Call(ctx, c, token, method, args...)
	if err != nil {
		return nil, err
	}
	n, ok := out[0].(*big.Int)
	if len(out) != 1 || !ok {
		return nil, fmt.Errorf("%s returned no uint256", method)
	}
	return n, nil
}

func erc20Call(ctx context.Context, c ethereum.ContractCaller, token common.Address, method string, args ...any) ([]any, error) {
	data, err := parsedERC20.Pack(method, args...)
	if err != nil {
		return nil, err
	}
	raw, err := c.CallContract(ctx, ethereum.CallMsg{To: &token, Data: data}, nil)
	if err != nil {
		return nil, err
	}
	out, err := parsedERC20.Unpack(method, raw)
	if err != nil || len(out) == 0 {
		return nil, fmt.Errorf("%s: the token's answer does not decode", method)
	}
	return out, nil
}
