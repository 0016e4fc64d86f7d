// Package pricing turns token counts into prices: the quote a 402 states
// before a call (D13), the actual cost of a finished
// call, and the one reading and display of an amount of a token in whole
// tokens (ParseAmount, FormatAmount), which the gateway and the CLI share.
//
// Everything here is a pure function of its arguments: no I/O, no clock, no
// configuration lookups. Money is never float64: prices are integer atomic
// units of the asset per million tokens, and amounts are *big.Int atomic units,
// so a quote is exact and identical in the 402, in /v1/models and in the check
// of a paid retry.
//
// Token counts for a request come from Counter (tokens.go), which estimates
// what the upstream will report as prompt_tokens.
package pricing

import (
	"fmt"
	"math"
	"math/big"
	"strings"

	"github.com/llm4agents/llm4agents/internal/chat"
)

// TokensPerPrice is the number of tokens a Price is quoted for: prices are per
// million tokens, as providers publish them.
const TokensPerPrice = 1_000_000

// Price is a model's price in atomic units of the payment asset per million
// (TokensPerPrice) tokens. For 6-decimal USDC an atomic unit is a micro-dollar,
// so gpt-4o-mini's $0.15 per million input tokens is Input 150000.
//
// The zero Price makes every call cost nothing, and every quote the one-cent
// minimum. uint64 holds prices up to about 1.8e19 atomic units per million
// tokens: $18e12 for USDC, but only about 18.4 whole tokens for an asset with
// 18 decimals.
type Price struct {
	Input  uint64 // per million prompt tokens
	Output uint64 // per million completion tokens, reasoning tokens included
}

var (
	bigMillion = big.NewInt(TokensPerPrice)
	bigOne     = big.NewInt(1)
	bigTen     = big.NewInt(10)
	// maxUint256 bounds ParseAmount: an EVM token amount is a uint256.
	maxUint256 = new(big.Int).Sub(new(big.Int).Lsh(bigOne, 256), bigOne)
)

// Quote is the price a 402 states for a call with promptTokens in and at most
// outputTokens out: the exact cost, rounded up to a whole cent of the asset and
// never below one cent. outputTokens is the whole output bound,
// already multiplied by the number of choices (see OutputBound).
//
// A cent is 10^(decimals-2) atomic units; an asset with fewer than two decimals
// has no cents, and its quotes are rounded up to one atomic unit instead
// (never below one). Negative token counts count as zero. The result is a new
// value the caller may keep or modify.
func Quote(promptTokens, outputTokens int64, p Price, decimals uint8) *big.Int {
	exact := atomicCost(promptTokens, outputTokens, p)
	cent := Cent(decimals)
	if exact.Sign() == 0 {
		return cent
	}
	q, r := new(big.Int).QuoRem(exact, cent, new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, bigOne)
	}
	return q.Mul(q, cent)
}

// Cost is the actual cost of a finished call from the usage the upstream
// reported: the exact price of its prompt and completion tokens, rounded up to
// the next atomic unit but not to the cent. It is what reporting shows and what
// credits are charged (D16); it may be zero. Negative counts in u
// count as zero.
func Cost(u chat.Usage, p Price) *big.Int {
	return atomicCost(u.PromptTokens, u.CompletionTokens, p)
}

// Charge is what an upto payment settles for a finished call (D27): its cost
// (Cost: the upstream's usage at list price, rounded up to the atomic unit),
// raised to minCharge, since every settlement costs the seller gas, and capped
// at max, the maximum the buyer authorized (the exact quote of the same
// request). A nil or zero minCharge raises nothing. Zero settles nothing: no
// transaction is sent. The result is a new value.
func Charge(cost, minCharge, max *big.Int) *big.Int {
	c := new(big.Int).Set(cost)
	if c.Sign() < 0 {
		c.SetInt64(0)
	}
	if minCharge != nil && c.Cmp(minCharge) < 0 {
		c.Set(minCharge)
	}
	if c.Cmp(max) > 0 {
		c.Set(max)
	}
	return c
}

// atomicCost is ceil((prompt*Input + output*Output) / 1e6), in big.Int so that
// no product can overflow.
func atomicCost(prompt, output int64, p Price) *big.Int {
	sum := new(big.Int)
	t := new(big.Int)
	if prompt > 0 {
		sum.Mul(t.SetInt64(prompt), new(big.Int).SetUint64(p.Input))
	}
	if output > 0 {
		t.SetInt64(output)
		sum.Add(sum, t.Mul(t, new(big.Int).SetUint64(p.Output)))
	}
	q, r := sum.QuoRem(sum, bigMillion, t)
	if r.Sign() != 0 {
		q.Add(q, bigOne)
	}
	return q
}

