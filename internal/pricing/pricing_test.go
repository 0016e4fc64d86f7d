package pricing

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/llm4agents/llm4agents/internal/chat"
)

func bigInt(tb testing.TB, s string) *big.Int {
	tb.Helper()
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		tb.Fatalf("bad test number %q", s)
	}
	return n
}

// refExact is the exact cost as a rational, rounded up, computed independently
// of atomicCost.
func refExact(prompt, output int64, p Price) *big.Int {
	r := new(big.Rat).SetFrac(
		new(big.Int).Add(
			new(big.Int).Mul(big.NewInt(max(prompt, 0)), new(big.Int).SetUint64(p.Input)),
			new(big.Int).Mul(big.NewInt(max(output, 0)), new(big.Int).SetUint64(p.Output))),
		big.NewInt(1_000_000))
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !r.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q
}

func TestQuote(t *testing.T) {
	mini := Price{Input: 150_000, Output: 600_000} // gpt-4o-mini in micro-USD
	dollar := Price{Input: 1_000_000, Output: 1_000_000}
	for _, tc := range []struct {
		name           string
		prompt, output int64
		p              Price
		decimals       uint8
		want           string
	}{
		{"gpt-4o-mini small call is one cent", 1000, 4096, mini, 6, "10000"},
		{"exact cent stays", 10_000, 0, dollar, 6, "10000"},
		{"exact two cents stay", 10_000, 10_000, dollar, 6, "20000"},
		{"one atomic unit over rounds up", 10_001, 0, dollar, 6, "20000"},
		{"a millionth of a unit over rounds up", 10_000_000_001, 0, Price{Input: 1}, 6, "20000"},
		{"zero tokens is the one-cent minimum", 0, 0, mini, 6, "10000"},
		{"zero price is the one-cent minimum", 1 << 40, 1 << 40, Price{}, 6, "10000"},
		{"negative counts count as zero", -5, -5, dollar, 6, "10000"},
		{"output only", 0, 1_000_000, mini, 6, "600000"},
		{"dollars", 2_000_000, 1_000_000, Price{Input: 2_500_000, Output: 10_000_000}, 6, "15000000"},
		{"decimals 0: no cents, one unit minimum", 0, 0, dollar, 0, "1"},
		{"decimals 0: rounds to the unit", 1_500_000, 0, Price{Input: 1}, 0, "2"},
		{"decimals 1: no cents", 3, 0, Price{Input: 1_000_000}, 1, "3"},
		{"decimals 2: a cent is a unit", 3, 0, Price{Input: 1_000_000}, 2, "3"},
		{"decimals 2: ceil to the unit", 1, 0, Price{Input: 1}, 2, "1"},
		{"decimals 18: cent is 1e16", 1000, 0, Price{Input: 1_000_000_000_000_000_000}, 18, "10000000000000000"},
		{"decimals 18: rounds up to 2e16", 10_001, 0, Price{Input: 1_000_000_000_000_000_000}, 18, "20000000000000000"},
		{
			"huge values do not overflow", math.MaxInt64, math.MaxInt64, Price{Input: math.MaxUint64, Output: math.MaxUint64}, 6,
			// 2*(2^63-1)*(2^64-1) = 340282366920938463408034375210639*1e6 + 556610, up to the cent.
			"340282366920938463408034375220000",
		},
		{"decimals 36", 1, 1, Price{Input: 1, Output: 1}, 36, "1" + strings.Repeat("0", 34)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Quote(tc.prompt, tc.output, tc.p, tc.decimals)
			if want := bigInt(t, tc.want); got.Cmp(want) != 0 {
				t.Errorf("Quote(%d, %d, %+v, %d) = %s, want %s", tc.prompt, tc.output, tc.p, tc.decimals, got, want)
			}
		})
	}
}

// TestQuoteProperties checks, over random inputs, that a quote is a whole
// number of cents, covers the exact cost, exceeds it by less than a cent, and
// is at least a cent.
func TestQuoteProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		prompt := rng.Int64() >> uint(rng.IntN(64))
		output := rng.Int64() >> uint(rng.IntN(64))
		p := Price{Input: rng.Uint64() >> uint(rng.IntN(64)), Output: rng.Uint64() >> uint(rng.IntN(64))}
		decimals := uint8(rng.IntN(37))
		got := Quote(prompt, output, p, decimals)
		exact := refExact(prompt, output, p)
		cent := Cent(decimals)
		over := new(big.Int).Sub(got, exact)
		if new(big.Int).Rem(got, cent).Sign() != 0 || over.Sign() < 0 || over.Cmp(cent) >= 0 && exact.Sign() > 0 || got.Cmp(cent) < 0 {
			t.Fatalf("Quote(%d, %d, %+v, %d) = %s; exact %s, cent %s", prompt, output, p, decimals, got, exact, cent)
		}
		if c := Cost(chat.Usage{PromptTokens: prompt, CompletionTokens: output}, p); c.Cmp(exact) != 0 {
			t.Fatalf("Cost(%d, %d, %+v) = %s, want %s", prompt, output, p, c, exact)
		}
	}
}

