package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// maxReceiptsLimit bounds --limit of credits receipts.
const maxReceiptsLimit = 1000

// runCredits is `llm4agents credits topup|balance|receipts`.
func runCredits(ctx context.Context, args []string, e env) error {
	return runSubcommand(ctx, "credits", args, e, []subcommand{
		{"topup", "pay an x402 top-up of --amount; the gateway credits the paying wallet's account", creditsTopUp},
		{"balance", "show the account's balance and what calls in progress hold", creditsBalance},
		{"receipts", "list the latest signed receipts of credit-paid calls and verify each", creditsReceipts},
	})
}

// creditsTopUp pays POST /v1/credits/topup with x402: the wallet pays the
// amount, at most, and the gateway credits the payer's account.
func creditsTopUp(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("credits topup", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var f accountFlags
	f.register(fs, false, false)
	var b buyerFlags
	b.register(fs) // --key-file, --decimals, --asset, --network, --pay-to, --journal
	var amount string
	var verbose bool
	fs.StringVar(&amount, "amount", "", "how much to add: whole tokens (1.5) or atomic units (1500000); the payment is never more")
	fs.BoolVar(&verbose, "v", false, "log what the payment client does (never a key or a payment header)")
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return errors.New("credits topup: takes no arguments, only flags")
	}
	var limits []string
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "max-per-payment" || fl.Name == "budget" {
			limits = append(limits, "--"+fl.Name)
		}
	})
	if len(limits) > 0 {
		return fmt.Errorf("credits topup: %s: the payment is bounded by --amount alone", strings.Join(limits, ", "))
	}
	f.decimals = b.decimals
	if err := f.check(e.getenv); err != nil {
		return fmt.Errorf("credits topup: %w", err)
	}
	if amount == "" {
		return errors.New("credits topup: --amount is required")
	}
	n, err := parseAmount(amount, f.decimals)
	switch {
	case err != nil:
		return fmt.Errorf("credits topup: --amount: %w", err)
	case n.Sign() == 0:
		return errors.New("credits topup: --amount: want a positive amount")
	}
	// The amount is both the most one payment and the whole run may cost.
	b.maxPer, b.budget = n.String(), n.String()
	spend, err := b.parse()
	if err != nil {
		return fmt.Errorf("credits topup: %w", err)
	}
	key, err := loadWallet(b.keyFile, e.getenv, e.stderr)
	if err != nil {
		return fmt.Errorf("credits topup: %w", err)
	}
	journal, err := b.openJournal()
	if err != nil {
		return fmt.Errorf("credits topup: %w", err)
	}
	logOut := io.Discard
	if verbose {
		logOut = e.stderr
	}
	tr := &client.Transport{
		Base: http.DefaultTransport, Signer: exact.NewKeySigner(key), Policy: spend.policy, Journal: journal,
		Log: slog.New(slog.NewTextHandler(logOut, nil)),
	}
	a := newAccount(&f)
	a.Client.Transport = tr
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	t, raw, err := a.TopUp(ctx, n)
	if err != nil {
		if np, ok := errors.AsType[*client.NoPayableOptionError](err); ok {
			for _, o := range np.Options {
				printf(e.stderr, "  %s\n", o)
			}
			return fmt.Errorf("credits topup: no payment option of the top-up is allowed; nothing was signed or paid (%s spent)", spend.human(tr.Spent()))
		}
		return fmt.Errorf("credits topup: %w (%s of %s spent)", err, spend.human(tr.Spent()), spend.human(n))
	}
	if f.json {
		printf(e.stdout, "%s\n", bytes.TrimSpace(raw))
		return nil
	}
	printf(e.stdout, "credited %s to %s; balance %s; paid in transaction %s (ledger entry %s)\n",
		amountText(t.Credited, f.decimals), oneLine(t.Account, 64), amountText(t.Balance, f.decimals),
		oneLine(t.Transaction, 80), oneLine(string(t.LedgerSeq), 24))
	return nil
}

// amountText shows a decimal string of atomic units in whole tokens and
// atomic units, or says it is not an amount.
func amountText(s string, decimals int) string {
	n, err := exact.ParseUint256(s)
	if err != nil {
		return fmt.Sprintf("%q (not an amount)", oneLine(s, 80))
	}
	return fmt.Sprintf("%s (%s atomic units)", formatAmount(n, decimals), n)
}

