package client_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/google/go-cmp/cmp"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
)

// otherToken is a second token the balance tests' policy allows on chain
// 1337 beside token.
const otherToken = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"

// ledgerBook is a Balances answering from a table by asset, as a node would,
// and recording each read. An asset it has no row for is ErrBalanceUnknown.
type ledgerBook struct {
	mu    sync.Mutex
	rows  map[common.Address]balanceRow
	reads []string // asset of each read, "token" or "other"
	owner []common.Address
}

type balanceRow struct {
	bal int64
	err error
	// permit2 is the payer's allowance to Permit2; nil: the book cannot
	// read it (ErrBalanceUnknown).
	permit2 *int64
}

func newLedgerBook(rows map[string]balanceRow) *ledgerBook {
	b := &ledgerBook{rows: map[common.Address]balanceRow{}}
	for name, r := range rows {
		b.rows[assetOf(name)] = r
	}
	return b
}

func assetOf(name string) common.Address {
	if name == "other" {
		return common.HexToAddress(otherToken)
	}
	return common.HexToAddress(token)
}

// nameOf is assetOf's inverse: "other" for otherToken, else "token".
func nameOf(asset common.Address) string {
	if asset == common.HexToAddress(otherToken) {
		return "other"
	}
	return "token"
}

func (b *ledgerBook) Balance(_ context.Context, network string, asset, owner common.Address) (*big.Int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads = append(b.reads, nameOf(asset))
	b.owner = append(b.owner, owner)
	r, ok := b.rows[asset]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: no row for %s on %s", client.ErrBalanceUnknown, asset.Hex(), network)
	case r.err != nil:
		return nil, r.err
	}
	return big.NewInt(r.bal), nil
}

// Permit2Allowance makes the book a client.Permit2Allowances; its reads
// are recorded as "<asset>:permit2".
func (b *ledgerBook) Permit2Allowance(_ context.Context, network string, asset, owner common.Address) (*big.Int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads = append(b.reads, nameOf(asset)+":permit2")
	b.owner = append(b.owner, owner)
	r, ok := b.rows[asset]
	if !ok || r.permit2 == nil {
		return nil, fmt.Errorf("%w: no allowance for %s on %s", client.ErrBalanceUnknown, asset.Hex(), network)
	}
	return big.NewInt(*r.permit2), nil
}

func (b *ledgerBook) set(name string, r balanceRow) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rows[assetOf(name)] = r
}

func (b *ledgerBook) snapshot() (reads []string, owners []common.Address) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.reads...), append([]common.Address(nil), b.owner...)
}

// balancePolicy is policy(10) that also allows otherToken and reads book.
func balancePolicy(book client.Balances) client.Policy {
	p := policy(10)
	p.Assets = append(p.Assets, client.Asset{Network: network, Address: otherToken})
	p.Balances = book
	return p
}