func TestQuoteIsFresh(t *testing.T) {
	q := Quote(0, 0, Price{}, 6)
	q.SetInt64(0)
	if again := Quote(0, 0, Price{}, 6); again.Int64() != 10000 {
		t.Fatalf("a caller's change to a quote leaked into the next one: %s", again)
	}
	c := Cent(6)
	c.SetInt64(7)
	if Cent(6).Int64() != 10000 {
		t.Fatal("Cent returned shared state")
	}
}

func TestCost(t *testing.T) {
	mini := Price{Input: 150_000, Output: 600_000}
	for _, tc := range []struct {
		name string
		u    chat.Usage
		p    Price
		want string
	}{
		{"exact", chat.Usage{PromptTokens: 1000, CompletionTokens: 500}, mini, "450"},
		{"ceil to the atomic unit", chat.Usage{PromptTokens: 1}, mini, "1"},
		{"no cent rounding", chat.Usage{PromptTokens: 1000, CompletionTokens: 501}, mini, "451"},
		{"nothing used costs nothing", chat.Usage{}, mini, "0"},
		{"negative counts count as zero", chat.Usage{PromptTokens: -1000, CompletionTokens: 10}, mini, "6"},
		{"huge", chat.Usage{PromptTokens: math.MaxInt64}, Price{Input: math.MaxUint64}, "170141183460469231704017187605320"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Cost(tc.u, tc.p); got.Cmp(bigInt(t, tc.want)) != 0 {
				t.Errorf("Cost(%+v, %+v) = %s, want %s", tc.u, tc.p, got, tc.want)
			}
		})
	}
}

func TestCharge(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		cost, minCharge, max string
		want                 string
	}{
		{"the cost when between the minimum and the maximum", "23456", "10000", "50000", "23456"},
		{"raised to the minimum", "450", "10000", "50000", "10000"},
		{"capped at the maximum", "60001", "10000", "50000", "50000"},
		{"the maximum caps the minimum too", "1", "10000", "5000", "5000"},
		{"no minimum: the cost", "450", "0", "50000", "450"},
		{"nothing used, no minimum: nothing", "0", "0", "50000", "0"},
		{"nothing used: the minimum", "0", "10000", "50000", "10000"},
		{"a negative cost counts as zero", "-5", "0", "50000", "0"},
		{"uint256 sized", "115792089237316195423570985008687907853269984665640564039457584007913129639935", "1", "115792089237316195423570985008687907853269984665640564039457584007913129639934", "115792089237316195423570985008687907853269984665640564039457584007913129639934"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cost, minCharge, maxAmount := bigInt(t, tc.cost), bigInt(t, tc.minCharge), bigInt(t, tc.max)
			got := Charge(cost, minCharge, maxAmount)
			if got.Cmp(bigInt(t, tc.want)) != 0 {
				t.Errorf("Charge(%s, %s, %s) = %s, want %s", tc.cost, tc.minCharge, tc.max, got, tc.want)
			}
			got.SetInt64(-1)
			if cost.String() != tc.cost || maxAmount.String() != tc.max {
				t.Error("Charge returned or changed its arguments")
			}
		})
	}
	if got := Charge(big.NewInt(7), nil, big.NewInt(9)); got.Int64() != 7 {
		t.Errorf("Charge with no minimum = %s, want 7", got)
	}
}

// TestChargeProperties: whatever the usage, an upto charge never exceeds the
// exact quote of the same request, never falls below the cost unless the
// quote caps it, and never below the minimum unless the quote is lower.
func TestChargeProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		prompt := rng.Int64N(1 << 20)
		bound := rng.Int64N(1 << 20)
		used := rng.Int64N(bound + 1)
		p := Price{Input: rng.Uint64N(1 << 30), Output: rng.Uint64N(1 << 30)}
		decimals := uint8(rng.IntN(19))
		maxAmount := Quote(prompt, bound, p, decimals)
		cost := Cost(chat.Usage{PromptTokens: prompt, CompletionTokens: used}, p)
		minCharge := Cent(decimals)
		got := Charge(cost, minCharge, maxAmount)
		if got.Cmp(maxAmount) > 0 || got.Cmp(cost) < 0 || got.Cmp(minCharge) < 0 {
			t.Fatalf("Charge(cost %s, min %s, max %s) = %s", cost, minCharge, maxAmount, got)
		}
	}
}