// authorized returns an account that sends the API key of --api-key-file or
// $LLM4AGENTS_API_KEY, or else one signed in with the wallet.
func authorized(ctx context.Context, f *accountFlags, apiKeyFile string, e env) (*client.Account, error) {
	if err := f.check(e.getenv); err != nil {
		return nil, err
	}
	if apiKeyFile == "" && e.getenv(apiKeyEnv) == "" {
		return signedIn(ctx, f, e)
	}
	if f.keyFile != "" {
		return nil, errors.New("give either an API key or a wallet key, not both")
	}
	k, err := loadAPIKey(apiKeyFile, e.getenv)
	if err != nil {
		return nil, err
	}
	a := newAccount(f)
	a.Token = k
	return a, nil
}

// loadAPIKey reads an sk-l4a- key from the file, or from $LLM4AGENTS_API_KEY.
// No error repeats any part of it.
func loadAPIKey(path string, getenv func(string) string) (client.Secret, error) {
	src := ""
	switch {
	case path != "" && getenv(apiKeyEnv) != "":
		return "", fmt.Errorf("API key: both --api-key-file and %s are set; use one", apiKeyEnv)
	case path == "":
		src = apiKeyEnv
	}
	raw, err := config.ReadSecret(path, src, getenv)
	if err != nil {
		return "", fmt.Errorf("API key: %w", err)
	}
	raw = strings.TrimSpace(raw)
	if !strings.HasPrefix(raw, "sk-l4a-") || !isToken(raw) || len(raw) > 256 {
		return "", errors.New("API key: not an sk-l4a- key (value not echoed)")
	}
	return client.Secret(raw), nil
}

