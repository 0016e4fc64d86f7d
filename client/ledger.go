package client

import (
	"math/big"
	"sync"

	"github.com/llm4agents/llm4agents/x402"
)

// ledger tracks what a Transport has spent and what it holds for payments in
// flight or of unknown outcome. A payment is reserved (held) before it is signed,
// in the same critical section as the choice, so concurrent calls never commit
// more than the budget between them.
type ledger struct {
	mu    sync.Mutex
	spent big.Int // outcome paid
	held  big.Int // reserved: in flight or outcome unknown
}

// remaining is budget - spent - held, floored at zero. Callers hold l.mu.
func (l *ledger) remainingLocked(budget *big.Int) *big.Int {
	r := new(big.Int).Sub(budget, &l.spent)
	r.Sub(r, &l.held)
	if r.Sign() < 0 {
		r.SetInt64(0)
	}
	return r
}

// reserve chooses the option of pr to pay under r and holds its amount. It
// returns the index (-1 when nothing is payable), the amount held and the
// verdict on every option.
func (l *ledger) reserve(r *rules, pr *x402.PaymentRequired) (int, *big.Int, []Option) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, amount, opts := r.choose(pr, l.remainingLocked(r.budget))
	if i >= 0 {
		l.held.Add(&l.held, amount)
	}
	return i, amount, opts
}

// finish moves a held amount according to the payment's outcome: to spent when
// paid, out when not paid; an unknown outcome stays held.
func (l *ledger) finish(amount *big.Int, o Outcome) {
	if o == OutcomeUnknown {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held.Sub(&l.held, amount)
	if o == OutcomePaid {
		l.spent.Add(&l.spent, amount)
	}
}

func (l *ledger) totals() (spent, held *big.Int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return new(big.Int).Set(&l.spent), new(big.Int).Set(&l.held)
}
