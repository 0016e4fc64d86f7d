package redis_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-cmp/cmp"
	goredis "github.com/redis/go-redis/v9"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/redis"
)

// fakeClock is a settable store clock, safe for concurrent use.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// tamper is a store on a fresh prefix, a raw client on the same server, and
// the prefix, for tests that write behind the store's back.
type tamper struct {
	db     *redis.DB
	raw    *goredis.Client
	prefix string
	clock  *fakeClock
}

func newTamper(t *testing.T) *tamper {
	t.Helper()
	u, prefix := freshURL(t)
	clk := &fakeClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	return &tamper{db: open(t, u, clk.Now), raw: rawClient(t, testURL(t)), prefix: prefix, clock: clk}
}

// snapshot returns every key of the store with its DUMP, to show that an
// operation changed nothing.
func (tp *tamper) snapshot(t *testing.T) map[string]string {
	t.Helper()
	ctx := t.Context()
	out := map[string]string{}
	iter := tp.raw.Scan(ctx, 0, "{"+tp.prefix+"}*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		d, err := tp.raw.Dump(ctx, k).Result()
		if err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		out[k] = d
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (tp *tamper) do(t *testing.T, cmd ...any) {
	t.Helper()
	if err := tp.raw.Do(t.Context(), cmd...).Err(); err != nil {
		t.Fatalf("%v: %v", cmd, err)
	}
}

// settlementFields is a well-formed settlement record, as the store writes it.
func settlementFields() []any {
	return []any{"network", "eip155:8453", "asset", "0xa", "payer", "0xb", "pay_to", "0xc", "amount", "1",
		"state", "claimed", "tx_hash", "", "reason", "", "owner", "x", "fence", "7", "lease_until_ms", "0",
		"success_reported", "0", "created_at_ms", "0", "updated_at_ms", "0"}
}

// paymentFields is a well-formed payment record that expires far in the
// future and whose lease is over.
func paymentFields() []any {
	return []any{"network", "eip155:8453", "payer", "0xb", "amount", "1", "state", "held", "tx_hash", "",
		"owner", "x", "fence", "7", "lease_until_ms", "0", "expires_at_ms", "9000000000000",
		"created_at_ms", "0", "updated_at_ms", "0"}
}

// with returns fields with name set to value.
func with(fields []any, name string, value any) []any {
	out := slices.Clone(fields)
	for i := 0; i < len(out); i += 2 {
		if out[i] == name {
			out[i+1] = value
			return out
		}
	}
	return append(out, name, value)
}

// without returns fields without name.
func without(fields []any, name string) []any {
	var out []any
	for i := 0; i < len(fields); i += 2 {
		if fields[i] != name {
			out = append(out, fields[i], fields[i+1])
		}
	}
	return out
}

// TestForeignValues writes values the store did not write at the keys it
// uses, as another program sharing the database might, and checks that every
// operation touching them fails with an error that is no store sentinel,
// wins no claim and changes no key.
func TestForeignValues(t *testing.T) {
	type op struct {
		name string
		call func(ctx context.Context, db *redis.DB) (won bool, err error)
	}
	exp := time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC) // after the tamper clock
	settlementOps := []op{
		{"ClaimSettlement", func(ctx context.Context, db *redis.DB) (bool, error) {
			_, won, err := db.ClaimSettlement(ctx, store.Settlement{Key: "k", Amount: "1", Owner: "me"}, time.Minute)
			return won, err
		}},
		{"UpdateSettlement", func(ctx context.Context, db *redis.DB) (bool, error) {
			return false, db.UpdateSettlement(ctx, "k", 7, store.StateSettled, "0x1", "")
		}},
		{"ReleaseSettlement", func(ctx context.Context, db *redis.DB) (bool, error) {
			return false, db.ReleaseSettlement(ctx, "k", 7)
		}},
		{"MarkSuccessReported", func(ctx context.Context, db *redis.DB) (bool, error) {
			return db.MarkSuccessReported(ctx, "k")
		}},
		{"Settlement", func(ctx context.Context, db *redis.DB) (bool, error) {
			_, err := db.Settlement(ctx, "k")
			return false, err
		}},
	}
	claimNewSettlement := op{"ClaimSettlement(new key)", func(ctx context.Context, db *redis.DB) (bool, error) {
		_, won, err := db.ClaimSettlement(ctx, store.Settlement{Key: "new", Amount: "1", Owner: "me"}, time.Minute)
		return won, err
	}}
	// The planted records are of network (settlementFields).
	const network = "eip155:8453"
	claimNewOnNetwork := op{"ClaimSettlement(new key on the network)", func(ctx context.Context, db *redis.DB) (bool, error) {
		_, won, err := db.ClaimSettlement(ctx, store.Settlement{Key: "new", Network: network, Amount: "1", Owner: "me"}, time.Minute)
		return won, err
	}}
	unresolved := op{"UnresolvedSettlements(every network)", func(ctx context.Context, db *redis.DB) (bool, error) {
		_, err := db.UnresolvedSettlements(ctx, store.AllNetworks, 10)
		return false, err
	}}
	unresolvedOf := op{"UnresolvedSettlements(network)", func(ctx context.Context, db *redis.DB) (bool, error) {
		_, err := db.UnresolvedSettlements(ctx, network, 10)
		return false, err
	}}
	recent := op{"RecentSettlements(every network)", func(ctx context.Context, db *redis.DB) (bool, error) {
		_, err := db.RecentSettlements(ctx, store.AllNetworks, time.Time{}, 10)
		return false, err
	}}
	recentOf := op{"RecentSettlements(network)", func(ctx context.Context, db *redis.DB) (bool, error) {
		_, err := db.RecentSettlements(ctx, network, time.Time{}, 10)
		return false, err
	}}
	markReorg := op{"MarkReorg", func(ctx context.Context, db *redis.DB) (bool, error) {
		return db.MarkReorg(ctx, "k", "0x1", store.ReorgDropped, "")
	}}
	settled := with(with(settlementFields(), "state", "settled"), "tx_hash", "0x1")
	paymentOps := []op{
		{"ClaimPayment", func(ctx context.Context, db *redis.DB) (bool, error) {
			_, won, err := db.ClaimPayment(ctx, store.PaymentClaim{Key: "k", Amount: "1", Owner: "me", ExpiresAt: exp}, time.Minute)
			return won, err
		}},
		{"UpdatePayment", func(ctx context.Context, db *redis.DB) (bool, error) {
			return false, db.UpdatePayment(ctx, "k", 7, store.PaymentSettled, "0x1")
		}},
		{"ReleasePayment", func(ctx context.Context, db *redis.DB) (bool, error) {
			return false, db.ReleasePayment(ctx, "k", 7)
		}},
		{"StagePayment", func(ctx context.Context, db *redis.DB) (bool, error) {
			return false, db.StagePayment(ctx, "k", 7, store.StagedResponse{Status: 200, Body: []byte("x")})
		}},
		{"Payment", func(ctx context.Context, db *redis.DB) (bool, error) {
			_, err := db.Payment(ctx, "k")
			return false, err
		}},
	}
	claimNewPayment := op{"ClaimPayment(new key)", func(ctx context.Context, db *redis.DB) (bool, error) {
		_, won, err := db.ClaimPayment(ctx, store.PaymentClaim{Key: "new", Amount: "1", Owner: "me", ExpiresAt: exp}, time.Minute)
		return won, err
	}}

	tests := []struct {
		name  string
		plant func(t *testing.T, tp *tamper)
		ops   []op
	}{
		{"settlement record is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.Key("settlement", "k"), "foreign")
		}, settlementOps},
		{"settlement record is a list", func(t *testing.T, tp *tamper) {
			tp.do(t, "RPUSH", tp.db.Key("settlement", "k"), "foreign")
		}, settlementOps},
		{"settlement record is another program's hash", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.db.Key("settlement", "k"), "user", "alice", "visits", "3")
		}, settlementOps},
		{"settlement record lacks its state", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")}, without(settlementFields(), "state")...)...)
		}, settlementOps},
		{"settlement record lacks its network", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")}, without(settlementFields(), "network")...)...)
		}, settlementOps},
		{"settlement record has an unknown state", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")}, with(settlementFields(), "state", "bogus")...)...)
		}, settlementOps},
		{"settlement record has a lease that is no number", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")}, with(settlementFields(), "lease_until_ms", "soon")...)...)
		}, settlementOps},
		{"settlement record has a bad success mark", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")},
				with(with(settlementFields(), "state", "settled"), "success_reported", "2")...)...)
		}, settlementOps},
		{"settlement fence counter is not a number", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.Key("settlement-fence", ""), "abc")
		}, []op{claimNewSettlement}},
		{"settlement fence counter is a hash", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.db.Key("settlement-fence", ""), "last", "1")
		}, []op{claimNewSettlement}},
		{"settlement fence counter at its maximum", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.Key("settlement-fence", ""), "9223372036854775807")
		}, []op{claimNewSettlement}},
		{"unresolved set is a string", func(t *testing.T, tp *tamper) {
			// A claimed record "k" with the fence the ops use, then the set
			// replaced: settling or releasing k must not half happen.
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")}, with(settlementFields(), "lease_until_ms", "9000000000000")...)...)
			tp.do(t, "SET", tp.db.Key("settlement-unresolved", ""), "foreign")
		}, []op{claimNewSettlement, unresolved, settlementOps[1], settlementOps[2]}},
		{"network's unresolved set is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")}, with(settlementFields(), "lease_until_ms", "9000000000000")...)...)
			tp.do(t, "ZADD", tp.db.Key("settlement-unresolved", ""), "0", "k")
			tp.do(t, "SET", tp.db.Key("settlement-unresolved-of", network), "foreign")
		}, []op{claimNewOnNetwork, unresolvedOf, settlementOps[1], settlementOps[2]}},
		{"legacy unresolved set is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.Key("settlement-unresolved-legacy", ""), "foreign")
		}, []op{unresolved, unresolvedOf}},
		{"legacy unresolved set names a record that is a string", func(t *testing.T, tp *tamper) {
			// A well-formed record first: the drain moves nothing unless it
			// can move everything it took.
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "a")}, settlementFields()...)...)
			tp.do(t, "ZADD", tp.db.Key("settlement-unresolved-legacy", ""), "0", "a", "1", "k")
			tp.do(t, "SET", tp.db.Key("settlement", "k"), "foreign")
		}, []op{unresolved, unresolvedOf}},
		{"legacy unresolved set names a record whose network's set is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "a")}, with(settlementFields(), "network", "eip155:1")...)...)
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")}, settlementFields()...)...)
			tp.do(t, "ZADD", tp.db.Key("settlement-unresolved-legacy", ""), "0", "a", "1", "k")
			tp.do(t, "SET", tp.db.Key("settlement-unresolved-of", network), "foreign")
		}, []op{unresolved}},
		{"settlement record has an unknown reorg mark", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")},
				with(with(with(settled, "reorg", "bogus"), "reorgs", "1"), "lost_to", "")...)...)
			tp.do(t, "ZADD", tp.db.Key("settlement-recent", ""), "0", "k")
			tp.do(t, "ZADD", tp.db.Key("settlement-recent-of", network), "0", "k")
		}, append(slices.Clone(settlementOps), markReorg, recent, recentOf)},
		{"settlement record has half a reorg mark", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")}, with(settled, "reorg", "dropped")...)...)
		}, append(slices.Clone(settlementOps), markReorg)},
		{"recent set is a string", func(t *testing.T, tp *tamper) {
			// A settled record "k" whose success is not reported, then the
			// set replaced: the mark must not half happen.
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")}, settled...)...)
			tp.do(t, "SET", tp.db.Key("settlement-recent", ""), "foreign")
		}, []op{settlementOps[3], markReorg, recent}},
		{"recent set is a string when a record settles", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")}, with(settlementFields(), "lease_until_ms", "9000000000000")...)...)
			tp.do(t, "ZADD", tp.db.Key("settlement-unresolved", ""), "0", "k")
			tp.do(t, "SET", tp.db.Key("settlement-recent", ""), "foreign")
		}, []op{settlementOps[1]}},
		{"network's recent set is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")}, settled...)...)
			tp.do(t, "SET", tp.db.Key("settlement-recent-of", network), "foreign")
		}, []op{settlementOps[3], markReorg, recentOf}},
		{"network's recent set is a string when a record settles", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "k")}, with(settlementFields(), "lease_until_ms", "9000000000000")...)...)
			tp.do(t, "ZADD", tp.db.Key("settlement-unresolved", ""), "0", "k")
			tp.do(t, "ZADD", tp.db.Key("settlement-unresolved-of", network), "0", "k")
			tp.do(t, "SET", tp.db.Key("settlement-recent-of", network), "foreign")
		}, []op{settlementOps[1]}},
		{"legacy recent set is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.Key("settlement-recent-legacy", ""), "foreign")
		}, []op{recent, recentOf}},
		{"legacy recent set names a record that is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("settlement", "a")}, settled...)...)
			tp.do(t, "ZADD", tp.db.Key("settlement-recent-legacy", ""), "0", "a", "1", "k")
			tp.do(t, "SET", tp.db.Key("settlement", "k"), "foreign")
		}, []op{recent, recentOf}},
		{"recent set names a record that is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "ZADD", tp.db.Key("settlement-recent", ""), "1", "k")
			tp.do(t, "SET", tp.db.Key("settlement", "k"), "foreign")
		}, []op{recent}},
		{"unresolved set names a record that is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "ZADD", tp.db.Key("settlement-unresolved", ""), "1", "k")
			tp.do(t, "SET", tp.db.Key("settlement", "k"), "foreign")
		}, []op{unresolved}},
		{"network's unresolved set names a record that is a string", func(t *testing.T, tp *tamper) {
			// Behind a name whose record is gone, which the listing would
			// take out of the set had it not failed.
			tp.do(t, "ZADD", tp.db.Key("settlement-unresolved-of", network), "0", "gone", "1", "k")
			tp.do(t, "SET", tp.db.Key("settlement", "k"), "foreign")
		}, []op{unresolvedOf}},
		{"payment record is a string", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.Key("payment", "k"), "foreign")
		}, paymentOps},
		{"payment record is a set", func(t *testing.T, tp *tamper) {
			tp.do(t, "SADD", tp.db.Key("payment", "k"), "foreign")
		}, paymentOps},
		{"payment record is another program's hash", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.db.Key("payment", "k"), "user", "alice", "visits", "3")
		}, paymentOps},
		{"payment record has only a staged response", func(t *testing.T, tp *tamper) {
			tp.do(t, "HSET", tp.db.Key("payment", "k"), "staged_status", "200", "staged_body", "x")
		}, paymentOps},
		{"payment record lacks its state", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("payment", "k")}, without(paymentFields(), "state")...)...)
		}, paymentOps},
		{"payment record lacks its expiry", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("payment", "k")}, without(paymentFields(), "expires_at_ms")...)...)
		}, paymentOps},
		{"payment record has an unknown state", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("payment", "k")}, with(paymentFields(), "state", "claimed")...)...)
		}, paymentOps},
		{"payment record has a fence that is no number", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("payment", "k")}, with(paymentFields(), "fence", "7x")...)...)
		}, paymentOps},
		{"payment record has half a staged response", func(t *testing.T, tp *tamper) {
			tp.do(t, append([]any{"HSET", tp.db.Key("payment", "k")}, with(paymentFields(), "staged_status", "200")...)...)
		}, paymentOps},
		{"payment fence counter is not a number", func(t *testing.T, tp *tamper) {
			tp.do(t, "SET", tp.db.Key("payment-fence", ""), "abc")
		}, []op{claimNewPayment}},
		{"payment fence counter is a list", func(t *testing.T, tp *tamper) {
			tp.do(t, "RPUSH", tp.db.Key("payment-fence", ""), "1")
		}, []op{claimNewPayment}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTamper(t)
			tc.plant(t, tp)
			before := tp.snapshot(t)
			for _, o := range tc.ops {
				won, err := o.call(t.Context(), tp.db)
				wantForeign(t, o.name, err)
				if won {
					t.Errorf("%s won a claim on foreign data", o.name)
				}
			}
			if diff := cmp.Diff(before, tp.snapshot(t)); diff != "" {
				t.Errorf("keys changed (-before +after):\n%s", diff)
			}
		})
	}
}

