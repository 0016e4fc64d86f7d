package credits

import (
	"testing"

	"github.com/llm4agents/llm4agents/internal/store"
)

// BenchmarkAuthenticate is the key lookup of the credit path: hash the
// presented key, read its row from a SQLite store, compare, check scope and
// rate.
func BenchmarkAuthenticate(b *testing.B) {
	clk := &testClock{now: t0}
	st := openStore(b, clk)
	keys := NewKeys(st, nil)
	secret, id, err := NewKey()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.CreateKey(b.Context(), store.APIKey{ID: id, Hash: HashSecret(secret), Owner: owner,
		TotalCap: store.NoCap, PeriodCap: store.NoCap, Models: []string{"gpt-4o"}}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k, err := keys.Authenticate(b.Context(), secret)
			if err != nil {
				b.Error(err)
				return
			}
			if err := keys.Authorize(k, "gpt-4o"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkTakeRate is the rate limit's share of the credit path, side by
// side: a key without limits, and a busy key with both limits (slices of
// about a second of its calls come from the SQLite store; the rest is
// memory).
func BenchmarkTakeRate(b *testing.B) {
	for _, tc := range []struct {
		name string
		key  store.APIKey
	}{
		{"unlimited", store.APIKey{ID: "sk-free"}},
		{"limited", store.APIKey{ID: "sk-busy", RatePerMinute: store.MaxRateLimit, TokensPerMinute: store.MaxRateLimit}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			keys := NewKeys(openStore(b, &testClock{now: t0}), nil) // the real clock: slices expire
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := keys.TakeRate(b.Context(), tc.key, 1000); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
