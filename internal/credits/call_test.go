package credits

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/chat"
	"github.com/llm4agents/llm4agents/internal/ledger"
	"github.com/llm4agents/llm4agents/internal/pricing"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
)

// countMetrics records what Calls counts.
type countMetrics struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *countMetrics) Credit(outcome string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[outcome]++
}

func (m *countMetrics) LedgerLatency(string, time.Duration) {}

func (m *countMetrics) count(outcome string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[outcome]
}

// callsFixture is Calls on a SQLite store whose owner holds balance.
type callsFixture struct {
	calls   *Calls
	db      *sqlite.DB
	ledger  *ledger.Ledger
	metrics *countMetrics
	clk     *testClock
}

// testPrice is 1 atomic unit a prompt token and 2 an output token.
var testPrice = pricing.Price{Input: 1_000_000, Output: 2_000_000}

func newCallsFixture(t *testing.T, balance int64) *callsFixture {
	t.Helper()
	clk := &testClock{now: t0}
	db := openStore(t, clk)
	l, err := ledger.New(db, ledger.Config{Asset: ledger.AssetID("eip155:84532", common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e"))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if balance > 0 {
		if _, err := l.TopUp(t.Context(), "topup-1", common.HexToAddress(owner), big.NewInt(balance)); err != nil {
			t.Fatal(err)
		}
	}
	keys := NewKeys(db, nil)
	keys.Now = clk.Now
	m := &countMetrics{}
	calls := NewCalls(CallsConfig{
		Keys: keys, Ledger: l, Receipts: db, Metrics: m, Log: (&logBuffer{}).logger(),
		Display: func(a *big.Int) string { return a.String() + " units" }, TopUp: "POST /v1/credits/topup",
	})
	return &callsFixture{calls: calls, db: db, ledger: l, metrics: m, clk: clk}
}

// balance returns the owner's available and held credit.
func (f *callsFixture) balance(t *testing.T) (avail, held int64) {
	t.Helper()
	b, err := f.ledger.Balance(t.Context(), common.HexToAddress(owner))
	if err != nil {
		t.Fatal(err)
	}
	return b.Available.Int64(), b.Held.Int64()
}

// quoteOf prices a call of prompt tokens in, up to out out.
func quoteOf(prompt, out int64) func() (Quote, error) {
	return func() (Quote, error) { return Quote{PromptTokens: prompt, OutputBound: out, Price: testPrice}, nil }
}

// TestAdmitRefusals: every refusal before the upstream is typed, names its
// reason, holds nothing and charges nothing, and never carries the secret.
func TestAdmitRefusals(t *testing.T) {
	errQuote := errors.New("the quote refused the request")
	tests := []struct {
		name    string
		balance int64
		key     func(*store.APIKey) // nil: no key is created; the secret is unknown
		secret  string              // used when key is nil
		model   string
		quote   func() (Quote, error)
		reason  CallReason // "" expects errQuote
		says    string
		limit   store.Limit
	}{
		{name: "no key", secret: "", reason: InvalidKey, says: "not known here"},
		{name: "unknown key", secret: "sk-l4a-" + strings.Repeat("a", 52), reason: InvalidKey, says: "not known here"},
		{name: "hostile key", secret: "sk-l4a-\x00'; DROP TABLE keys;--", reason: InvalidKey, says: "not known here"},
		{name: "expired key", key: func(k *store.APIKey) { k.ExpiresAt = t0.Add(-time.Second) }, reason: InvalidKey, says: "expired"},
		{name: "model out of scope", key: func(k *store.APIKey) { k.Models = []string{"other"} }, reason: ModelNotAllowed, says: `model "m"`},
		{name: "model name bounded in the message", key: func(k *store.APIKey) { k.Models = []string{"other"} },
			model: strings.Repeat("x", 5000), reason: ModelNotAllowed, says: strings.Repeat("x", 100) + `..."`},
		{name: "quote refused", key: func(*store.APIKey) {}, quote: func() (Quote, error) { return Quote{}, errQuote }},
		{name: "call larger than the key's tokens per minute", key: func(k *store.APIKey) { k.TokensPerMinute = 100 },
			reason: RateLimitTooSmall, says: "lower max_tokens"},
		{name: "maximum cost larger than a hold", key: func(*store.APIKey) {}, quote: quoteOf(1, 1<<62),
			reason: MaxCostTooLarge, says: "more than one call may hold; lower max_tokens"},
		{name: "balance short", balance: 150, key: func(*store.APIKey) {}, reason: InsufficientCredit,
			says: "up to 200 units and the balance is 150 units; top up with POST /v1/credits/topup or lower max_tokens", limit: store.LimitBalance},
		{name: "key total cap short", key: func(k *store.APIKey) { k.TotalCap = 120 }, reason: InsufficientCredit,
			says: "total cap allows 120 units more; a top-up (POST /v1/credits/topup) does not raise", limit: store.LimitKeyTotal},
		{name: "key period cap short", key: func(k *store.APIKey) { k.PeriodCap, k.Period = 199, time.Hour }, reason: InsufficientCredit,
			says: "cap for this period allows 199 units more", limit: store.LimitKeyPeriod},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			balance := tt.balance
			if balance == 0 {
				balance = 10_000
			}
			f := newCallsFixture(t, balance)
			secret := tt.secret
			if tt.key != nil {
				secret, _ = storeKey(t, f.db, owner, tt.key)
			}
			model, quote := cmpOr(tt.model, "m"), tt.quote
			if quote == nil {
				quote = quoteOf(100, 50) // at most 200 units
			}
			call, err := f.calls.Admit(t.Context(), Request{Secret: secret, Model: model, Remedy: "lower max_tokens", Quote: quote})
			if call != nil {
				t.Fatalf("Admit() admitted the call %s", call.ID)
			}
			rf, ok := errors.AsType[*RefusalError](err)
			switch {
			case tt.reason == "":
				if !errors.Is(err, errQuote) || ok {
					t.Fatalf("Admit() = %v, want the quote's own error", err)
				}
			case !ok:
				t.Fatalf("Admit() = %v, want a refusal %s", err, tt.reason)
			case rf.Reason != tt.reason:
				t.Fatalf("Admit() reason %s, want %s (%v)", rf.Reason, tt.reason, err)
			case !strings.Contains(rf.Message, tt.says) || !strings.HasSuffix(rf.Message, "nothing was charged"):
				t.Errorf("message %q: want it to say %q and end with nothing was charged", rf.Message, tt.says)
			}
			if tt.limit != "" && (rf.Shortfall == nil || rf.Shortfall.Limit != tt.limit) {
				t.Errorf("shortfall %+v, want limit %s", rf.Shortfall, tt.limit)
			}
			if secret != "" && strings.Contains(fmt.Sprint(err), secret) {
				t.Error("the refusal carries the key's secret")
			}
			if avail, held := f.balance(t); avail != balance || held != 0 {
				t.Errorf("after the refusal: available %d, held %d; want %d, 0", avail, held, balance)
			}
		})
	}
}