// TestFenceCounterLost checks that a key's fences keep growing when its
// counter was deleted by hand: a takeover or a replacement never hands out a
// fence the record's earlier holder could still write with.
func TestFenceCounterLost(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	s1, ok, err := tp.db.ClaimSettlement(ctx, store.Settlement{Key: "s", Amount: "1", Owner: "a"}, time.Minute)
	if err != nil || !ok {
		t.Fatalf("ClaimSettlement() = %v, %v", ok, err)
	}
	p1, ok, err := tp.db.ClaimPayment(ctx, store.PaymentClaim{Key: "p", Amount: "1", Owner: "a", ExpiresAt: tp.clock.Now().Add(time.Hour)}, time.Minute)
	if err != nil || !ok {
		t.Fatalf("ClaimPayment() = %v, %v", ok, err)
	}
	p2, ok, err := tp.db.ClaimPayment(ctx, store.PaymentClaim{Key: "q", Amount: "1", Owner: "a", ExpiresAt: tp.clock.Now().Add(2 * time.Minute)}, time.Minute)
	if err != nil || !ok {
		t.Fatalf("ClaimPayment() = %v, %v", ok, err)
	}
	tp.do(t, "DEL", tp.db.Key("settlement-fence", ""), tp.db.Key("payment-fence", ""))
	tp.clock.Advance(2 * time.Minute) // s and p: lease over; q: expired

	s2, ok, err := tp.db.ClaimSettlement(ctx, store.Settlement{Key: "s", Amount: "1", Owner: "b"}, time.Minute)
	if err != nil || !ok || s2.Fence <= s1.Fence {
		t.Errorf("settlement takeover = fence %d, %v, %v; want a fence above %d", s2.Fence, ok, err, s1.Fence)
	}
	if err := tp.db.UpdateSettlement(ctx, "s", s1.Fence, store.StateBroadcast, "0x1", ""); !errors.Is(err, store.ErrFenced) {
		t.Errorf("UpdateSettlement(first holder's fence) = %v, want ErrFenced", err)
	}
	for _, tc := range []struct {
		key   string
		first store.PaymentClaim
	}{{"p", p1}, {"q", p2}} {
		got, ok, err := tp.db.ClaimPayment(ctx, store.PaymentClaim{Key: tc.key, Amount: "1", Owner: "b", ExpiresAt: tp.clock.Now().Add(time.Hour)}, time.Minute)
		if err != nil || !ok || got.Fence <= tc.first.Fence {
			t.Errorf("payment %s taken again = fence %d, %v, %v; want a fence above %d", tc.key, got.Fence, ok, err, tc.first.Fence)
		}
		if err := tp.db.UpdatePayment(ctx, tc.key, tc.first.Fence, store.PaymentSettled, "0x1"); !errors.Is(err, store.ErrFenced) {
			t.Errorf("UpdatePayment(%s, first holder's fence) = %v, want ErrFenced", tc.key, err)
		}
	}
}

