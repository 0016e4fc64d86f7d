package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/config"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// walletKeyEnv names the environment variable that may hold the buyer's key.
const walletKeyEnv = "LLM4AGENTS_WALLET_KEY"

// Spending defaults of pay and chat, in whole tokens at --decimals. They are
// deliberately small: the official client's default cap is $1 per payment.
const (
	defaultDecimals      = 6 // USDC's, and the demo token's
	defaultMaxPerPayment = "0.10"
	defaultBudget        = "1.00"
	// maxDecimals is the most decimals a uint256 token can use meaningfully.
	maxDecimals = 77
)

// knownUSDC are the assets paid when no --asset is given: Circle's USDC (6
// decimals, EIP-3009) on the networks where the official client has it as
// the default asset.
var knownUSDC = []client.Asset{
	{Network: "eip155:8453", Address: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"},   // Base
	{Network: "eip155:84532", Address: "0x036CbD53842c5426634e7929541eC2318f3dCF7e"},  // Base Sepolia
	{Network: "eip155:1", Address: "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"},      // Ethereum
	{Network: "eip155:43114", Address: "0xB97EF9Ef8734C71904D8002F8b6Bc66Dd9c48a6E"},  // Avalanche
	{Network: "eip155:137", Address: "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359"},    // Polygon
	{Network: "eip155:42161", Address: "0xaf88d065e77c8cC2239327C5EDb3A432268e5831"},  // Arbitrum One
	{Network: "eip155:421614", Address: "0x75faf114eafb1BDbe2F0316DF893fd58CE46AA4d"}, // Arbitrum Sepolia
}

// listFlag collects a repeatable flag; each value may also be a comma-separated
// list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// buyerFlags are the wallet and spending flags that pay and chat share.
type buyerFlags struct {
	keyFile  string
	maxPer   string
	budget   string
	decimals int
	networks listFlag
	assets   listFlag
	payTo    listFlag
	journal  string
	upto     string
}

func (b *buyerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&b.keyFile, "key-file", "", "file holding the wallet's hex private key (or set "+walletKeyEnv+"; never a flag value)")
	fs.StringVar(&b.maxPer, "max-per-payment", defaultMaxPerPayment, "most one payment may cost: whole tokens with a decimal point (0.05), or atomic units as an integer (50000)")
	fs.StringVar(&b.budget, "budget", defaultBudget, "most all payments of this run may cost together, in the same form as --max-per-payment")
	fs.IntVar(&b.decimals, "decimals", defaultDecimals, "decimals of the asset, to read and print amounts in whole tokens")
	fs.Var(&b.networks, "network", "CAIP-2 network a payment may use, such as eip155:8453 (repeatable; default: those of the assets)")
	fs.Var(&b.assets, "asset", "token a payment may use, NETWORK/0xTOKEN or 0xTOKEN for every --network (repeatable; default: USDC on Base, Ethereum, Polygon, Arbitrum, Avalanche and their testnets)")
	fs.Var(&b.payTo, "pay-to", "address a payment may go to (repeatable; default: any)")
	fs.StringVar(&b.upto, "upto", client.UptoPrefer.String(), "the upto scheme, which pays what the call cost up to the offer's maximum through Permit2 (see 'llm4agents wallet approve-permit2'): prefer (over exact), as-offered (in the server's order) or refuse")
	fs.StringVar(&b.journal, "journal", "", "directory of the payment journal: a call retried after a crash or a lost answer sends the payment it already signed instead of a second one (default: kept in memory for this run)")
}

// spending is the buyer flags checked and parsed.
type spending struct {
	policy   client.Policy
	decimals int
}

