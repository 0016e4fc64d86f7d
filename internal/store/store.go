// Package store declares the business-level storage contracts of llm4agents and
// their sentinel errors. Backends live in subpackages (sqlite, postgres and
// redis; Redis keeps settlements, payments and recoveries only) and all pass
// the same conformance suite in storetest.
//
// Contracts name operations, never SQL, so that a key-value backend can implement
// them with one atomic script per operation.
package store

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Backends map driver errors to these; nothing above store/*
// sees a driver error type.
var (
	ErrNotFound = errors.New("store: not found")
	// ErrFenced means a write carried a stale fencing token, or the record moved
	// on (out of StateClaimed, or into a terminal state with other values): the
	// writer lost its claim or its view is out of date, and must stop.
	ErrFenced = errors.New("store: stale fencing token")
	// ErrClosed means the backend's handle was closed. Every method of a
	// closed handle fails at once with an error wrapping it, neither
	// hanging nor panicking; a second Close does nothing and returns nil.
	ErrClosed = errors.New("store: database is closed")
)

// SettlementState is where the settlement of one authorization stands.
type SettlementState string

// Settlement states. Only StateClaimed may be released or taken over; a record that
// reached StateBroadcast is resolved from the chain, never re-broadcast blindly,
// and is only given back (AbandonBroadcast) once its transaction can never be
// mined.
const (
	StateClaimed   SettlementState = "claimed"   // held for broadcast; nothing sent yet (RecordBroadcast comes first)
	StateBroadcast SettlementState = "broadcast" // a transaction was sent; outcome not known yet
	StateSettled   SettlementState = "settled"   // mined, status 1, the transfer is in its logs
	StateFailed    SettlementState = "failed"    // terminal: will never settle
)

// Settlement is the record of settling one authorization, keyed by its on-chain
// replay identity (D4).
type Settlement struct {
	Key     string
	Network string
	Asset   string
	Payer   string
	PayTo   string
	Amount  string // decimal atomic units
	State   SettlementState
	TxHash  string // the transaction that settled it, or the latest one broadcast
	// RawTx is the signed transaction TxHash names, as RecordBroadcast stored
	// it before the transaction was sent, so whoever resolves the record can
	// tell the signer and nonce and send the very same bytes again if the node
	// dropped them: 0x-prefixed hex, as eth_sendRawTransaction takes it; ""
	// when the record was never given one.
	RawTx  string
	Reason string // failure reason when State is StateFailed
	Owner  string // the process holding the claim
	// Fence is new on every claim or takeover and is never reused for a key,
	// even after a release; writes carry it. Times are kept to the millisecond.
	Fence int64
	// LeaseUntil is when a StateClaimed record may be taken over, judged by the
	// store's clock.
	LeaseUntil time.Time
	// SuccessReported is set once, by the one caller that answered success:true
	// (D5).
	SuccessReported bool
	// Reorg is what the reconciler last found of a StateSettled record's
	// transaction when it looked for reorgs (D17; MarkReorg);
	// ReorgNone for every other record.
	Reorg ReorgStatus
	// Reorgs counts the times a reorg was seen to take the record's
	// transaction off the chain.
	Reorgs int64
	// LostTo is, once Reorg is ReorgLost, the transaction that used the
	// authorization instead of ours, or "" when none did (ours reverted when
	// mined again, or can no longer be mined).
	LostTo    string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ReorgStatus is what the reconciler last found of a settled record's
// transaction on the chain. It never changes State, SuccessReported or
// TxHash: the buyer was told (or will be told) once, and a reorg does not
// take that back (D5); it tells the operator whether the
// payment is still on the chain.
type ReorgStatus string

// Reorg statuses. A record moves from ReorgNone to ReorgDropped when its
// transaction is gone, back to ReorgNone when the same transaction is mined
// again, or on to ReorgLost, which is final.
const (
	ReorgNone    ReorgStatus = ""        // on the chain when last looked at, or never looked at
	ReorgDropped ReorgStatus = "dropped" // a reorg took the transaction off the chain; it may be mined again
	ReorgLost    ReorgStatus = "lost"    // final: it will never pay (LostTo says who used the authorization); the operator's loss
)

// RecentRetention is how far back RecentSettlements reaches: a backend may
// forget, for that listing, records last updated longer ago. It bounds
// the reconciler's reorg window.
const RecentRetention = 24 * time.Hour

// MaxRecentPage bounds one RecentSettlements listing.
const MaxRecentPage = 1000

// AllNetworks, as the network of Settlements.UnresolvedSettlements and
// Settlements.RecentSettlements, lists the records of every network: the
// operator's view. A reconciler passes its own network, so that other
// networks' records never use up its limit.
const AllNetworks = ""

// Settlements stores facilitator settlement records.
type Settlements interface {
	// ClaimSettlement creates s in StateClaimed with a new fence and a lease of
	// the given length (> 0, rounded up to the millisecond), unless a record
	// for s.Key (non-empty) exists; of any number of concurrent callers, on
	// any number of handles, exactly one creates or takes over the record. An
	// existing record in StateClaimed whose lease expired is taken over (Owner,
	// Fence and LeaseUntil replaced, and PayTo and Amount set to s's: nothing
	// was sent for a claimed record, and a payer may sign two authorizations
	// with one nonce, so the record must describe the one its new holder
	// sends, which the reconciler rebuilds from it). Only Key,
	// Network, Asset, Payer, PayTo, Amount and Owner of s are read. It returns the
	// record as it now stands and whether the caller holds the claim.
	ClaimSettlement(ctx context.Context, s Settlement, lease time.Duration) (Settlement, bool, error)
	// UpdateSettlement sets state, tx hash and reason of the record, if fence is
	// still the record's fence; otherwise ErrFenced. ErrNotFound if absent. A
	// record never moves back to StateClaimed, where it could be released or
	// taken over and its authorization broadcast again; StateBroadcast and
	// StateSettled need a tx hash, StateFailed a reason; an unknown state,
	// StateClaimed or a missing hash or reason fails with an error that is no
	// sentinel (CheckSettlementUpdate). StateSettled and StateFailed are
	// terminal: writing the same values again is a no-op, anything else
	// ErrFenced (someone else resolved the record; the caller must stop and
	// read it). RawTx is left as it is. UpdatedAt changes on every write.
	UpdateSettlement(ctx context.Context, key string, fence int64, state SettlementState, txHash, reason string) error
	// ReleaseSettlement deletes a record still in StateClaimed under fence, so the
	// authorization can be tried again. ErrFenced if the fence is stale or the
	// record moved past StateClaimed; ErrNotFound if absent.
	ReleaseSettlement(ctx context.Context, key string, fence int64) error
	// RecordBroadcast moves the record under fence from StateClaimed or
	// StateBroadcast to StateBroadcast with the transaction txHash and its
	// signed bytes rawTx (see Settlement.RawTx; 1 to MaxRawTx bytes). The facilitator calls it
	// before each transaction it sends for the record (a first one, a
	// replacement), so that whatever reaches the node is named by the record,
	// even if the process dies right after sending. ErrFenced if the fence is
	// stale or the record is resolved; ErrNotFound if absent; arguments that
	// fail CheckBroadcast are an error that is no sentinel.
	RecordBroadcast(ctx context.Context, key string, fence int64, txHash, rawTx string) error
	// AbandonBroadcast deletes a record in StateBroadcast under fence whose
	// transaction is still txHash, so the authorization can be tried again.
	// The caller has seen that the transaction can never be mined: the node
	// refused it, or another transaction used its nonce while the
	// authorization stayed unused. ErrFenced if the fence is stale, the record
	// is in another state or names another transaction; ErrNotFound if absent.
	AbandonBroadcast(ctx context.Context, key string, fence int64, txHash string) error
	// MarkSuccessReported atomically sets SuccessReported on a StateSettled record
	// and reports whether this call set it. Exactly one call ever gets true;
	// a record not settled, or already marked, gives false. ErrNotFound if
	// absent.
	MarkSuccessReported(ctx context.Context, key string) (bool, error)
	// Settlement returns the record for key, or ErrNotFound.
	Settlement(ctx context.Context, key string) (Settlement, error)
	// UnresolvedSettlements lists up to limit (> 0) records of network
	// (Settlement.Network; AllNetworks for every network) in StateClaimed
	// or StateBroadcast, oldest first (by CreatedAt, then by key, byte by
	// byte), for the reconciler of that network. The limit counts that
	// network's records only: however many records other networks left
	// unresolved (their node down for a while), they never hide one of
	// network's.
	UnresolvedSettlements(ctx context.Context, network string, limit int) ([]Settlement, error)
	// RecentSettlements lists up to limit (1 to MaxRecentPage) records of
	// network (AllNetworks for every network) in StateSettled, other than
	// ReorgLost ones, whose UpdatedAt is at or after since, newest first
	// (by UpdatedAt, then by key, both descending), for the reconciler of
	// that network to look for reorgs; as in UnresolvedSettlements, the
	// limit counts that network's records only. Records updated more than
	// RecentRetention ago may be left out.
	RecentSettlements(ctx context.Context, network string, since time.Time, limit int) ([]Settlement, error)
	// MarkReorg records what the reconciler found of the transaction of a
	// StateSettled record that names txHash, and reports whether this call
	// changed the record (so that, of replicas finding the same, one counts
	// it). to is ReorgDropped (from ReorgNone: the transaction is gone from
	// the chain; Reorgs goes up by one), ReorgNone (from ReorgDropped: the
	// same transaction is on the chain again) or ReorgLost (from
	// ReorgDropped; lostTo as Settlement.LostTo, and final). A record
	// already in to is left as it is (false). Nothing else of the record
	// changes but UpdatedAt. ErrNotFound if absent; ErrFenced if the record
	// is not settled, names another transaction, or to does not follow from
	// its status (see ReorgStep).
	MarkReorg(ctx context.Context, key, txHash string, to ReorgStatus, lostTo string) (bool, error)
}

// CheckRecentQuery checks the arguments of Settlements.RecentSettlements,
// for backends to refuse bad ones: a limit of 1 to MaxRecentPage.
func CheckRecentQuery(limit int) error {
	if limit <= 0 || limit > MaxRecentPage {
		return fmt.Errorf("limit %d is outside 1..%d", limit, MaxRecentPage)
	}
	return nil
}

// CheckReorg checks the arguments of Settlements.MarkReorg, for backends to
// refuse bad ones before they touch the record: a status the store knows,
// and a lost-to transaction only with ReorgLost.
func CheckReorg(to ReorgStatus, lostTo string) error {
	switch to {
	case ReorgNone, ReorgDropped, ReorgLost:
	default:
		return fmt.Errorf("unknown reorg status %q", to)
	}
	if lostTo != "" && to != ReorgLost {
		return fmt.Errorf("a lost-to transaction with reorg status %q", to)
	}
	return nil
}

// ReorgStep reports whether a record in status from moves when marked to
// (Settlements.MarkReorg, after CheckReorg), or an error wrapping ErrFenced
// when to does not follow from from. Backends that decide in Go use it as
// it is; the others follow the same table.
func ReorgStep(from, to ReorgStatus) (changed bool, err error) {
	switch {
	case from == ReorgLost:
		if to == ReorgLost {
			return false, nil
		}
		return false, fmt.Errorf("record is lost to a reorg, which is final: %w", ErrFenced)
	case from == to:
		return false, nil
	case from == ReorgNone && to == ReorgLost:
		return false, fmt.Errorf("record is on the chain, not dropped: %w", ErrFenced)
	}
	return true, nil
}

// MaxRawTx bounds Settlement.RawTx: nodes refuse larger transactions (geth's
// pool takes at most 128 KiB).
const MaxRawTx = 128 << 10

// CheckBroadcast checks the arguments of Settlements.RecordBroadcast, for
// backends to refuse bad ones before they touch the record.
func CheckBroadcast(txHash, rawTx string) error {
	hexDigits, ok := strings.CutPrefix(rawTx, "0x")
	switch {
	case txHash == "":
		return errors.New("no transaction hash")
	case !ok || hexDigits == "":
		return errors.New("raw transaction is not 0x-prefixed hex")
	case len(hexDigits) > 2*MaxRawTx:
		return fmt.Errorf("raw transaction of %d bytes, over %d", len(hexDigits)/2, MaxRawTx)
	}
	if _, err := hex.DecodeString(hexDigits); err != nil {
		return fmt.Errorf("raw transaction is not 0x-prefixed hex: %w", err)
	}
	return nil
}

// DefaultTimeout bounds one store operation when the caller's context has no
// earlier deadline.
const DefaultTimeout = 5 * time.Second

// PaymentState is where a paid request's claim on its authorization stands.
type PaymentState string

// Payment states. A claim is held while the request runs; it ends released (the
// authorization was not spent and may be presented again), settled, or pending
// (broadcast, not yet confirmed: still held, resolved from the chain).
const (
	PaymentHeld    PaymentState = "held"
	PaymentPending PaymentState = "pending"
	PaymentSettled PaymentState = "settled"
)

// PaymentClaim is a resource server's claim on one authorization, taken before
// the paid handler runs so that a second presentation of the same
// authorization, concurrent or later, never reaches the upstream.
type PaymentClaim struct {
	Key     string // the authorization's replay identity (D4)
	Network string
	Payer   string
	Amount  string // decimal atomic units
	State   PaymentState
	TxHash  string
	Owner   string
	Fence   int64
	// LeaseUntil is when a PaymentHeld claim whose holder died may be taken
	// over, judged by the store's clock.
	LeaseUntil time.Time
	// ExpiresAt is when the record may be forgotten: past the authorization's
	// validBefore plus a margin, when no chain can accept it any more.
	ExpiresAt time.Time
	// Staged is the answer the buyer paid for, kept while the settlement is
	// pending (D3) so that a retry with the same authorization
	// receives it; nil when nothing is staged.
	Staged    *StagedResponse
	CreatedAt time.Time
	UpdatedAt time.Time
}

// StagedResponse is a paid answer kept with its claim: the upstream's body as
// received, annotated with the cost only when it is served.
type StagedResponse struct {
	Status      int // HTTP status, 100..599
	ContentType string
	Body        []byte
	// Fingerprint identifies the request the answer belongs to (D14).
	Fingerprint string
}

// MaxStagedBody bounds StagedResponse.Body; StagePayment refuses a larger one.
const MaxStagedBody = 8 << 20

// MaxStagedPage bounds one page of the backends' StagedPayments listing.
const MaxStagedPage = 1000

// ValidateStagedQuery checks the arguments of a backend's StagedPayments: a
// content type, and a limit of 1 to MaxStagedPage.
func ValidateStagedQuery(contentType string, limit int) error {
	switch {
	case contentType == "":
		return errors.New("empty content type")
	case limit <= 0 || limit > MaxStagedPage:
		return fmt.Errorf("limit %d is outside 1..%d", limit, MaxStagedPage)
	}
	return nil
}

// Payments stores resource-server claims on authorizations. A claim counts as
// absent from its ExpiresAt on (now >= ExpiresAt, by the store's clock) in
// every operation, whatever its state, even PaymentHeld under a live lease or
// PaymentSettled. That cannot let an authorization be spent twice: ExpiresAt
// lies past the authorization's validBefore (plus a margin for clock
// skew), so no chain accepts that authorization any more, and a
// transaction broadcast for it has either been mined by then, spending its
// nonce, or never will be. A new authorization with the same key (same payer
// and nonce) can only be spent if that nonce is still unused on chain, which
// verification checks before the claim.
//
// Backends may also offer, outside this interface, PurgeExpiredPayments(ctx,
// limit) (int, error): it deletes up to limit (> 0) expired claims, soonest
// expired first, and returns how many. Expired claims already count as
// absent, so purging only reclaims space; call it periodically, and again at
// once while it returns limit.
type Payments interface {
	// ClaimPayment creates c in PaymentHeld with a new fence and a lease of
	// the given length (> 0, rounded up to the millisecond), unless a live
	// claim for c.Key (non-empty) exists, and returns the claim as it now
	// stands and whether the caller holds it; of any number of concurrent
	// callers, on any number of handles, exactly one creates, takes over or
	// replaces the claim. Only Key, Network, Payer, Amount, Owner and
	// ExpiresAt (rounded up to the millisecond, after the store's time) of c
	// are read; bad arguments fail with an error that is no sentinel and
	// change nothing, not even an expired claim. LeaseUntil may lie past
	// ExpiresAt; then expiry wins.
	//
	// A PaymentHeld claim whose lease is over (now >= LeaseUntil) is taken
	// over: its Owner, Fence and LeaseUntil are replaced, while Network,
	// Payer, Amount, ExpiresAt and CreatedAt stay the first claim's.
	// PaymentPending and PaymentSettled claims are never taken over. An
	// expired claim is replaced, as if absent.
	ClaimPayment(ctx context.Context, c PaymentClaim, lease time.Duration) (PaymentClaim, bool, error)
	// ReleasePayment deletes a claim in PaymentHeld or PaymentPending under
	// fence, whether or not its lease is over: the authorization was not
	// spent and may be presented again. ErrFenced if the fence is stale or
	// the claim is PaymentSettled; ErrNotFound if absent or expired. A key
	// claimed again after a release gets a fence never used before, so the
	// released fence stays stale.
	ReleasePayment(ctx context.Context, key string, fence int64) error
	// UpdatePayment moves a claim under fence to PaymentPending or
	// PaymentSettled with its transaction hash, which may be empty: a settle
	// answer need not name a transaction (a remote facilitator's
	// settlement_pending, or an authorization found already used), and
	// refusing the write would leave the claim held, to be taken over once
	// its lease ends, while the authorization is spent. PaymentHeld (a claim
	// never goes back to held, where it could be taken over and its
	// authorization reach the upstream again) and unknown states fail with an
	// error that is no sentinel (CheckPaymentUpdate).
	//
	// Allowed: held -> pending | settled, pending -> pending (a replacement
	// transaction, or the same one again) | settled. PaymentSettled is
	// terminal: writing the values it holds succeeds and changes nothing,
	// anything else is ErrFenced. A stale fence is ErrFenced, an absent or
	// expired claim ErrNotFound; the lease does not matter (until someone
	// takes the claim over, its holder's fence is good). UpdatedAt changes on
	// every write but the no-op on a settled claim.
	UpdatePayment(ctx context.Context, key string, fence int64, state PaymentState, txHash string) error
	// StagePayment keeps r with the claim for key, replacing any staged
	// response, while the claim is PaymentHeld or PaymentPending under fence.
	// ErrFenced if the fence is stale or the claim is PaymentSettled;
	// ErrNotFound if absent or expired. A body over MaxStagedBody or a status
	// outside 100..599 fails with an error that is not a sentinel.
	StagePayment(ctx context.Context, key string, fence int64, r StagedResponse) error
	// Payment returns the claim for key, or ErrNotFound.
	Payment(ctx context.Context, key string) (PaymentClaim, error)
}

// StagedLister is a Payments backend that can also list claims by the
// content type of their staged response (the SQL backends), for the
// gateway's top-up sweep, which declares the method on its side.
type StagedLister interface {
	Payments
	// StagedPayments lists up to limit (1..MaxStagedPage) claims whose
	// staged response has the content type contentType and that are
	// PaymentSettled or PaymentPending with a transaction hash: what a
	// background task needs to finish the work of a request that died after
	// its settlement. They come oldest first, by CreatedAt and then Key byte
	// by byte, starting after the claim (afterCreated, afterKey): pass the
	// last claim of a page to read the next, the zero time and "" to start.
	// CreatedAt never changes while a claim lives, so paging sees each claim
	// at most once.
	//
	// Unlike every operation of Payments, it lists expired claims too, until
	// they are purged: a settled payment nobody came back for is still owed
	// once its claim expired. Arguments that fail ValidateStagedQuery are an
	// error that is no sentinel; no match is an empty list.
	StagedPayments(ctx context.Context, contentType string, afterCreated time.Time, afterKey string, limit int) ([]PaymentClaim, error)
}