// cmpOr is cmp.Or for strings, kept local to read plainly in the table.
func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

// TestAdmitRevokedAndRateLimited: a revoked key is refused at its next call;
// a key past its calls per minute is refused until the minute ends, with
// when; neither holds anything.
func TestAdmitRevokedAndRateLimited(t *testing.T) {
	f := newCallsFixture(t, 10_000)
	secret, k := storeKey(t, f.db, owner, func(k *store.APIKey) { k.RatePerMinute = 1 })
	req := Request{Secret: secret, Model: "m", Remedy: "lower max_tokens", Quote: quoteOf(10, 10)}
	call, err := f.calls.Admit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	call.Release(t.Context())
	_, err = f.calls.Admit(t.Context(), req)
	if rf, ok := errors.AsType[*RefusalError](err); !ok || rf.Reason != RateLimited || rf.RetryAfter <= 0 || rf.RetryAfter > time.Minute {
		t.Fatalf("second call in the minute: %v, want rate_limited with a RetryAfter within the minute", err)
	}
	if _, err := f.db.RevokeKey(t.Context(), owner, k.ID); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(time.Minute)
	_, err = f.calls.Admit(t.Context(), req)
	if rf, ok := errors.AsType[*RefusalError](err); !ok || rf.Reason != InvalidKey || !strings.Contains(rf.Message, "revoked") {
		t.Fatalf("call of a revoked key: %v, want invalid_api_key saying revoked", err)
	}
	if avail, held := f.balance(t); avail != 10_000 || held != 0 {
		t.Errorf("available %d, held %d; want 10000, 0", avail, held)
	}
	if f.metrics.count("released") != 1 || f.metrics.count("rate_limited") != 1 || f.metrics.count("invalid_key") != 1 {
		t.Errorf("metrics %v", f.metrics.n)
	}
}