// parse checks every spending flag. Nothing here reads a file or the network.
func (b *buyerFlags) parse() (*spending, error) {
	if b.decimals < 0 || b.decimals > maxDecimals {
		return nil, fmt.Errorf("--decimals %d is outside [0, %d]", b.decimals, maxDecimals)
	}
	maxPer, err := parseAmount(b.maxPer, b.decimals)
	if err != nil {
		return nil, fmt.Errorf("--max-per-payment: %w", err)
	}
	budget, err := parseAmount(b.budget, b.decimals)
	if err != nil {
		return nil, fmt.Errorf("--budget: %w", err)
	}
	assets, err := b.allowedAssets()
	if err != nil {
		return nil, err
	}
	mode, err := parseUptoMode(b.upto)
	if err != nil {
		return nil, err
	}
	s := &spending{
		policy:   client.Policy{MaxPerRequest: maxPer, Budget: budget, Assets: assets, Upto: mode},
		decimals: b.decimals,
	}
	for _, v := range b.payTo {
		a, err := exact.ParseAddress(v)
		if err != nil {
			return nil, fmt.Errorf("--pay-to %q: %w", v, err)
		}
		// The client refuses any other recipient (client.RefusedPayTo).
		s.policy.PayTo = append(s.policy.PayTo, a.Hex())
	}
	return s, nil
}