// Cent returns one cent of an asset with the given decimals, in atomic units:
// 10^(decimals-2), or 1 for an asset with fewer than two decimals. For 6-decimal
// USDC it is 10000.
func Cent(decimals uint8) *big.Int {
	if decimals < 2 {
		return big.NewInt(1)
	}
	return new(big.Int).Exp(bigTen, big.NewInt(int64(decimals)-2), nil)
}

// OutputBound is the number of output tokens a request is quoted for
// (D13): the client's max_completion_tokens or max_tokens, or
// defaultCap when it gave neither (the gateway then injects defaultCap
// upstream), times n. Reasoning tokens count as output, so they are inside
// this bound. It saturates at math.MaxInt64 instead of overflowing, and is 0
// when there is no positive cap at all.
func OutputBound(req *chat.Request, defaultCap int64) int64 {
	limit := req.OutputCap()
	if limit <= 0 {
		limit = defaultCap
	}
	if limit <= 0 {
		return 0
	}
	n := max(req.Choices(), 1)
	if limit > math.MaxInt64/n {
		return math.MaxInt64
	}
	return limit * n
}

// FormatAmount renders atomic units of an asset with the given decimals as
// whole tokens, for people: "0.03", "1.50", "12.00", "0.000001" for 6-decimal
// USDC. It shows at least two decimals (a dollar display), more when the
// amount needs them, and never rounds: trailing zeros past the second decimal
// are dropped, nothing else. An asset with fewer than two decimals shows only
// the decimals it has (1.5 with one, 15 with none), since it has no cents. A nil
// amount is zero; a negative one starts with "-".
//
// ParseAmount reads every result back to the same amount.
func FormatAmount(atomic *big.Int, decimals uint8) string {
	if atomic == nil {
		atomic = new(big.Int)
	}
	digits := new(big.Int).Abs(atomic).String()
	d := int(decimals)
	if len(digits) <= d {
		digits = strings.Repeat("0", d-len(digits)+1) + digits
	}
	whole, frac := digits[:len(digits)-d], strings.TrimRight(digits[len(digits)-d:], "0")
	if keep := min(2, d); len(frac) < keep {
		frac += strings.Repeat("0", keep-len(frac))
	}
	sign := ""
	if atomic.Sign() < 0 {
		sign = "-"
	}
	if frac == "" {
		return sign + whole
	}
	return sign + whole + "." + frac
}

// maxAmountLen bounds the input of ParseAmount, which refuses anything longer
// before any work: the longest amount FormatAmount writes has 257 characters
// (one atomic unit at 255 decimals), with room left for white space around it.
const maxAmountLen = 300

// ParseAmount reads an amount of an asset with the given decimals, as a person
// types it on the command line, into atomic units, exactly. It takes two forms:
//
//   - with a decimal point, whole tokens: "0.05" is 50000 atomic units of
//     6-decimal USDC, "12.5" is 12500000;
//   - without one, atomic units: "50000" is 50000, and "12" is 12 atomic units,
//     not 12 tokens.
//
// The second form is what the CLI's --help and README promise, and it errs on
// the safe side: a user who types "12" meaning twelve dollars allows twelve
// micro-dollars, never a million times more than meant.
//
// Surrounding white space is ignored. Otherwise only ASCII digits with at most
// one '.' and digits on both sides of it are accepted: no sign, exponent,
// separator, other scripts' digits, or value above the uint256 maximum. Digits
// past the asset's decimals must be zeros ("0.0500000" is 0.05; "0.0000001" is
// refused, as it would need rounding). Zero is accepted; whether zero is allowed
// is the caller's decision.
func ParseAmount(s string, decimals uint8) (*big.Int, error) {
	if len(s) > maxAmountLen {
		return nil, fmt.Errorf("amount is longer than %d characters", maxAmountLen)
	}
	s = strings.TrimSpace(s)
	whole, frac, dot := strings.Cut(s, ".")
	if !allDigits(whole) || (dot && !allDigits(frac)) {
		return nil, fmt.Errorf("amount %q is not a non-negative number such as 0.05 (whole tokens) or 50000 (atomic units)", s)
	}
	digits := whole
	if dot {
		if len(frac) > int(decimals) {
			if strings.TrimRight(frac[decimals:], "0") != "" {
				return nil, fmt.Errorf("amount %q has more than %d decimals", s, decimals)
			}
			frac = frac[:decimals] // only zeros past the asset's precision: the value is exact
		}
		digits = whole + frac + strings.Repeat("0", int(decimals)-len(frac))
	}
	n, ok := new(big.Int).SetString(digits, 10)
	if !ok || n.Cmp(maxUint256) > 0 {
		return nil, fmt.Errorf("amount %q does not fit in 256 bits", s)
	}
	return n, nil
}

// allDigits reports whether s is non-empty and only ASCII digits.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
