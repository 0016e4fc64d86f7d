package store

import (
	"fmt"
	"strings"
	"time"
)

// ClaimRetention says how long a claim on a payment must be kept so that no
// chain can still accept the payment once the claim is forgotten:
// forgetting it earlier would let the same payment buy a second answer.
type ClaimRetention struct {
	// Margin is kept past the payment's own expiry, for clock skew between
	// the chain and the store and for a transaction still in a mempool.
	Margin time.Duration
	// Max is the retention from the claim's creation for a payment whose
	// expiry the store cannot read.
	Max time.Duration
}

// claimRetention is the table per CAIP-2 namespace.
//
//   - eip155 (EVM, EIP-3009): the authorization's validBefore is the signed
//     expiry; the token refuses it from then on, so validBefore + margin.
//   - sui: a transaction is bound to an epoch (about 24 h) and may be executed
//     until its expiration epoch; keep it up to three days.
//   - solana: a transaction is bound to a recent blockhash, valid for about
//     150 slots (a minute or two); keep it for minutes.
var claimRetention = map[string]ClaimRetention{
	"eip155": {Margin: 10 * time.Minute, Max: 25 * time.Hour},
	"sui":    {Margin: time.Hour, Max: 72 * time.Hour},
	"solana": {Margin: 5 * time.Minute, Max: 10 * time.Minute},
}

// ClaimExpiry returns when a claim on a payment on network, created at now,
// may be forgotten: the payment's own expiry plus the network's margin, or,
// for a rail whose expiry the store cannot read (paymentExpiry zero), now plus
// the network's maximum. It never shortens a readable expiry: the claim must
// outlive the payment. An unknown namespace is an error: a claim is never kept
// for a guessed time.
func ClaimExpiry(network string, now, paymentExpiry time.Time) (time.Time, error) {
	ns, _, ok := strings.Cut(network, ":")
	r, known := claimRetention[ns]
	if !ok || !known {
		return time.Time{}, fmt.Errorf("store: no claim retention for network %q", network)
	}
	if paymentExpiry.IsZero() {
		return now.Add(r.Max), nil
	}
	return paymentExpiry.Add(r.Margin), nil
}