// TestAdmitStoreDown: a store that cannot answer fails the call closed,
// with nothing held.
func TestAdmitStoreDown(t *testing.T) {
	f := newCallsFixture(t, 10_000)
	secret, _ := storeKey(t, f.db, owner, nil)
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := f.calls.Admit(t.Context(), Request{Secret: secret, Model: "m", Quote: quoteOf(10, 10)})
	if rf, ok := errors.AsType[*RefusalError](err); !ok || rf.Reason != StoreUnavailable {
		t.Fatalf("Admit() on a closed store = %v, want store_unavailable", err)
	}
	if f.metrics.count("store_down") != 1 {
		t.Errorf("metrics %v", f.metrics.n)
	}
}

// TestCallChargeAndRelease: an admitted call holds its maximum; Charge
// captures the cost of the usage, capped at the hold, and keeps the receipt
// receiptOf returns; Release gives the hold back. A charge outlives the
// request's context: the answer was produced.
func TestCallChargeAndRelease(t *testing.T) {
	f := newCallsFixture(t, 10_000)
	secret, k := storeKey(t, f.db, owner, nil)
	admit := func() *Call {
		t.Helper()
		call, err := f.calls.Admit(t.Context(), Request{Secret: secret, Model: "m", Remedy: "lower max_tokens", Quote: quoteOf(100, 50)})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(call.ID, "0x") || len(call.ID) != 66 || call.Key.ID != k.ID || call.Payer != common.HexToAddress(owner) {
			t.Fatalf("admitted call %+v", call)
		}
		if _, held := f.balance(t); held != 200 {
			t.Fatalf("held %d after admission, want the maximum cost 200", held)
		}
		return call
	}

	call := admit()
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the client left as the answer went out
	var got ledger.Charge
	call.Charge(ctx, chat.Usage{PromptTokens: 100, CompletionTokens: 20}, func(ch ledger.Charge) *store.StoredReceipt {
		got = ch
		return &store.StoredReceipt{RequestID: call.ID, Owner: owner, KeyID: k.ID, Seq: ch.Seq, Envelope: []byte(`{"r":1}`)}
	})
	if got.Charged == nil || got.Charged.Int64() != 140 || got.BalanceAfter.Int64() != 10_000-140 {
		t.Fatalf("charge %+v, want 140 charged", got)
	}
	if rec, err := f.db.Receipt(t.Context(), call.ID); err != nil || string(rec.Envelope) != `{"r":1}` {
		t.Fatalf("receipt kept: %+v, %v", rec, err)
	}

	call = admit()
	call.Charge(t.Context(), chat.Usage{PromptTokens: 100, CompletionTokens: 500}, func(ledger.Charge) *store.StoredReceipt { return nil })
	if avail, held := f.balance(t); avail != 10_000-140-200 || held != 0 {
		t.Fatalf("an answer longer than its bound: available %d, held %d; want the hold charged, no more", avail, held)
	}

	call = admit()
	call.Release(ctx)
	if avail, held := f.balance(t); avail != 10_000-340 || held != 0 {
		t.Fatalf("after a release: available %d, held %d", avail, held)
	}
	for outcome, want := range map[string]int{"charged": 1, "charged_no_receipt": 1, "loss": 1, "released": 1} {
		if got := f.metrics.count(outcome); got != want {
			t.Errorf("outcome %s counted %d times, want %d", outcome, got, want)
		}
	}
}