// parseUptoMode reads --upto.
func parseUptoMode(v string) (client.UptoMode, error) {
	for _, m := range []client.UptoMode{client.UptoPrefer, client.UptoAsOffered, client.UptoRefuse} {
		if v == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("--upto %q: want prefer, as-offered or refuse", oneLine(v, 40))
}

// allowedAssets combines --network and --asset into the (network, token)
// pairs of the policy.
func (b *buyerFlags) allowedAssets() ([]client.Asset, error) {
	networks := map[string]bool{}
	for _, n := range b.networks {
		if _, err := exact.ChainID(n); err != nil {
			return nil, fmt.Errorf("--network %q: %w", n, err)
		}
		networks[n] = true
	}
	if len(b.assets) == 0 {
		var out []client.Asset
		for _, a := range knownUSDC {
			if len(networks) == 0 || networks[a.Network] {
				out = append(out, a)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("--network %s: no default asset (USDC) is known there; name the token with --asset", b.networks.String())
		}
		return out, nil
	}
	var out []client.Asset
	for _, v := range b.assets {
		network, addr, scoped := strings.Cut(v, "/")
		if !scoped {
			addr, network = v, ""
		}
		if _, err := exact.ParseAddress(addr); err != nil {
			return nil, fmt.Errorf("--asset %q: %w", v, err)
		}
		switch {
		case scoped:
			if _, err := exact.ChainID(network); err != nil {
				return nil, fmt.Errorf("--asset %q: %w", v, err)
			}
			if len(networks) > 0 && !networks[network] {
				return nil, fmt.Errorf("--asset %q: network %s is not among --network %s", v, network, b.networks.String())
			}
			out = append(out, client.Asset{Network: network, Address: addr})
		case len(networks) == 0:
			return nil, fmt.Errorf("--asset %q names no network: write NETWORK/0xTOKEN or give --network", v)
		default:
			for _, n := range b.networks {
				out = append(out, client.Asset{Network: n, Address: addr})
			}
		}
	}
	return out, nil
}

// openJournal opens the --journal directory, or returns nil, which gives the
// Transport a journal in memory for this run.
func (b *buyerFlags) openJournal() (client.Journal, error) {
	if b.journal == "" {
		return nil, nil
	}
	j, err := client.NewFileJournal(b.journal)
	if err != nil {
		return nil, fmt.Errorf("--journal: %w", err)
	}
	return j, nil
}

// describe says in one line what the policy allows, for a person.
func (s *spending) describe() string {
	var assets []string
	for _, a := range s.policy.Assets {
		assets = append(assets, a.Network+"/"+a.Address)
	}
	payTo := "any address"
	if len(s.policy.PayTo) > 0 {
		to := slices.Clone(s.policy.PayTo)
		slices.Sort(to)
		payTo = strings.Join(slices.Compact(to), ", ")
	}
	return fmt.Sprintf("at most %s per payment, %s in all; assets %s; pay to %s; upto %s",
		s.human(s.policy.MaxPerRequest), s.human(s.policy.Budget), strings.Join(assets, ", "), payTo, s.policy.Upto)
}

// human formats atomic units as whole tokens at the configured decimals.
func (s *spending) human(n *big.Int) string { return formatAmount(n, s.decimals) }

// parseAmount reads a money flag with pricing.ParseAmount, the one reading of
// amounts: a number with a decimal point is whole tokens at decimals ("0.05" is
// 50000 at 6 decimals), an integer is atomic units ("50000"). More fractional
// digits than decimals is an error, never a rounding.
func parseAmount(s string, decimals int) (*big.Int, error) {
	if decimals < 0 || decimals > maxDecimals {
		return nil, fmt.Errorf("--decimals %d is outside [0, %d]", decimals, maxDecimals)
	}
	return pricing.ParseAmount(s, uint8(decimals)) // #nosec G115 -- checked above
}

// formatAmount writes atomic units n as whole tokens at decimals with
// pricing.FormatAmount: 10000 at 6 decimals is "0.01", 1 is "0.000001",
// 1000000 is "1.00". decimals is a checked --decimals, in [0, maxDecimals].
func formatAmount(n *big.Int, decimals int) string {
	return pricing.FormatAmount(n, uint8(min(max(decimals, 0), maxDecimals))) // #nosec G115 -- clamped to [0, 77]
}

// loadWallet reads the buyer's key from the file at path, or else from
// $LLM4AGENTS_WALLET_KEY. No error repeats any part of the key. A key file that
// others may read draws a warning on warn.
func loadWallet(path string, getenv func(string) string, warn io.Writer) (*ecdsa.PrivateKey, error) {
	src := ""
	switch {
	case path != "" && getenv(walletKeyEnv) != "":
		return nil, fmt.Errorf("wallet key: both --key-file and %s are set; use one", walletKeyEnv)
	case path != "":
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 { // #nosec G703 -- the user names their own key file
			printf(warn, "llm4agents: warning: the key file %s can be read by other users (mode %v)\n", path, fi.Mode().Perm())
		}
	case getenv(walletKeyEnv) != "":
		src = walletKeyEnv
	default:
		return nil, fmt.Errorf("no wallet key: use --key-file PATH or set %s", walletKeyEnv)
	}
	raw, err := config.ReadSecret(path, src, getenv)
	if err != nil {
		return nil, fmt.Errorf("wallet key: %w", err)
	}
	key, err := parseKey(raw, "wallet")
	if err != nil {
		return nil, errors.New("wallet key: not a 32-byte hex private key (64 hex digits, 0x optional)")
	}
	return key, nil
}

// inspector is the http.RoundTripper under the client.Transport. It keeps the
// last PAYMENT-REQUIRED header, to explain a refusal, and notes each payment
// sent, to report it. It changes nothing: what may be paid is the
// Transport's Policy alone (--pay-to included, as Policy.PayTo). It never
// logs or keeps a payment header, only a digest of it.
type inspector struct {
	next http.RoundTripper

	mu       sync.Mutex
	required string // the last PAYMENT-REQUIRED header of an unpaid request, as sent
	// payments are the options paid, one per distinct PAYMENT-SIGNATURE, in
	// the order sent; seen holds the digests of those headers.
	payments []paidOption
	seen     map[[32]byte]bool
}

// paidOption is the requirement a payment accepted and where it stood in the
// accepts list of the 402 it answered.
type paidOption struct {
	Req x402.PaymentRequirements
	// Index is the position of Req in that 402's accepts, or -1 when no 402
	// seen here offered it (a payment header the user set with -H).
	Index int
}

// RoundTrip sends req, noting the payment it carries or the 402 it draws.
func (in *inspector) RoundTrip(req *http.Request) (*http.Response, error) {
	payment := req.Header.Get(x402.HeaderPaymentSignature)
	if payment != "" {
		in.notePayment(payment)
	}
	resp, err := in.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusPaymentRequired || payment != "" {
		return resp, err
	}
	if header := resp.Header.Get(x402.HeaderPaymentRequired); header != "" {
		in.mu.Lock()
		in.required = header
		in.mu.Unlock()
	}
	return resp, nil
}

func (in *inspector) notePayment(header string) {
	p, err := x402.DecodePaymentPayload(header)
	if err != nil {
		return
	}
	r, err := p.AcceptedRequirements()
	if err != nil {
		return
	}
	digest := sha256.Sum256([]byte(header))
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.seen == nil {
		in.seen = map[[32]byte]bool{}
	}
	if in.seen[digest] {
		return
	}
	in.seen[digest] = true
	index := -1
	if pr, err := x402.DecodePaymentRequired(in.required); err == nil {
		index = x402.FindMatch(pr.Accepts, r)
	}
	in.payments = append(in.payments, paidOption{Req: r, Index: index})
}

// mark returns a position in the payments sent, for paidSince.
func (in *inspector) mark() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.payments)
}