// TestPaymentTTL checks that Redis forgets a payment claim by itself,
// ExpiryMargin after its ExpiresAt measured on the store's clock, whichever
// clock that is, and that later writes keep the TTL.
func TestPaymentTTL(t *testing.T) {
	ctx := t.Context()
	pttl := func(t *testing.T, tp *tamper, key string) time.Duration {
		t.Helper()
		d, err := tp.raw.PTTL(ctx, tp.db.Key("payment", key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	near := func(t *testing.T, what string, got, want time.Duration) {
		t.Helper()
		// Within a second above (the server's clock may run a little ahead
		// of this machine's) and five below (slow test machines).
		if got > want+time.Second || got < want-5*time.Second {
			t.Errorf("%s: PTTL = %v, want about %v", what, got, want)
		}
	}
	// The tamper clock is months away from the server's: the TTL still
	// follows the store's clock.
	tp := newTamper(t)
	c, ok, err := tp.db.ClaimPayment(ctx, store.PaymentClaim{Key: "k", Amount: "1", Owner: "a", ExpiresAt: tp.clock.Now().Add(time.Hour)}, time.Minute)
	if err != nil || !ok {
		t.Fatalf("ClaimPayment() = %v, %v", ok, err)
	}
	near(t, "new claim", pttl(t, tp, "k"), time.Hour+redis.ExpiryMargin)
	tp.clock.Advance(time.Minute)
	c2, ok, err := tp.db.ClaimPayment(ctx, store.PaymentClaim{Key: "k", Amount: "1", Owner: "b", ExpiresAt: tp.clock.Now().Add(time.Hour)}, time.Minute)
	if err != nil || !ok {
		t.Fatalf("takeover = %v, %v", ok, err)
	}
	if err := tp.db.StagePayment(ctx, "k", c2.Fence, store.StagedResponse{Status: 200, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := tp.db.UpdatePayment(ctx, "k", c2.Fence, store.PaymentPending, "0x1"); err != nil {
		t.Fatal(err)
	}
	near(t, "after takeover, stage and update", pttl(t, tp, "k"), time.Hour+redis.ExpiryMargin)
	if c2.Fence <= c.Fence {
		t.Errorf("takeover fence %d, want above %d", c2.Fence, c.Fence)
	}
	// An expired record is replaced with the new claim's TTL.
	tp.clock.Advance(time.Hour)
	if _, ok, err := tp.db.ClaimPayment(ctx, store.PaymentClaim{Key: "k", Amount: "1", Owner: "c", ExpiresAt: tp.clock.Now().Add(10 * time.Minute)}, time.Minute); err != nil || !ok {
		t.Fatalf("replacement = %v, %v", ok, err)
	}
	near(t, "replacement", pttl(t, tp, "k"), 10*time.Minute+redis.ExpiryMargin)

	// On the server's clock.
	a, _ := pair(t, nil)
	if _, ok, err := a.ClaimPayment(ctx, store.PaymentClaim{Key: "k", Amount: "1", Owner: "a", ExpiresAt: time.Now().Add(time.Hour)}, time.Minute); err != nil || !ok {
		t.Fatalf("ClaimPayment() = %v, %v", ok, err)
	}
	d, err := rawClient(t, testURL(t)).PTTL(ctx, a.Key("payment", "k")).Result()
	if err != nil {
		t.Fatal(err)
	}
	near(t, "server clock", d, time.Hour+redis.ExpiryMargin)
	// Settlement records and counters never expire.
	tp2 := newTamper(t)
	if _, _, err := tp2.db.ClaimSettlement(ctx, store.Settlement{Key: "s", Amount: "1"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{tp2.db.Key("settlement", "s"), tp2.db.Key("settlement-fence", ""), tp2.db.Key("settlement-unresolved", ""),
		tp2.db.Key("settlement-unresolved-of", "")} {
		if d, err := tp2.raw.PTTL(ctx, k).Result(); err != nil || d != -1 {
			t.Errorf("PTTL %s = %v, %v; want no TTL (-1)", k, d, err)
		}
	}
}

// hashTag is the part of a Redis key that picks its cluster slot.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// TestKeyLayout checks that every key the store writes carries the prefix as
// its hash tag, whatever bytes the store keys and networks hold, and that
// such keys read back and list exactly.
func TestKeyLayout(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	odd := []string{"{x}", "}{", "a{b}c", "\x00\xff*?[]\\", "plain", strings.Repeat("k", 10_000)}
	for _, k := range odd {
		// The key is the record's network too, so each has a set of its own.
		if _, ok, err := tp.db.ClaimSettlement(ctx, store.Settlement{Key: k, Network: k, Amount: "1"}, time.Minute); err != nil || !ok {
			t.Fatalf("ClaimSettlement(%q) = %v, %v", k, ok, err)
		}
		if _, ok, err := tp.db.ClaimPayment(ctx, store.PaymentClaim{Key: k, Amount: "1", ExpiresAt: tp.clock.Now().Add(time.Hour)}, time.Minute); err != nil || !ok {
			t.Fatalf("ClaimPayment(%q) = %v, %v", k, ok, err)
		}
		if s, err := tp.db.Settlement(ctx, k); err != nil || s.Key != k {
			t.Errorf("Settlement(%q) = %q, %v", k, s.Key, err)
		}
		if p, err := tp.db.Payment(ctx, k); err != nil || p.Key != k {
			t.Errorf("Payment(%q) = %q, %v", k, p.Key, err)
		}
	}
	keys := tp.snapshot(t)
	if want := 3*len(odd) + 3; len(keys) != want {
		t.Errorf("the store wrote %d keys, want %d (a record of each kind and a network's set per key, two counters, the set of every network)", len(keys), want)
	}
	for k := range keys {
		if tag := hashTag(k); tag != tp.prefix {
			t.Errorf("key %q has hash tag %q, want the prefix %q", k, tag, tp.prefix)
		}
	}
	for _, k := range odd {
		list, err := tp.db.UnresolvedSettlements(ctx, k, 100)
		if err != nil || len(list) != 1 || list[0].Key != k {
			t.Errorf("UnresolvedSettlements(network %q) = %d records, %v; want the one of that key", k, len(list), err)
		}
	}
	list, err := tp.db.UnresolvedSettlements(ctx, store.AllNetworks, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range list {
		got = append(got, s.Key)
	}
	want := slices.Clone(odd)
	slices.Sort(want) // one millisecond: byte order
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("UnresolvedSettlements() keys (-want +got):\n%s", diff)
	}
}

// TestUnresolvedSkipsMissing checks that a name left in the unresolved set
// without its record (deleted by hand) is skipped and does not use up the
// limit.
func TestUnresolvedSkipsMissing(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	for _, k := range []string{"a", "b", "c"} {
		if _, _, err := tp.db.ClaimSettlement(ctx, store.Settlement{Key: k, Amount: "1"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		tp.clock.Advance(time.Millisecond)
	}
	tp.do(t, "DEL", tp.db.Key("settlement", "a"))
	list, err := tp.db.UnresolvedSettlements(ctx, store.AllNetworks, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Key != "b" || list[1].Key != "c" {
		t.Errorf("UnresolvedSettlements(2) = %+v, want b and c", list)
	}
	for _, limit := range []int{0, -1} {
		if _, err := tp.db.UnresolvedSettlements(ctx, store.AllNetworks, limit); err == nil {
			t.Errorf("UnresolvedSettlements(%d) = nil error, want one", limit)
		}
	}
}

// TestBoundaryArguments checks arguments at the edges of what the store
// represents.
func TestBoundaryArguments(t *testing.T) {
	tp := newTamper(t)
	ctx := t.Context()
	// The longest lease there is: rounded up without overflowing.
	s, ok, err := tp.db.ClaimSettlement(ctx, store.Settlement{Key: "long", Amount: "1"}, time.Duration(1<<63-1))
	if err != nil || !ok || !s.LeaseUntil.After(tp.clock.Now().Add(290*365*24*time.Hour)) {
		t.Errorf("ClaimSettlement(longest lease) = %v, %v, %v", s.LeaseUntil, ok, err)
	}
	// A lease of a nanosecond is a millisecond.
	s, ok, err = tp.db.ClaimSettlement(ctx, store.Settlement{Key: "short", Amount: "1"}, time.Nanosecond)
	if err != nil || !ok || s.LeaseUntil.Sub(s.CreatedAt) != time.Millisecond {
		t.Errorf("ClaimSettlement(1ns lease) = %v, %v, %v; want a 1ms lease", s.LeaseUntil.Sub(s.CreatedAt), ok, err)
	}
	// An expiry beyond what the scripts compute exactly is refused.
	far := time.UnixMilli(1 << 53)
	if _, ok, err := tp.db.ClaimPayment(ctx, store.PaymentClaim{Key: "far", Amount: "1", ExpiresAt: far}, time.Minute); err == nil || ok {
		t.Errorf("ClaimPayment(expiry %v) = %v, %v; want an error", far, ok, err)
	}
	// A staged body of every byte value reads back exactly.
	c, ok, err := tp.db.ClaimPayment(ctx, store.PaymentClaim{Key: "bin", Amount: "1", ExpiresAt: tp.clock.Now().Add(time.Hour)}, time.Minute)
	if err != nil || !ok {
		t.Fatal(err)
	}
	body := make([]byte, 512)
	for i := range body {
		body[i] = byte(i)
	}
	r := store.StagedResponse{Status: 599, ContentType: "application/octet-stream\x00", Body: body, Fingerprint: "\xff"}
	if err := tp.db.StagePayment(ctx, "bin", c.Fence, r); err != nil {
		t.Fatal(err)
	}
	got, err := tp.db.Payment(ctx, "bin")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&r, got.Staged); diff != "" {
		t.Errorf("staged response read back (-want +got):\n%s", diff)
	}
}

func TestParseURL(t *testing.T) {
	tests := []struct {
		url                      string
		prefix, addr, user, pass string
		db                       int
		tls                      bool
		dial                     time.Duration
	}{
		{url: "redis://127.0.0.1:6379/0", prefix: "l4a:", addr: "127.0.0.1:6379"},
		{url: "redis://h", prefix: "l4a:", addr: "h:6379"},
		{url: "rediss://u:p%40ss@h:6380/2?key_prefix=gw-1.a_b:&dial_timeout=2s", prefix: "gw-1.a_b:", addr: "h:6380",
			user: "u", pass: "p@ss", db: 2, tls: true, dial: 2 * time.Second},
		{url: "redis://:pw@[::1]:7000/3", prefix: "l4a:", addr: "[::1]:7000", pass: "pw", db: 3},
		{url: "redis://h/1?key_prefix=" + strings.Repeat("x", 64), prefix: strings.Repeat("x", 64), addr: "h:6379", db: 1},
	}
	for _, tc := range tests {
		opts, prefix, err := redis.ParseURL(tc.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.url, err)
			continue
		}
		got := []any{prefix, opts.Addr, opts.Username, opts.Password, opts.DB, opts.TLSConfig != nil, opts.DialTimeout}
		want := []any{tc.prefix, tc.addr, tc.user, tc.pass, tc.db, tc.tls, tc.dial}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ParseURL(%q) (-want +got):\n%s", tc.url, diff)
		}
	}
}

// FuzzParseURL checks that parseURL never panics, that what it accepts has a
// valid prefix and an address, and that its errors never show a password
// that appears nowhere else in the URL.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"redis://127.0.0.1:6379/0",
		"rediss://user:s3cr3tpw9@host:6380/2?key_prefix=a:&dial_timeout=1s",
		"redis://user:s3cr3tpw9@host:port/0",
		"redis://user:s3cr3tpw9%zz@host/0",
		"redis://user:s3cr3tpw9@host/0?key_prefix=%7B",
		"redis://user:s3cr3tpw9@[::1/0",
		"redis://:s3cr3tpw9@h/x/y",
		"redis://h/0?key_prefix=a&key_prefix=b",
		"unix:///tmp/s",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		opts, prefix, err := redis.ParseURL(raw)
		if err == nil {
			if prefix == "" || len(prefix) > 64 || strings.ContainsAny(prefix, "{}*?[]") {
				t.Errorf("ParseURL(%q) accepted key prefix %q", raw, prefix)
			}
			if opts == nil || opts.Addr == "" {
				t.Errorf("ParseURL(%q) gave options %+v", raw, opts)
			}
			return
		}
		u, perr := url.Parse(raw)
		if perr != nil {
			// Find the user info as url.Parse would: the authority ends
			// at the first "/", "?" or "#", the user info at its last "@".
			i := strings.Index(raw, "://")
			if i < 0 {
				return
			}
			authority := raw[i+3:]
			if end := strings.IndexAny(authority, "/?#"); end >= 0 {
				authority = authority[:end]
			}
			j := strings.LastIndex(authority, "@")
			if j < 0 {
				return
			}
			if _, pw, ok := strings.Cut(authority[:j], ":"); ok {
				checkNoLeak(t, raw, pw, raw[:i+3]+raw[i+3+j:], err)
			}
			return
		}
		if u.User == nil {
			return
		}
		if pw, ok := u.User.Password(); ok {
			rest := *u
			rest.User = nil
			checkNoLeak(t, raw, pw, rest.String(), err)
		}
	})
}

// checkNoLeak fails if err shows pw, a distinctive password (8 or more
// letters and digits, with both) that the rest of the URL does not contain.
func checkNoLeak(t *testing.T, raw, pw, rest string, err error) {
	t.Helper()
	if len(pw) < 8 || strings.Contains(rest, pw) {
		return
	}
	var letter, digit bool
	for _, r := range pw {
		switch {
		case unicode.IsLetter(r) && r < unicode.MaxASCII:
			letter = true
		case unicode.IsDigit(r) && r < unicode.MaxASCII:
			digit = true
		default:
			return
		}
	}
	if letter && digit && strings.Contains(err.Error(), pw) {
		t.Errorf("ParseURL(%q) = %v, which shows the password", raw, err)
	}
}

// wantForeign checks the error of operation op on data the store did not
// write: an error, no store sentinel (the data is neither absent nor
// another caller's), naming the package.
func wantForeign(t *testing.T, op string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s = nil error, want an error", op)
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrFenced):
		t.Errorf("%s = %v, a store sentinel; want an error saying the data is foreign", op, err)
	case !strings.Contains(err.Error(), "redis: "):
		t.Errorf("%s = %v, want an error naming the package", op, err)
	}
}