// TestTransportBalances: the first option the policy allows whose amount
// (an upto option's maximum) the payer's balance covers is paid; one it does
// not cover is passed over with RefusedBalance; a balance that cannot be read
// refuses nothing. Balances are read lazily, in the order the options are
// preferred, and never for an option the policy refuses.
func TestTransportBalances(t *testing.T) {
	other := withAsset(otherToken)
	readFailed := errors.New("node down")
	tests := []struct {
		name     string
		accepts  []x402.PaymentRequirements
		balances map[string]balanceRow
		// want
		wantPaid  []int
		wantSpent int64
		wantReads []string
		// wantRefusals, when set, expects a *NoPayableOptionError with these
		// refusals and labels.
		wantRefusals []client.RefusalError
		wantLabels   []string
	}{
		{
			name:     "first offer unfunded, the second is paid",
			accepts:  []x402.PaymentRequirements{offer(price), offer(price, other)},
			balances: map[string]balanceRow{"token": {bal: price - 1}, "other": {bal: price}},
			wantPaid: []int{1}, wantSpent: price, wantReads: []string{"token", "other"},
		},
		{
			name:     "first offer funded, nothing else is read",
			accepts:  []x402.PaymentRequirements{offer(price), offer(price, other)},
			balances: map[string]balanceRow{"token": {bal: 5 * price}, "other": {bal: 0}},
			wantPaid: []int{0}, wantSpent: price, wantReads: []string{"token"},
		},
		{
			name:     "a balance of exactly the amount pays",
			accepts:  []x402.PaymentRequirements{offer(price), offer(price, other)},
			balances: map[string]balanceRow{"token": {bal: price}, "other": {bal: price}},
			wantPaid: []int{0}, wantSpent: price, wantReads: []string{"token"},
		},
		{
			name:         "every offer unfunded",
			accepts:      []x402.PaymentRequirements{offer(price), offer(price/2, other)},
			balances:     map[string]balanceRow{"token": {bal: 0}, "other": {bal: price/2 - 1}},
			wantReads:    []string{"token", "other"},
			wantRefusals: []client.RefusalError{client.RefusedBalance, client.RefusedBalance},
			wantLabels: []string{
				"the payer holds 0 of the asset, less than the amount 10000",
				"the payer holds 4999 of the asset, less than the amount 5000",
			},
		},
		{
			name:     "a balance read error tries the option",
			accepts:  []x402.PaymentRequirements{offer(price), offer(price, other)},
			balances: map[string]balanceRow{"token": {err: readFailed}, "other": {bal: price}},
			wantPaid: []int{0}, wantSpent: price, wantReads: []string{"token"},
		},
		{
			name:     "a network the Balances cannot read tries the option",
			accepts:  []x402.PaymentRequirements{offer(price), offer(price, other)},
			balances: map[string]balanceRow{"other": {bal: price}},
			wantPaid: []int{0}, wantSpent: price, wantReads: []string{"token"},
		},
		{
			name: "options the policy refuses are never read",
			accepts: []x402.PaymentRequirements{
				offer(price + 1), // over the maximum
				offer(price, withAsset("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")),
				offer(price, withNetwork("eip155:8453")),
				offer(price, other),
			},
			balances: map[string]balanceRow{"token": {bal: 100 * price}, "other": {bal: price}},
			wantPaid: []int{3}, wantSpent: price, wantReads: []string{"other"},
		},
		{
			name:     "upto is compared at its maximum",
			accepts:  []x402.PaymentRequirements{offer(price / 2), uptoOffer(price)},
			balances: map[string]balanceRow{"token": {bal: price - 1}},
			// Upto is preferred, so read first; the exact offer is read next.
			wantPaid: []int{0}, wantSpent: price / 2, wantReads: []string{"token", "token"},
		},
		{
			name:     "upto funded at its maximum is preferred",
			accepts:  []x402.PaymentRequirements{offer(price / 2), uptoOffer(price)},
			balances: map[string]balanceRow{"token": {bal: price}},
			// The allowance cannot be read: upto is tried.
			wantPaid: []int{1}, wantSpent: price, wantReads: []string{"token", "token:permit2"},
		},
		{
			name:     "upto approved for exactly its maximum is paid",
			accepts:  []x402.PaymentRequirements{offer(price / 2), uptoOffer(price)},
			balances: map[string]balanceRow{"token": {bal: price, permit2: new(int64(price))}},
			wantPaid: []int{1}, wantSpent: price, wantReads: []string{"token", "token:permit2"},
		},
		{
			name:     "upto without a Permit2 approval: exact is paid instead",
			accepts:  []x402.PaymentRequirements{offer(price / 2), uptoOffer(price)},
			balances: map[string]balanceRow{"token": {bal: price, permit2: new(int64(0))}},
			wantPaid: []int{0}, wantSpent: price / 2, wantReads: []string{"token", "token:permit2", "token"},
		},
		{
			name:         "upto alone, its maximum above the Permit2 allowance",
			accepts:      []x402.PaymentRequirements{uptoOffer(price)},
			balances:     map[string]balanceRow{"token": {bal: 2 * price, permit2: new(int64(price - 1))}},
			wantReads:    []string{"token", "token:permit2"},
			wantRefusals: []client.RefusalError{client.RefusedPermit2Allowance},
			wantLabels: []string{"the payer's Permit2 allowance of the asset is 9999, less than the maximum 10000" +
				" (approve Permit2 once: llm4agents wallet approve-permit2)"},
		},
		{
			name:     "exact is never judged by the Permit2 allowance",
			accepts:  []x402.PaymentRequirements{offer(price)},
			balances: map[string]balanceRow{"token": {bal: price, permit2: new(int64(0))}},
			wantPaid: []int{0}, wantSpent: price, wantReads: []string{"token"},
		},
		{
			name:         "upto alone, unfunded at its maximum",
			accepts:      []x402.PaymentRequirements{uptoOffer(price)},
			balances:     map[string]balanceRow{"token": {bal: price - 1}},
			wantReads:    []string{"token"},
			wantRefusals: []client.RefusalError{client.RefusedBalance},
			wantLabels:   []string{"the payer holds 9999 of the asset, less than the maximum 10000"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, tc.accepts...)
			book := newLedgerBook(tc.balances)
			tr, _ := newTransport(t, balancePolicy(book), srv)

			rep, err := send(t, tr, srv.URL("/paid"), request{})
			if tc.wantRefusals != nil {
				var npe *client.NoPayableOptionError
				if !errors.As(err, &npe) {
					t.Fatalf("error = %v, want a NoPayableOptionError", err)
				}
				var refusals []client.RefusalError
				var labels []string
				for _, o := range npe.Options {
					refusals, labels = append(refusals, o.RefusalError), append(labels, o.Label)
				}
				if diff := cmp.Diff(tc.wantRefusals, refusals); diff != "" {
					t.Errorf("refusals (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(tc.wantLabels, labels); diff != "" {
					t.Errorf("labels (-want +got):\n%s", diff)
				}
			} else if err != nil || rep.resp.StatusCode != http.StatusOK {
				t.Fatalf("request: %v", err)
			}

			if _, paid := srv.snapshot(); !cmp.Equal(tc.wantPaid, paid) {
				t.Errorf("paid options %v, want %v", paid, tc.wantPaid)
			}
			reads, owners := book.snapshot()
			if diff := cmp.Diff(tc.wantReads, reads); diff != "" {
				t.Errorf("balances read (-want +got):\n%s", diff)
			}
			for _, o := range owners {
				if o != testchain.DevAddress(0) {
					t.Errorf("balance read for %s, want the payer %s", o.Hex(), testchain.DevAddress(0).Hex())
				}
			}
			// An option passed over holds nothing.
			checkLedger(t, tr, tc.wantSpent, 10*price-tc.wantSpent)
		})
	}
}