// paidSince returns the options paid after mark.
func (in *inspector) paidSince(mark int) []paidOption {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]paidOption(nil), in.payments[mark:]...)
}

// explain lists the options of the last 402 with why the Transport refused
// each, as np says. It returns nil when no 402 decoded.
func (in *inspector) explain(np *client.NoPayableOptionError) (*x402.PaymentRequired, []verdict) {
	in.mu.Lock()
	header := in.required
	in.mu.Unlock()
	pr, err := x402.DecodePaymentRequired(header)
	if err != nil || np == nil {
		return nil, nil
	}
	vs := make([]verdict, len(pr.Accepts))
	for i, r := range pr.Accepts {
		vs[i] = verdict{Index: i, Req: r, RefusalError: "unknown", Label: "not judged"}
	}
	for _, o := range np.Options {
		if o.Index >= 0 && o.Index < len(vs) {
			vs[o.Index] = verdict{Index: o.Index, Req: o.Requirements, RefusalError: string(o.RefusalError), Label: o.Label}
		}
	}
	return pr, vs
}

// verdict is what the spending flags make of one option of a 402.
type verdict struct {
	Index        int
	Req          x402.PaymentRequirements
	Pay          bool
	RefusalError string // a client.RefusalError, or "not_chosen"; "" when paid
	Label        string // why, for a person
}

// judge says what the spending flags would do with each option of a 402,
// without a key and without signing: it asks a throwaway client.Transport, with
// the same policy, a fresh budget, a signer that signs nothing and a base that
// answers with the 402 itself. So the verdicts are the client's own, for a
// first payment of a run. header is the 402's PAYMENT-REQUIRED.
func judge(ctx context.Context, s *spending, header string, pr *x402.PaymentRequired) ([]verdict, error) {
	vs := make([]verdict, len(pr.Accepts))
	all := make([]int, len(pr.Accepts))
	for i := range all {
		all[i] = i
	}
	chosen, refused, err := probe(ctx, s.policy, header, pr, all)
	if err != nil {
		return nil, err
	}
	if chosen < 0 {
		for j, o := range refused {
			vs[j] = verdict{Index: j, Req: o.Requirements, RefusalError: string(o.RefusalError), Label: o.Label}
		}
		return vs, nil
	}
	for i := range pr.Accepts {
		if i == chosen {
			vs[i] = verdict{Index: i, Req: pr.Accepts[i], Pay: true, Label: "would be paid"}
			continue
		}
		// Alone, would this one be paid? Then the client prefers the chosen one.
		c, refused, err := probe(ctx, s.policy, header, pr, []int{i})
		switch {
		case err != nil:
			return nil, err
		case c >= 0:
			vs[i] = verdict{Index: i, Req: pr.Accepts[i], RefusalError: "not_chosen", Label: fmt.Sprintf("payable, but option [%d] is preferred", chosen)}
		default:
			o := refused[0]
			vs[i] = verdict{Index: i, Req: o.Requirements, RefusalError: string(o.RefusalError), Label: o.Label}
		}
	}
	return vs, nil
}

