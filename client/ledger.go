package client

import (
	"math/big"
	"sync"

	"github.com/llm4agents/llm4agents/x402"
)

// ledger tracks what a Transport has spent and what it holds for payments in
// flight or of unknown outcome. A payment is reserved (held) before it is signed,
// in the same critical section as the choice, so concurrent calls never commit
// more than the budget between them. Once signed, a hold is bound to its
// authorization, so sending the same authorization again (a retry) never
// counts it twice.
type ledger struct {
	mu    sync.Mutex
	spent big.Int // outcome paid
	held  big.Int // reserved: in flight or outcome unknown
	// bound maps an authorization (holdID of its header) to its amount, which
	// is part of held.
	bound map[string]*big.Int
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

// reserveRecorded judges sending again an authorization already signed for
// accepts[i] of pr (i is -1 when no option matches it). Every other option is
// refused: paying one would be a second payment while the first may still be
// spent. An authorization this ledger already holds is not counted again;
// otherwise its amount must fit in what is left of the budget, and is held and
// bound to id (fresh). ok is false when it may not be sent.
func (l *ledger) reserveRecorded(r *rules, pr *x402.PaymentRequired, i int, id string) (opts []Option, ok, fresh bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	opts = make([]Option, len(pr.Accepts))
	for k, req := range pr.Accepts {
		opts[k] = Option{Index: k, Requirements: req, RefusalError: RefusedOutstanding,
			Label: "an authorization signed earlier for this call is still valid and pays another option"}
	}
	if i < 0 {
		return opts, false, false
	}
	v := r.judge(pr.Accepts[i])
	_, bound := l.bound[id]
	if v.refusal == "" && !bound {
		if rem := l.remainingLocked(r.budget); v.amount.Cmp(rem) > 0 {
			v = refuse(RefusedOverBudget, "amount %s is over the remaining budget %s", v.amount, rem)
		}
	}
	if v.refusal != "" {
		opts[i].RefusalError, opts[i].Label = v.refusal, v.label
		return opts, false, false
	}
	opts[i].RefusalError, opts[i].Label = "", "chosen"
	if !bound {
		l.held.Add(&l.held, v.amount)
		l.bindLocked(id, v.amount)
	}
	return opts, true, !bound
}

// bind ties a held amount to the authorization signed for it.
func (l *ledger) bind(id string, amount *big.Int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bindLocked(id, amount)
}

func (l *ledger) bindLocked(id string, amount *big.Int) {
	if l.bound == nil {
		l.bound = map[string]*big.Int{}
	}
	l.bound[id] = amount
}

// release gives back a reservation that was never signed or sent.
func (l *ledger) release(amount *big.Int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held.Sub(&l.held, amount)
}

// finish moves the hold of authorization id according to the outcome of a
// send: out when not paid, and when paid to spent for charged, the amount the
// payment cost (nil: all of the hold; never more than it: an upto payment
// holds its maximum until its settlement says what it cost); an unknown
// outcome stays held.
func (l *ledger) finish(id string, o Outcome, charged *big.Int) {
	if o == OutcomeUnknown {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	amount, ok := l.bound[id]
	if !ok {
		return
	}
	delete(l.bound, id)
	l.held.Sub(&l.held, amount)
	if o == OutcomePaid {
		if charged == nil || charged.Sign() < 0 || charged.Cmp(amount) > 0 {
			charged = amount
		}
		l.spent.Add(&l.spent, charged)
	}
}

func (l *ledger) totals() (spent, held *big.Int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return new(big.Int).Set(&l.spent), new(big.Int).Set(&l.held)
}