// TestTransportBalancesNotReadForARecordedCall: a call that already signed an
// authorization (its answer was lost) is never judged by balance again, its
// payment may have moved the funds: the recorded authorization is sent
// again, and once it is too close to its validBefore a fresh one is signed
// for the same call, both without a read.
func TestTransportBalancesNotReadForARecordedCall(t *testing.T) {
	tests := []struct {
		name    string
		advance time.Duration // clock moved between the two tries
		// wantSameNonce: the retry carries the recorded authorization.
		wantSameNonce bool
		wantHeld      int64 // held after the retry
	}{
		{name: "recorded authorization sent again", wantSameNonce: true},
		// 60 s validity, 30 s margin: past 30 s the recorded one is not
		// reused; the first may still settle, so it stays held.
		{name: "fresh authorization for the same call", advance: 30 * time.Second, wantHeld: price},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{now: testNow}
			srv := newServer(t, offer(price))
			srv.extensions = declared
			srv.verifier.Now = clk.Now
			srv.script = []afterPay{paidHangUp, paidOK}
			book := newLedgerBook(map[string]balanceRow{"token": {bal: price}})
			tr, _ := newTransport(t, balancePolicy(book), srv)
			tr.Now = clk.Now
			tr.Retry.MaxAttempts = 1
			noReuse(t, tr)
			if _, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody}); err == nil {
				t.Fatal("first try succeeded")
			}
			// The lost payment was settled: the balance is gone.
			book.set("token", balanceRow{bal: 0})
			clk.add(tc.advance)

			rep, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody})
			if err != nil || rep.resp.StatusCode != http.StatusOK {
				t.Fatalf("retry: %v", err)
			}
			if reads, _ := book.snapshot(); len(reads) != 1 {
				t.Errorf("balances read %d times, want once, for the first authorization", len(reads))
			}
			paid := srv.paidRequests()
			if len(paid) != 2 || paid[0].ID != paid[1].ID || (paid[0].Nonce == paid[1].Nonce) != tc.wantSameNonce {
				t.Fatalf("sends %+v: want two of one call, same authorization %v", paid, tc.wantSameNonce)
			}
			checkLedger(t, tr, price, 10*price-price-tc.wantHeld)
		})
	}
}

