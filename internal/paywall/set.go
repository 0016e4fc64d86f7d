package paywall

import (
	"context"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Set is the paywalls of every network and asset a 402 offers, in the order
// it lists them; the first is the primary one (its network keys the recovery
// records, and top-ups pay on it alone). Every asset of a set is taken at
// par: one quote, in atomic units, is asked in each of them.
//
// A payment is admitted by the paywall of the offer it accepted (its network
// and asset); one that names none of them meets the primary paywall, whose
// 402 lists every offer again.
type Set struct {
	all []*Paywall
}

// NewSet returns the set of pws, the primary one first. It ties them
// together: recovery records are keyed by the primary network whichever
// network pays, so a buyer's retry with the same payment identifier finds
// its record even when it pays on another network; and a record's payment is
// confirmed on the chain of its own network.
func NewSet(pws ...*Paywall) *Set {
	s := &Set{all: pws}
	for _, p := range pws {
		p.set = s
	}
	return s
}

// Primary is the set's first paywall.
func (s *Set) Primary() *Paywall { return s.all[0] }

// Recovers reports whether paid answers are recorded for replay.
func (s *Set) Recovers() bool { return s.all[0].Recovers() }

// SetNow replaces every paywall's clock (tests).
func (s *Set) SetNow(now func() time.Time) {
	for _, p := range s.all {
		p.SetNow(now)
	}
}

// Offer fills q's offers of amount: its exact (and, when withUpto, upto)
// offer on the primary network, and every offer of the set in 402 order:
// each network's exact offer, then its upto one where it offers upto.
func (s *Set) Offer(q *Quote, amount *big.Int, withUpto bool) {
	q.Amount, q.withUpto = amount, withUpto
	q.Offer, q.Upto = s.all[0].offers(amount, withUpto)
	if len(s.all) == 1 {
		q.Accepts = nil
		return
	}
	q.Accepts = make([]x402.PaymentRequirements, 0, 2*len(s.all))
	for _, p := range s.all {
		exact, upto := p.offers(amount, withUpto)
		q.Accepts = append(q.Accepts, exact)
		if upto != nil {
			q.Accepts = append(q.Accepts, *upto)
		}
	}
}

// offers are p's exact offer of amount and, when withUpto, its upto offer
// (nil where p offers exact alone).
func (p *Paywall) offers(amount *big.Int, withUpto bool) (x402.PaymentRequirements, *x402.PaymentRequirements) {
	var u *x402.PaymentRequirements
	if withUpto {
		u = p.UptoOffer(amount)
	}
	return p.Offer(amount), u
}

// Admit is Paywall.Admit by the paywall of the offer the payment accepted.
func (s *Set) Admit(ctx context.Context, q *Quote, in Presented, req Request) (Admission, error) {
	return s.pick(q, in).Admit(ctx, q, in, req)
}

// pick returns the paywall of the network and asset in's payment accepted,
// with q's own offers made its: the primary paywall when there is one, or
// when the payment is absent, unreadable or names no offer of the set (it
// then refuses it as it would alone, listing every offer).
func (s *Set) pick(q *Quote, in Presented) *Paywall {
	if len(s.all) == 1 || in.Signature == "" {
		return s.all[0]
	}
	payload, err := x402.DecodePaymentPayload(in.Signature)
	if err != nil {
		return s.all[0]
	}
	accepted, err := payload.AcceptedRequirements()
	if err != nil {
		return s.all[0]
	}
	asset, err := exact.ParseAddress(accepted.Asset)
	if err != nil {
		return s.all[0]
	}
	p := s.find(accepted.Network, asset)
	if p == nil {
		return s.all[0]
	}
	q.Offer, q.Upto = p.offers(q.Amount, q.withUpto)
	return p
}

// find returns the paywall of network and asset, or nil.
func (s *Set) find(network string, asset common.Address) *Paywall {
	for _, p := range s.all {
		if p.cfg.Network == network && p.cfg.AssetAddress == asset {
			return p
		}
	}
	return nil
}

// recordNetwork is the network recovery records are keyed under: the
// primary one of p's set, or p's own.
func (p *Paywall) recordNetwork() string {
	if p.set != nil {
		return p.set.all[0].cfg.Network
	}
	return p.cfg.Network
}

// keyNetwork is the network of claim key (D4), which begins every key of
// either scheme, or fallback when key has none.
func keyNetwork(key, fallback string) string {
	if network, _, ok := strings.Cut(key, "/"); ok && network != "" {
		return network
	}
	return fallback
}