func TestCent(t *testing.T) {
	for _, tc := range []struct {
		decimals uint8
		want     string
	}{{0, "1"}, {1, "1"}, {2, "1"}, {3, "10"}, {6, "10000"}, {18, "10000000000000000"}} {
		if got := Cent(tc.decimals); got.String() != tc.want {
			t.Errorf("Cent(%d) = %s, want %s", tc.decimals, got, tc.want)
		}
	}
}

func TestOutputBound(t *testing.T) {
	for _, tc := range []struct {
		name       string
		body       string
		defaultCap int64
		want       int64
	}{
		{"default cap when none given", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 4096, 4096},
		{"max_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100}`, 4096, 100},
		{"max_completion_tokens supersedes max_tokens", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"max_completion_tokens":300}`, 4096, 300},
		{"n multiplies", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"n":3}`, 4096, 300},
		{"n multiplies the default", `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":128}`, 4096, 4096 * 128},
		{"saturates", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":9223372036854775807,"n":2}`, 4096, math.MaxInt64},
		{"no cap at all", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := chat.ParseRequest([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if got := OutputBound(req, tc.defaultCap); got != tc.want {
				t.Errorf("OutputBound = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestFormatAmount(t *testing.T) {
	maxUint256 := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	for _, tc := range []struct {
		atomic   *big.Int
		decimals uint8
		want     string
	}{
		{big.NewInt(30000), 6, "0.03"},
		{big.NewInt(10000), 6, "0.01"},
		{big.NewInt(50000), 6, "0.05"},
		{big.NewInt(100000), 6, "0.10"},
		{big.NewInt(1500000), 6, "1.50"},
		{big.NewInt(12000000), 6, "12.00"},
		{big.NewInt(12), 6, "0.000012"},
		{big.NewInt(1), 6, "0.000001"},
		{big.NewInt(1234567), 6, "1.234567"},
		{big.NewInt(1230000), 6, "1.23"},
		{big.NewInt(1234000), 6, "1.234"},
		{big.NewInt(0), 6, "0.00"},
		{nil, 6, "0.00"}, // nil is zero
		{nil, 0, "0"},
		{big.NewInt(-10000), 6, "-0.01"},
		{big.NewInt(-1), 6, "-0.000001"},
		// An asset without cents shows the decimals it has.
		{big.NewInt(12), 0, "12"},
		{big.NewInt(0), 0, "0"},
		{big.NewInt(15), 1, "1.5"},
		{big.NewInt(10), 1, "1.0"},
		{big.NewInt(5), 2, "0.05"},
		{big.NewInt(1), 18, "0.000000000000000001"},
		{bigInt(t, "1500000000000000000"), 18, "1.50"},
		{bigInt(t, "1000000000000000000"), 18, "1.00"},
		{maxUint256, 0, maxUint256.String()},
		{maxUint256, 36, "115792089237316195423570985008687907853269.984665640564039457584007913129639935"},
	} {
		if got := FormatAmount(tc.atomic, tc.decimals); got != tc.want {
			t.Errorf("FormatAmount(%v, %d) = %q, want %q", tc.atomic, tc.decimals, got, tc.want)
		}
	}
}

// TestParseAmount: the two forms (a decimal point means whole tokens, an
// integer atomic units) and every boundary: white space, too many decimals,
// signs, exponents, range, other scripts' digits. Errors say what is wrong.
func TestParseAmount(t *testing.T) {
	const maxUint256 = "115792089237316195423570985008687907853269984665640564039457584007913129639935"
	for _, tc := range []struct {
		in       string
		decimals uint8
		want     string // atomic units; "" = error
		wantErr  string // part of the error, when want is ""
	}{
		// Whole tokens, with a decimal point.
		{"0.05", 6, "50000", ""},
		{"0.01", 6, "10000", ""},
		{"12.5", 6, "12500000", ""},
		{"12.00", 6, "12000000", ""},
		{"1.00", 6, "1000000", ""},
		{"0.000001", 6, "1", ""},
		{"007.10", 2, "710", ""},
		{"00.10", 6, "100000", ""},
		{"1.5", 1, "15", ""},
		{"1.5", 18, "1500000000000000000", ""},
		{"1.00", 0, "1", ""},          // zeros past the asset's decimals change nothing
		{"0.0500000", 6, "50000", ""}, // same
		// Atomic units, without one: "12" is 12 atomic units, never 12 tokens.
		{"12", 6, "12", ""},
		{"50000", 6, "50000", ""},
		{"0", 6, "0", ""},
		{"15", 0, "15", ""},
		{"1", 18, "1", ""},
		{"1", 255, "1", ""},
		{"0050000", 6, "50000", ""},
		{maxUint256, 0, maxUint256, ""},
		{maxUint256, 77, maxUint256, ""},
		// Surrounding white space is ignored.
		{" 0.10 ", 6, "100000", ""},
		{"\t12\n", 6, "12", ""},
		{" 1", 6, "1", ""},
		// Too many decimals: refused, never rounded.
		{"0.0000001", 6, "", "has more than 6 decimals"},
		{"12.5", 0, "", "has more than 0 decimals"},
		{"1.5", 0, "", "has more than 0 decimals"},
		{"0.001", 2, "", "has more than 2 decimals"},
		// Out of range.
		{"115792089237316195423570985008687907853269984665640564039457584007913129639936", 0, "", "does not fit in 256 bits"},
		{"115792089237316195423570985008687907853269984665640564039457.584007913129639936", 18, "", "does not fit in 256 bits"},
		{"1.5", 255, "", "does not fit in 256 bits"},
		{strings.Repeat("9", 101), 6, "", "does not fit in 256 bits"},
		{strings.Repeat("9", 200), 0, "", "does not fit in 256 bits"},
		{strings.Repeat("9", 301), 0, "", "longer than 300 characters"},
		// Not a plain non-negative decimal.
		{"", 6, "", "is not a non-negative number"},
		{"   ", 6, "", "is not a non-negative number"},
		{"-1", 6, "", "is not a non-negative number"},
		{"-0.05", 6, "", "is not a non-negative number"},
		{"+1", 6, "", "is not a non-negative number"},
		{"1e3", 6, "", "is not a non-negative number"},
		{"1E3", 6, "", "is not a non-negative number"},
		{"1e6", 6, "", "is not a non-negative number"},
		{"1.5e-3", 6, "", "is not a non-negative number"},
		{"١", 6, "", "is not a non-negative number"}, // ARABIC-INDIC DIGIT ONE
		{"１", 6, "", "is not a non-negative number"}, // FULLWIDTH DIGIT ONE
		{"½", 6, "", "is not a non-negative number"},
		{"1 000", 6, "", "is not a non-negative number"},
		{"1.", 6, "", "is not a non-negative number"},
		{".5", 6, "", "is not a non-negative number"},
		{".", 6, "", "is not a non-negative number"},
		{"1.2.3", 6, "", "is not a non-negative number"},
		{"1,5", 6, "", "is not a non-negative number"},
		{"1_000", 6, "", "is not a non-negative number"},
		{"0x10", 6, "", "is not a non-negative number"},
		{"NaN", 6, "", "is not a non-negative number"},
		{"Inf", 6, "", "is not a non-negative number"},
		{"1\x00", 6, "", "is not a non-negative number"},
	} {
		got, err := ParseAmount(tc.in, tc.decimals)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("ParseAmount(%q, %d) = %s, want an error", tc.in, tc.decimals, got)
		case tc.want == "" && !strings.Contains(err.Error(), tc.wantErr):
			t.Errorf("ParseAmount(%q, %d): %v, want an error saying %q", tc.in, tc.decimals, err, tc.wantErr)
		case tc.want != "" && err != nil:
			t.Errorf("ParseAmount(%q, %d): %v", tc.in, tc.decimals, err)
		case tc.want != "" && got.Cmp(bigInt(t, tc.want)) != 0:
			t.Errorf("ParseAmount(%q, %d) = %s, want %s", tc.in, tc.decimals, got, tc.want)
		}
	}
}

func TestFormatParseRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		decimals := uint8(rng.IntN(37))
		buf := make([]byte, rng.IntN(33))
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		a := new(big.Int).SetBytes(buf)
		s := FormatAmount(a, decimals)
		back, err := ParseAmount(s, decimals)
		if err != nil {
			t.Fatalf("ParseAmount(FormatAmount(%s, %d) = %q): %v", a, decimals, s, err)
		}
		if back.Cmp(a) != 0 {
			t.Fatalf("round trip of %s with %d decimals: %q -> %s", a, decimals, s, back)
		}
	}
}