// probe runs a throwaway Transport under policy on the 402 reduced to the
// options keep. It returns the index (into pr.Accepts) of the option the
// Transport chose, or -1 and its refusals in the order of keep.
func probe(ctx context.Context, policy client.Policy, header string, pr *x402.PaymentRequired, keep []int) (int, []client.Option, error) {
	reduced, err := withAccepts(header, keep)
	if err != nil {
		return -1, nil, err
	}
	base := &probeBase{required: reduced}
	tr := &client.Transport{Base: base, Signer: nullSigner{}, Policy: policy}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://dry-run.invalid/", nil)
	if err != nil {
		return -1, nil, err
	}
	resp, err := tr.RoundTrip(req)
	var np *client.NoPayableOptionError
	switch {
	case errors.As(err, &np):
		return -1, np.Options, nil
	case err != nil:
		return -1, nil, fmt.Errorf("judge the options: %w", err)
	}
	_ = resp.Body.Close() // http.NoBody
	for _, i := range keep {
		raw, err := pr.RawAccepted(i)
		if err == nil && sameJSON(raw, base.accepted) {
			return i, nil, nil
		}
	}
	return -1, nil, errors.New("judge the options: the client paid an option the 402 does not hold")
}

// probeBase answers the unpaid request with a 402 and the paid one with a 200,
// keeping the requirement the payment echoes.
type probeBase struct {
	required string
	accepted json.RawMessage
}

func (p *probeBase) RoundTrip(req *http.Request) (*http.Response, error) {
	resp := &http.Response{StatusCode: http.StatusPaymentRequired, Header: http.Header{}, Body: http.NoBody, Request: req}
	v := req.Header.Get(x402.HeaderPaymentSignature)
	if v == "" {
		resp.Header.Set(x402.HeaderPaymentRequired, p.required)
		return resp, nil
	}
	payload, err := x402.DecodePaymentPayload(v)
	if err != nil {
		return nil, err
	}
	p.accepted = payload.Accepted
	resp.StatusCode = http.StatusOK
	return resp, nil
}

// nullSigner stands in for the wallet in a dry run: it signs nothing and
// returns an all-zero signature that no one would accept.
type nullSigner struct{}

func (nullSigner) Address() common.Address { return common.Address{} }
func (nullSigner) SignDigest(context.Context, common.Hash) ([]byte, error) {
	return make([]byte, 65), nil
}

// withAccepts re-encodes a PAYMENT-REQUIRED header with only the options
// keep, each byte for byte as the server sent it, so a dry run can ask the
// client about each option alone. It works from the challenge as
// x402.DecodePaymentRequired reads it, which is what the Transport reads.
// Fields of the challenge that the decoder does not know are dropped.
func withAccepts(header string, keep []int) (string, error) {
	pr, err := x402.DecodePaymentRequired(header)
	if err != nil {
		return "", err
	}
	accepts := make([]json.RawMessage, 0, len(keep))
	for _, i := range keep {
		raw, err := pr.RawAccepted(i)
		if err != nil {
			return "", err
		}
		accepts = append(accepts, raw)
	}
	return x402.EncodeHeader(struct {
		X402Version int                        `json:"x402Version"`
		Error       string                     `json:"error,omitempty"`
		Resource    *x402.ResourceInfo         `json:"resource"`
		Accepts     []json.RawMessage          `json:"accepts"`
		Extensions  map[string]json.RawMessage `json:"extensions,omitempty"`
	}{pr.X402Version, pr.Error, pr.Resource, accepts, pr.Extensions})
}

// sameJSON compares two JSON texts ignoring insignificant white space.
func sameJSON(a, b []byte) bool {
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

var (
	_ http.RoundTripper = (*inspector)(nil)
	_ http.RoundTripper = (*probeBase)(nil)
	_ exact.Signer      = nullSigner{}
)