// TestTransportBalancesConcurrent: calls in flight together each pass over
// the unfunded offer, and the amounts held while balances are read and
// released when an offer is passed over never let them pay more than the
// budget, nor leave anything held.
func TestTransportBalancesConcurrent(t *testing.T) {
	const calls, affordable = 32, 10
	srv := newServer(t, offer(price), offer(price, withAsset(otherToken)))
	srv.extensions = declared
	book := newLedgerBook(map[string]balanceRow{"token": {bal: price - 1}, "other": {bal: 1000 * price}})
	tr, _ := newTransport(t, balancePolicy(book), srv)

	start := make(chan struct{})
	errs := make(chan error, calls)
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			<-start
			rep, err := send(t, tr, srv.URL("/paid"), request{method: http.MethodPost, body: chatBody})
			if err == nil && rep.resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("answer %d %q", rep.resp.StatusCode, rep.body)
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)

	ok, refused := 0, 0
	for err := range errs {
		var npe *client.NoPayableOptionError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &npe) && len(npe.Options) == 2 && npe.Options[1].RefusalError == client.RefusedOverBudget:
			refused++
		default:
			t.Errorf("call failed: %v", err)
		}
	}
	if ok != affordable || refused != calls-affordable {
		t.Errorf("%d paid and %d refused, want %d and %d", ok, refused, affordable, calls-affordable)
	}
	_, paid := srv.snapshot()
	for _, i := range paid {
		if i != 1 {
			t.Errorf("paid option [%d], want [1] each time", i)
		}
	}
	if len(paid) != affordable {
		t.Errorf("server received %d payments, want %d", len(paid), affordable)
	}
	checkLedger(t, tr, affordable*price, 0)
}