// TestRequestID: an id is 32 bytes, the time in milliseconds first, so ids
// issued later sort after (the stores' indexes then take a flush's ids at
// their right edge), and the rest random: two ids of one millisecond differ.
func TestRequestID(t *testing.T) {
	at := time.UnixMilli(1_764_806_400_123)
	a, err := requestIDAt(at)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := requestIDAt(at)
	later, _ := requestIDAt(at.Add(time.Millisecond))
	if len(a) != 66 || !strings.HasPrefix(a, "0x") {
		t.Fatalf("id %q is not 0x and 32 bytes of hex", a)
	}
	if want := fmt.Sprintf("0x%012x", at.UnixMilli()); !strings.HasPrefix(a, want) {
		t.Errorf("id %q does not start with the time %s", a, want)
	}
	if a == b || a[14:] == b[14:] {
		t.Errorf("two ids of one millisecond share their random part: %q, %q", a, b)
	}
	if later <= a || later <= b {
		t.Errorf("an id a millisecond later (%q) does not sort after %q and %q", later, a, b)
	}
	if now, _ := newRequestID(); now <= a {
		t.Errorf("an id issued now (%q) sorts before one of 2025 (%q)", now, a)
	}
}

// failingCapturer is a store whose capture with a receipt fails after it
// asked for the receipt, as a write whose commit fails does.
type failingCapturer struct{ *sqlite.DB }

func (f failingCapturer) CaptureWithReceipt(ctx context.Context, id string, actual int64,
	receiptOf func(store.Hold, store.Entry) *store.StoredReceipt) (store.CaptureResult, error) {
	receiptOf(store.Hold{ID: id, Captured: actual}, store.Entry{Seq: 99})
	return store.CaptureResult{}, errors.New("commit: disk I/O error")
}

// TestCallChargeKeeping: with a store that keeps the receipt in the
// capture's write, a charge whose write fails after the receipt was made
// reports no charge (the caller drops what receiptOf computed) and is
// counted unbilled, and one whose receipt the store refuses stands.
func TestCallChargeKeeping(t *testing.T) {
	f := newCallsFixture(t, 10_000)
	secret, k := storeKey(t, f.db, owner, nil)
	receiptOf := func(id string, env string) func(ledger.Charge) *store.StoredReceipt {
		return func(ch ledger.Charge) *store.StoredReceipt {
			return &store.StoredReceipt{RequestID: id, Owner: owner, KeyID: k.ID, Seq: ch.Seq, Envelope: []byte(env)}
		}
	}
	admit := func(calls *Calls) *Call {
		t.Helper()
		call, err := calls.Admit(t.Context(), Request{Secret: secret, Model: "m", Remedy: "lower max_tokens", Quote: quoteOf(100, 50)})
		if err != nil {
			t.Fatal(err)
		}
		return call
	}
	if !f.ledger.KeepsReceipts() {
		t.Fatal("a ledger on SQLite does not keep receipts with its captures")
	}

	// The receipt's id already holds another receipt: the charge stands.
	call := admit(f.calls)
	if err := f.db.PutReceipt(t.Context(), store.StoredReceipt{RequestID: call.ID, Owner: owner, Envelope: []byte(`{"other":1}`)}); err != nil {
		t.Fatal(err)
	}
	if !call.Charge(t.Context(), chat.Usage{PromptTokens: 100, CompletionTokens: 20}, receiptOf(call.ID, `{"r":1}`)) {
		t.Fatal("Charge with a refused receipt reported no charge")
	}
	if avail, held := f.balance(t); avail != 10_000-140 || held != 0 {
		t.Fatalf("after the charge: available %d, held %d; want 140 charged", avail, held)
	}
	if got := f.metrics.count("charged_no_receipt"); got != 1 {
		t.Errorf("charged_no_receipt counted %d times, want 1", got)
	}

	// The write fails after receiptOf ran: no charge, the hold stays.
	failing, err := ledger.New(failingCapturer{f.db}, ledger.Config{Asset: ledger.AssetID("eip155:84532", common.HexToAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e"))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := NewCalls(CallsConfig{Keys: NewKeys(f.db, nil), Ledger: failing, Receipts: f.db, Metrics: f.metrics, Log: (&logBuffer{}).logger()})
	call = admit(calls)
	if call.Charge(t.Context(), chat.Usage{PromptTokens: 100, CompletionTokens: 20}, receiptOf(call.ID, `{"r":2}`)) {
		t.Fatal("Charge whose write failed reported a charge")
	}
	if avail, held := f.balance(t); avail != 10_000-140-200 || held != 200 {
		t.Fatalf("after a failed charge: available %d, held %d; want the hold left for the sweep", avail, held)
	}
	if got := f.metrics.count("unbilled"); got != 1 {
		t.Errorf("unbilled counted %d times, want 1", got)
	}
}
