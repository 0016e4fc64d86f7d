package ledger_test

import (
	"errors"
	"math"
	"math/big"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

var (
	payer   = common.HexToAddress("0x857B06519E91e3A54538791bDbb0E22373e36b66")
	owner   = "0x857b06519e91e3a54538791bdbb0e22373e36b66"
	network = "eip155:84532"
	token   = common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e")
	mini    = pricing.Price{Input: 150_000, Output: 600_000} // gpt-4o-mini, micro-USD per million tokens
)

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newLedger returns a Ledger on a new SQLite file, with the store's clock.
func newLedger(t *testing.T) (*ledger.Ledger, *sqlite.DB, *testClock) {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "llm4agents.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	clk := &testClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	db.Now = clk.Now
	l, err := ledger.New(db, ledger.Config{Asset: ledger.AssetID(network, token)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l, db, clk
}

func topUp(t *testing.T, l *ledger.Ledger, ref string, amount int64) {
	t.Helper()
	if _, err := l.TopUp(t.Context(), ref, payer, big.NewInt(amount)); err != nil {
		t.Fatalf("TopUp(%s, %d): %v", ref, amount, err)
	}
}

func balance(t *testing.T, l *ledger.Ledger) (avail, held int64) {
	t.Helper()
	b, err := l.Balance(t.Context(), payer)
	if err != nil {
		t.Fatal(err)
	}
	return b.Available.Int64(), b.Held.Int64()
}

func TestIDs(t *testing.T) {
	if got, want := ledger.AssetID(network, token), "eip155:84532/erc20:0x036cbd53842c5426634e7929541ec2318f3dcf7e"; got != want {
		t.Errorf("AssetID() = %q, want %q", got, want)
	}
	tx := common.HexToHash("0xABCDEF0000000000000000000000000000000000000000000000000000000012")
	if got, want := ledger.SettlementRef(network, tx, 7), "eip155:84532:0xabcdef0000000000000000000000000000000000000000000000000000000012:7"; got != want {
		t.Errorf("SettlementRef() = %q, want %q", got, want)
	}
	if !store.ValidAsset(ledger.AssetID(network, token)) || !store.ValidID(ledger.SettlementRef(network, tx, math.MaxUint32)) {
		t.Error("AssetID or SettlementRef is not valid for the store")
	}
}

func TestMaxCost(t *testing.T) {
	for _, tc := range []struct {
		name           string
		prompt, output int64
		p              pricing.Price
		want           int64
	}{
		{"gpt-4o-mini, 1000 in, 4096 out", 1000, 4096, mini, 2608}, // 150 + 2457.6, rounded up
		{"exact", 1_000_000, 1_000_000, mini, 750_000},
		{"not rounded to the cent", 1, 0, mini, 1},
		{"free", 1000, 1000, pricing.Price{}, 0},
		{"no tokens", 0, 0, mini, 0},
		{"negative counts count as zero", -10, -10, mini, 0},
	} {
		if got := ledger.MaxCost(tc.prompt, tc.output, tc.p); got.Cmp(big.NewInt(tc.want)) != 0 {
			t.Errorf("%s: MaxCost() = %s, want %d", tc.name, got, tc.want)
		}
	}
}

// TestCall walks a credit-paid call: top-up, hold of the maximum cost,
// capture of the actual cost, and the statement it leaves.
func TestCall(t *testing.T) {
	ctx := t.Context()
	l, _, clk := newLedger(t)
	topUp(t, l, "eip155:84532:0xaa:0", 1_000_000)
	h, err := l.Reserve(ctx, ledger.Call{RequestID: "req-1", Payer: payer, PromptTokens: 1000, OutputBound: 4096, Price: mini})
	if err != nil {
		t.Fatal(err)
	}
	if h.Amount != 2608 || h.Owner != owner || h.ExpiresAt != clk.Now().Add(ledger.DefaultHoldTTL) {
		t.Errorf("Reserve() = %+v", h)
	}
	if a, held := balance(t, l); a != 1_000_000-2608 || held != 2608 {
		t.Errorf("balance after hold = %d available, %d held", a, held)
	}
	clk.Advance(2 * time.Second)
	c, err := l.Charge(ctx, "req-1", chat.Usage{PromptTokens: 1000, CompletionTokens: 500}, mini)
	if err != nil {
		t.Fatal(err)
	}
	// 1000 x 0.15 + 500 x 0.60 = 450 micro-USD.
	want := ledger.Charge{
		Hold: c.Hold, Cost: big.NewInt(450), Charged: big.NewInt(450), Loss: big.NewInt(0),
		BalanceAfter: big.NewInt(1_000_000 - 450), Seq: c.Hold.ResolvedSeq, At: clk.Now(),
	}
	if diff := cmp.Diff(want, c, cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("Charge() (-want +got):\n%s", diff)
	}
	if a, held := balance(t, l); a != 1_000_000-450 || held != 0 {
		t.Errorf("balance after charge = %d available, %d held", a, held)
	}
	// Charging again is the same charge; for another cost it conflicts.
	again, err := l.Charge(ctx, "req-1", chat.Usage{PromptTokens: 1000, CompletionTokens: 500}, mini)
	if err != nil || again.Seq != c.Seq || again.Charged.Cmp(c.Charged) != 0 {
		t.Errorf("Charge() again = %+v, %v", again, err)
	}
	if _, err := l.Charge(ctx, "req-1", chat.Usage{PromptTokens: 1000, CompletionTokens: 501}, mini); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Charge() for another cost = %v, want ErrConflict", err)
	}
	stmt, err := l.Statement(ctx, payer, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []store.EntryKind
	for _, e := range stmt {
		kinds = append(kinds, e.Kind)
	}
	if diff := cmp.Diff([]store.EntryKind{store.EntryCredit, store.EntryHold, store.EntryCapture}, kinds); diff != "" {
		t.Errorf("statement (-want +got):\n%s", diff)
	}
}

// TestStreamCut: a stream cut before any token charges nothing; one cut
// mid-way charges what was delivered (D16).
func TestStreamCut(t *testing.T) {
	ctx := t.Context()
	l, _, _ := newLedger(t)
	topUp(t, l, "ref-1", 1_000_000)
	call := ledger.Call{Payer: payer, PromptTokens: 2000, OutputBound: 1000, Price: mini}
	call.RequestID = "before-any-token"
	if _, err := l.Reserve(ctx, call); err != nil {
		t.Fatal(err)
	}
	c, err := l.Release(ctx, "before-any-token")
	if err != nil || c.Charged.Sign() != 0 || c.BalanceAfter.Int64() != 1_000_000 {
		t.Errorf("Release() = %+v, %v; want nothing charged", c, err)
	}
	call.RequestID = "mid-way"
	if _, err := l.Reserve(ctx, call); err != nil {
		t.Fatal(err)
	}
	c, err = l.Charge(ctx, "mid-way", chat.Usage{PromptTokens: 2000, CompletionTokens: 123}, mini)
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(300 + 74); c.Charged.Int64() != want { // 2000 x 0.15 + 123 x 0.6 = 373.8, rounded up
		t.Errorf("charged %s for a cut stream, want %d", c.Charged, want)
	}
	if _, err := l.Release(ctx, "mid-way"); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Release() of a charged hold = %v, want ErrConflict", err)
	}
}

func TestReserveRefused(t *testing.T) {
	ctx := t.Context()
	l, _, _ := newLedger(t)
	call := ledger.Call{RequestID: "r1", Payer: payer, PromptTokens: 1000, OutputBound: 4096, Price: mini}
	_, err := l.Reserve(ctx, call)
	var ie *store.InsufficientError
	if !errors.As(err, &ie) || *ie != (store.InsufficientError{Limit: store.LimitBalance, Available: 0, Requested: 2608}) {
		t.Fatalf("Reserve() without credit = %v, want an InsufficientError with 0 and 2608", err)
	}
	topUp(t, l, "ref-1", 3000)
	call.Key = &ledger.Key{ID: "sk-1", TotalCap: big.NewInt(5000), PeriodCap: big.NewInt(4000), Period: 24 * time.Hour}
	if _, err := l.Reserve(ctx, call); err != nil {
		t.Fatal(err)
	}
	topUp(t, l, "ref-2", 10_000)
	call.RequestID = "r2"
	_, err = l.Reserve(ctx, call)
	if !errors.As(err, &ie) || *ie != (store.InsufficientError{Limit: store.LimitKeyTotal, Available: 5000 - 2608, Requested: 2608}) {
		t.Fatalf("Reserve() over the key's total cap = %v", err)
	}
	call.Key.TotalCap = nil
	_, err = l.Reserve(ctx, call)
	if !errors.As(err, &ie) || *ie != (store.InsufficientError{Limit: store.LimitKeyPeriod, Available: 4000 - 2608, Requested: 2608}) {
		t.Fatalf("Reserve() over the key's period cap = %v", err)
	}
	// A cap beyond int64 binds nothing.
	call.Key.PeriodCap = new(big.Int).Lsh(big.NewInt(1), 100)
	if _, err := l.Reserve(ctx, call); err != nil {
		t.Fatalf("Reserve() under a huge cap: %v", err)
	}
	// The window counts only the holds made under a period cap.
	u, err := l.KeyUsage(ctx, ledger.Key{ID: "sk-1", PeriodCap: big.NewInt(1), Period: 24 * time.Hour})
	if err != nil || u.Held != 2*2608 || u.PeriodHeld != 2608 {
		t.Errorf("KeyUsage() = %+v, %v", u, err)
	}
}

func TestChargeShortfall(t *testing.T) {
	ctx := t.Context()
	l, _, _ := newLedger(t)
	topUp(t, l, "ref-1", 1_000_000)
	if _, err := l.Reserve(ctx, ledger.Call{RequestID: "r1", Payer: payer, PromptTokens: 100, OutputBound: 10, Price: mini}); err != nil {
		t.Fatal(err)
	}
	// The upstream produced more than the bound: the payer pays the hold, no more.
	c, err := l.Charge(ctx, "r1", chat.Usage{PromptTokens: 100, CompletionTokens: 1000}, mini)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cost.Int64() != 615 || c.Charged.Int64() != 21 || c.Loss.Int64() != 594 || c.BalanceAfter.Int64() != 1_000_000-21 {
		t.Errorf("Charge() beyond the hold = cost %s charged %s loss %s balance %s", c.Cost, c.Charged, c.Loss, c.BalanceAfter)
	}
	// A cost beyond the ledger's bound is recorded at the bound, all loss.
	if _, err := l.Reserve(ctx, ledger.Call{RequestID: "r2", Payer: payer, PromptTokens: 1, Price: mini}); err != nil {
		t.Fatal(err)
	}
	c, err = l.Charge(ctx, "r2", chat.Usage{CompletionTokens: math.MaxInt64}, pricing.Price{Output: math.MaxUint64})
	if err != nil {
		t.Fatal(err)
	}
	if c.Cost.Int64() != store.MaxAmount || c.Charged.Int64() != 1 {
		t.Errorf("Charge() of an absurd cost = cost %s charged %s", c.Cost, c.Charged)
	}
}

func TestTopUpOnce(t *testing.T) {
	ctx := t.Context()
	l, _, _ := newLedger(t)
	ref := ledger.SettlementRef(network, common.HexToHash("0x01"), 3)
	first, err := l.TopUp(ctx, ref, payer, big.NewInt(50_000))
	if err != nil {
		t.Fatal(err)
	}
	again, err := l.TopUp(ctx, ref, payer, big.NewInt(50_000))
	if err != nil || again.Seq != first.Seq {
		t.Errorf("replayed TopUp() = %+v, %v; want the first entry", again, err)
	}
	if _, err := l.TopUp(ctx, ref, payer, big.NewInt(50_001)); !errors.Is(err, store.ErrConflict) {
		t.Errorf("TopUp() with the same ref and another amount = %v, want ErrConflict", err)
	}
	if a, _ := balance(t, l); a != 50_000 {
		t.Errorf("balance = %d after a replayed top-up, want 50000", a)
	}
}

func TestSweepExpired(t *testing.T) {
	ctx := t.Context()
	l, _, clk := newLedger(t)
	topUp(t, l, "ref-1", 1_000_000)
	for _, id := range []string{"a", "b", "c"} {
		if _, err := l.Reserve(ctx, ledger.Call{RequestID: id, Payer: payer, PromptTokens: 1000, Price: mini}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := l.SweepExpired(ctx); n != 0 || err != nil {
		t.Errorf("SweepExpired() before the TTL = %d, %v", n, err)
	}
	clk.Advance(ledger.DefaultHoldTTL)
	if n, err := l.SweepExpired(ctx); n != 3 || err != nil {
		t.Errorf("SweepExpired() = %d, %v; want 3", n, err)
	}
	if a, held := balance(t, l); a != 1_000_000 || held != 0 {
		t.Errorf("balance after the sweep = %d, %d held", a, held)
	}
}

// TestBadInput: malformed and hostile input is refused with an error, and
// nothing is charged or credited.
func TestBadInput(t *testing.T) {
	ctx := t.Context()
	l, db, _ := newLedger(t)
	topUp(t, l, "ref-0", 1_000_000)
	zero := common.Address{}
	huge := new(big.Int).Lsh(big.NewInt(1), 200)
	call := func(mod func(*ledger.Call)) func() error {
		return func() error {
			c := ledger.Call{RequestID: "r", Payer: payer, PromptTokens: 10, OutputBound: 10, Price: mini}
			mod(&c)
			_, err := l.Reserve(ctx, c)
			return err
		}
	}
	for name, fn := range map[string]func() error{
		"top-up from the zero address": func() error { _, err := l.TopUp(ctx, "ref-1", zero, big.NewInt(1)); return err },
		"top-up of nothing":            func() error { _, err := l.TopUp(ctx, "ref-1", payer, nil); return err },
		"top-up of zero":               func() error { _, err := l.TopUp(ctx, "ref-1", payer, big.NewInt(0)); return err },
		"negative top-up":              func() error { _, err := l.TopUp(ctx, "ref-1", payer, big.NewInt(-5)); return err },
		"top-up over the bound":        func() error { _, err := l.TopUp(ctx, "ref-1", payer, big.NewInt(store.MaxAmount+1)); return err },
		"huge top-up":                  func() error { _, err := l.TopUp(ctx, "ref-1", payer, huge); return err },
		"top-up with an empty ref":     func() error { _, err := l.TopUp(ctx, "", payer, big.NewInt(1)); return err },
		"top-up with a spaced ref":     func() error { _, err := l.TopUp(ctx, "ref 1", payer, big.NewInt(1)); return err },
		"reserve for the zero address": call(func(c *ledger.Call) { c.Payer = zero }),
		"reserve without a request id": call(func(c *ledger.Call) { c.RequestID = "" }),
		"reserve with a hostile id":    call(func(c *ledger.Call) { c.RequestID = "r\r\nX-Injected: 1" }),
		"reserve over the bound":       call(func(c *ledger.Call) { c.PromptTokens, c.Price.Input = math.MaxInt64, math.MaxUint64 }),
		"reserve with a negative cap":  call(func(c *ledger.Call) { c.Key = &ledger.Key{ID: "k", TotalCap: big.NewInt(-1)} }),
		"reserve with no period":       call(func(c *ledger.Call) { c.Key = &ledger.Key{ID: "k", PeriodCap: big.NewInt(5)} }),
		"reserve with an empty key id": call(func(c *ledger.Call) { c.Key = &ledger.Key{} }),
		"charge with an empty id":      func() error { _, err := l.Charge(ctx, "", chat.Usage{}, mini); return err },
		"charge of no hold":            func() error { _, err := l.Charge(ctx, "none", chat.Usage{}, mini); return err },
		"release of no hold":           func() error { _, err := l.Release(ctx, "none"); return err },
		"balance of the zero address":  func() error { _, err := l.Balance(ctx, zero); return err },
		"statement with limit 0":       func() error { _, err := l.Statement(ctx, payer, 0, 0); return err },
		"statement of the zero address": func() error {
			_, err := l.Statement(ctx, zero, 0, 10)
			return err
		},
	} {
		if err := fn(); err == nil {
			t.Errorf("%s: no error", name)
		} else if !strings.HasPrefix(err.Error(), "ledger: ") {
			t.Errorf("%s: error %q does not say where it comes from", name, err)
		}
	}
	if a, held := balance(t, l); a != 1_000_000 || held != 0 {
		t.Errorf("bad input changed the balance: %d available, %d held", a, held)
	}
	if _, err := db.HoldRecord(ctx, "r"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("bad input left a hold: %v", err)
	}
	for name, cfg := range map[string]ledger.Config{
		"no asset":         {},
		"upper-case asset": {Asset: "eip155:1/erc20:0xABC"},
		"negative TTL":     {Asset: "eip155:1/erc20:0xabc", HoldTTL: -time.Second},
		"sub-second TTL":   {Asset: "eip155:1/erc20:0xabc", HoldTTL: time.Millisecond},
		"TTL too long":     {Asset: "eip155:1/erc20:0xabc", HoldTTL: store.MaxHoldTTL + time.Second},
	} {
		if _, err := ledger.New(db, cfg, nil); err == nil {
			t.Errorf("New(%s): no error", name)
		}
	}
	if _, err := ledger.New(nil, ledger.Config{Asset: "eip155:1/erc20:0xabc"}, nil); err == nil {
		t.Error("New(nil store): no error")
	}
}