func creditsBalance(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("credits balance", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var f accountFlags
	f.register(fs, true, true)
	var apiKeyFile string
	fs.StringVar(&apiKeyFile, "api-key-file", "", "file holding an sk-l4a- API key to ask with instead of signing in (or set "+apiKeyEnv+")")
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return errors.New("credits balance: takes no arguments, only flags")
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	a, err := authorized(ctx, &f, apiKeyFile, e)
	if err != nil {
		return fmt.Errorf("credits balance: %w", err)
	}
	bal, raw, err := a.Balance(ctx)
	if err != nil {
		return fmt.Errorf("credits balance: %w", err)
	}
	if f.json {
		printf(e.stdout, "%s\n", bytes.TrimSpace(raw))
		return nil
	}
	printf(e.stdout, "account %s\nbalance %s\nheld    %s (reserved for calls in progress)\nasset   %s\n",
		oneLine(bal.Account, 64), amountText(bal.Balance, f.decimals), amountText(bal.Held, f.decimals), oneLine(bal.Asset, 100))
	return nil
}

// receiptResult is one receipt with what its verification found.
type receiptResult struct {
	Receipt   json.RawMessage `json:"receipt"`
	Signature string          `json:"signature"`
	Verified  bool            `json:"verified"`
	Signer    string          `json:"signer,omitempty"`
	Error     string          `json:"error,omitempty"`

	r *receipt.Receipt
}

func creditsReceipts(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("credits receipts", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		printf(e.stderr, "usage: llm4agents credits receipts --gateway URL [flags]\n\n"+
			"Lists the latest signed receipts of credit-paid calls, newest first, and verifies each against\n"+
			"the gateway's published signer. Signed in with the wallet, it lists every key's receipts of the\n"+
			"account (--key-id: one key's); with an API key, only the receipts of that key's own calls.\n\nflags:\n")
		fs.PrintDefaults()
	}
	var f accountFlags
	f.register(fs, true, true)
	var apiKeyFile, id, keyID string
	var limit int
	fs.StringVar(&apiKeyFile, "api-key-file", "", "file holding an sk-l4a- API key to ask with instead of signing in, seeing that key's receipts only (or set "+apiKeyEnv+")")
	fs.IntVar(&limit, "limit", 20, fmt.Sprintf("how many of the latest receipts, 1 to %d", maxReceiptsLimit))
	fs.StringVar(&id, "id", "", "one receipt, by its request id (0x and 64 hex digits)")
	fs.StringVar(&keyID, "key-id", "", "only the receipts of this key, by its id as keys list shows it (signed in with the wallet only)")
	pos, err := parseSub(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return errors.New("credits receipts: takes no arguments, only flags")
	case limit < 1 || limit > maxReceiptsLimit:
		return fmt.Errorf("credits receipts: --limit %d is outside [1, %d]", limit, maxReceiptsLimit)
	case id != "" && (!isToken(id) || strings.ContainsAny(id, "/?#%") || len(id) > 80):
		return errors.New("credits receipts: --id is not a request id")
	case strings.HasPrefix(keyID, "sk-l4a-") || strings.HasPrefix(keyID, "sess-l4a-"):
		// A secret in the wrong flag: say so without repeating it.
		return errors.New("credits receipts: --key-id takes a key's id (0x...), not an API key or token (value not echoed)")
	case keyID != "" && (!isToken(keyID) || strings.ContainsAny(keyID, "/?#%&+") || len(keyID) > 128):
		return errors.New("credits receipts: --key-id is not a key id, as keys list shows it")
	case keyID != "" && id != "":
		return errors.New("credits receipts: give --id or --key-id, not both")
	case keyID != "" && (apiKeyFile != "" || e.getenv(apiKeyEnv) != ""):
		// The gateway holds an API key to its own receipts whatever it
		// asks; refuse here rather than send a request it will refuse.
		return errors.New("credits receipts: --key-id needs a wallet sign-in; an API key lists only its own receipts")
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	a, err := authorized(ctx, &f, apiKeyFile, e)
	if err != nil {
		return fmt.Errorf("credits receipts: %w", err)
	}
	var envelopes []json.RawMessage
	if id != "" {
		raw, err := a.Receipt(ctx, id)
		if err != nil {
			return fmt.Errorf("credits receipts: %w", err)
		}
		envelopes = append(envelopes, raw)
	} else if envelopes, err = a.Receipts(ctx, limit, keyID); err != nil {
		return fmt.Errorf("credits receipts: %w", err)
	}
	verifier := newReceiptVerifier(f.timeout)
	bad := 0
	results := make([]receiptResult, 0, len(envelopes))
	for _, env := range envelopes {
		res := verifyEnvelope(ctx, verifier, f.base, env)
		if !res.Verified {
			bad++
		}
		results = append(results, res)
	}
	if f.json {
		writeJSON(e.stdout, map[string]any{"data": results, "verified": len(results) - bad, "failed": bad})
	} else {
		printReceipts(e.stdout, results, f.decimals)
	}
	if bad > 0 {
		return fmt.Errorf("credits receipts: %d of %d receipts do not verify against %s%s", bad, len(results), f.base, receipt.WellKnownPath)
	}
	return nil
}

// verifyEnvelope decodes one {receipt, signature} and verifies it against
// the gateway's published signer.
func verifyEnvelope(ctx context.Context, v *client.ReceiptVerifier, base *url.URL, env json.RawMessage) receiptResult {
	res := receiptResult{}
	r, sig, err := receipt.ParseEnvelope(bytes.TrimSpace(env))
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.r = r
	if res.Receipt, err = r.MarshalJSON(); err != nil {
		res.Error = err.Error()
		return res
	}
	res.Signature = fmt.Sprintf("0x%x", sig)
	signer, err := v.VerifySigner(ctx, client.OriginOf(base), r, sig)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Verified, res.Signer = true, signer.Hex()
	return res
}

// printReceipts writes one block per receipt for a person.
func printReceipts(w io.Writer, results []receiptResult, decimals int) {
	if len(results) == 0 {
		printf(w, "no receipts\n")
	}
	for _, res := range results {
		if res.r == nil {
			printf(w, "receipt NOT verified: %s\n\n", res.Error)
			continue
		}
		r := res.r
		printf(w, "request %s\n", r.RequestID.Hex())
		printf(w, "  model    %s\n", oneLine(r.Model, 100))
		printf(w, "  tokens   %s in, %s out\n", r.InputTokens, r.OutputTokens)
		printf(w, "  amount   %s\n", atomicText(r.Amount, decimals))
		printf(w, "  balance  %s after\n", atomicText(r.BalanceAfter, decimals))
		printf(w, "  ledger   entry %s, issued %s\n", r.LedgerSeq, time.Unix(int64(min(r.IssuedAt, 1<<62)), 0).UTC().Format(time.RFC3339)) // #nosec G115 -- bounded above
		if res.Verified {
			printf(w, "  receipt verified (signer %s)\n\n", res.Signer)
		} else {
			printf(w, "  receipt NOT verified: %s\n\n", res.Error)
		}
	}
}

func atomicText(n *big.Int, decimals int) string {
	return fmt.Sprintf("%s (%s atomic units)", formatAmount(n, decimals), n)
}