// TestNodeBalances reads balances from a simulated chain with minted tokens.
func TestNodeBalances(t *testing.T) {
	chain := testchain.NewSimulated(t)
	minted := testchain.DevAddress(testchain.SimulatedPayers + 1)
	chain.Mint(t, minted, big.NewInt(1234))
	b := client.NewNodeBalances(chain.Client, chain.ChainID)
	if got, want := b.Network(), "eip155:1337"; got != want {
		t.Errorf("Network() = %q, want %q", got, want)
	}
	tests := []struct {
		name    string
		network string
		asset   common.Address
		owner   common.Address
		want    *big.Int
		wantErr error // wrapped by the error; nil: no error
		// wantFailure: an error other than ErrBalanceUnknown.
		wantFailure bool
	}{
		{name: "minted", network: "eip155:1337", asset: chain.Token, owner: minted, want: big.NewInt(1234)},
		{name: "a funded payer", network: "eip155:1337", asset: chain.Token, owner: testchain.DevAddress(1), want: big.NewInt(testchain.SimulatedPayerBalance)},
		{name: "never held any", network: "eip155:1337", asset: chain.Token, owner: testchain.DevAddress(0), want: new(big.Int)},
		{name: "another chain", network: "eip155:8453", asset: chain.Token, owner: minted, wantErr: client.ErrBalanceUnknown},
		{name: "not an eip155 network", network: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", asset: chain.Token, owner: minted, wantErr: client.ErrBalanceUnknown},
		{name: "no contract at the asset", network: "eip155:1337", asset: testchain.DevAddress(2), owner: minted, wantFailure: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := b.Balance(t.Context(), tc.network, tc.asset, tc.owner)
			switch {
			case tc.wantFailure:
				if err == nil || errors.Is(err, client.ErrBalanceUnknown) {
					t.Fatalf("Balance = %v, %v; want an error other than ErrBalanceUnknown", got, err)
				}
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Balance = %v, %v; want an error wrapping %v", got, err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("Balance: %v", err)
			case got.Cmp(tc.want) != 0:
				t.Errorf("Balance = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestTransportNodeBalances: a Transport reading a real chain passes over the
// offer of a token the payer does not hold and pays with one it holds.
func TestTransportNodeBalances(t *testing.T) {
	chain := testchain.NewSimulated(t)
	held := deployToken(t, chain)
	payer := testchain.DevAddress(0) // newTransport's signer: no tokens of chain.Token
	mintOf(t, chain, held, payer, big.NewInt(price))

	srv := newServer(t, offer(price, withAsset(chain.Token.Hex())), offer(price, withAsset(held.Hex())))
	pol := policy(10)
	pol.Assets = []client.Asset{{Network: network, Address: chain.Token.Hex()}, {Network: network, Address: held.Hex()}}
	pol.Balances = client.NewNodeBalances(chain.Client, chain.ChainID)
	tr, logs := newTransport(t, pol, srv)

	rep, err := send(t, tr, srv.URL("/paid"), request{})
	if err != nil || rep.resp.StatusCode != http.StatusOK {
		t.Fatalf("request: %v", err)
	}
	if _, paid := srv.snapshot(); !cmp.Equal([]int{1}, paid) {
		t.Errorf("paid options %v, want [1], the token the payer holds", paid)
	}
	if !containsAll(logs.String(), "option passed over: the balance does not cover it", `"balance":"0"`) {
		t.Errorf("the log does not say why option [0] was passed over:\n%s", logs)
	}
}

// deployToken deploys a second EIP-3009 token from dev account 0, named as
// the offers name USDC.
func deployToken(tb testing.TB, chain *testchain.Simulated) common.Address {
	tb.Helper()
	addr, tx, _, err := contracts.DeployEIP3009Token(chain.Transactor(tb, 0), chain.Client, "USD Coin", "2", 6)
	if err != nil {
		tb.Fatalf("deploy a second token: %v", err)
	}
	mined(tb, chain, tx)
	return addr
}

// mintOf mints amount of the token at tokenAddr to to.
func mintOf(tb testing.TB, chain *testchain.Simulated, tokenAddr, to common.Address, amount *big.Int) {
	tb.Helper()
	tok, err := contracts.NewEIP3009Token(tokenAddr, chain.Client)
	if err != nil {
		tb.Fatal(err)
	}
	tx, err := tok.Mint(chain.Transactor(tb, 0), to, amount)
	if err != nil {
		tb.Fatalf("mint: %v", err)
	}
	mined(tb, chain, tx)
}

func mined(tb testing.TB, chain *testchain.Simulated, tx *types.Transaction) {
	tb.Helper()
	if r := chain.Mine(tb, tx); r.Status != types.ReceiptStatusSuccessful {
		tb.Fatalf("transaction %s reverted", tx.Hash().Hex())
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestNodeBalancesPermit2Allowance reads the ERC-20 allowance to Permit2
// from the simulated chain: the maximum once approved, 0 before; another
// network is ErrBalanceUnknown, an asset without code a failure.
func TestNodeBalancesPermit2Allowance(t *testing.T) {
	chain := testchain.NewSimulated(t)
	chain.ApprovePermit2(t, 1)
	b := client.NewNodeBalances(chain.Client, chain.ChainID)
	maxUint256 := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	tests := []struct {
		name        string
		network     string
		asset       common.Address
		owner       common.Address
		want        *big.Int
		wantUnknown bool
		wantFailure bool
	}{
		{name: "approved", network: "eip155:1337", asset: chain.Token, owner: testchain.DevAddress(1), want: maxUint256},
		{name: "never approved", network: "eip155:1337", asset: chain.Token, owner: testchain.DevAddress(2), want: new(big.Int)},
		{name: "another chain", network: "eip155:8453", asset: chain.Token, owner: testchain.DevAddress(1), wantUnknown: true},
		{name: "no contract at the asset", network: "eip155:1337", asset: testchain.DevAddress(3), owner: testchain.DevAddress(1), wantFailure: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := b.Permit2Allowance(t.Context(), tc.network, tc.asset, tc.owner)
			switch {
			case tc.wantUnknown:
				if !errors.Is(err, client.ErrBalanceUnknown) {
					t.Fatalf("Permit2Allowance = %v, %v; want ErrBalanceUnknown", got, err)
				}
			case tc.wantFailure:
				if err == nil || errors.Is(err, client.ErrBalanceUnknown) {
					t.Fatalf("Permit2Allowance = %v, %v; want an error other than ErrBalanceUnknown", got, err)
				}
			case err != nil || got.Cmp(tc.want) != 0:
				t.Fatalf("Permit2Allowance = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
