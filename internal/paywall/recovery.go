package paywall

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/evm/exact"
)

// Recovery of paid answers whose response was lost (DESIGN.md D0, D14, D15).
//
// Every paid request that reaches the upstream begins a recovery record under
// its record key (D14: the payment-identifier and the payer when the buyer sent
// an id, else the authorization's identity) with a server-generated operation
// id, which the gateway sends with the answer. The handler only stages the
// upstream's answer (Fresh.Record); the after-settle step promotes it by
// operation id with the settlement's transaction (Fresh.Promote), and nothing
// else ever makes it replayable. A failed settlement abandons the record. A
// pending one (D3) leaves it staged: it is promoted by the retry that resolves
// the pending claim, or by the first lookup that finds the claim settled.
//
// The lookup runs at D0's place, after freshness and before verify. A promoted
// record is replayed only with proof of control (D15): the same
// PAYMENT-SIGNATURE that paid, before its validBefore, or a fresh
// authorization from the same payer for the same amount, verified by the
// facilitator and never settled. Each replay takes one unit of the record's
// budget; a spent or expired record is a new purchase.

// newOperationID returns a fresh operation id: "op_" and 128 random bits.
func newOperationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "op_" + hex.EncodeToString(b[:])
}

// Fingerprint is D14's request fingerprint, x402.Fingerprint, which the buyer computes too,
// so that the two can never disagree.
func Fingerprint(method, path, model string, body []byte) string {
	return x402.Fingerprint(method, path, model, body)
}

// RecordKey is the record key of D14. A payment-identifier is a secret: the
// key holds a hash of it with the network and the payer, never the id.
func RecordKey(network, payer, id, claimKey string) string {
	return recordKey(network, payer, id, claimKey)
}

func recordKey(network, payer, id, claimKey string) string {
	if id == "" {
		return "auth:" + claimKey
	}
	sum := sha256.Sum256([]byte("llm4agents/recovery/v1\x00" + network + "\x00" + strings.ToLower(payer) + "\x00" + id))
	return "pid:" + hex.EncodeToString(sum[:])
}

// stagedElsewhere refuses a request whose record is staged under another
// payment, c being that payment's claim (zero when absent): operation in
// flight while the request that staged it still holds the claim (it is
// settling), settlement pending once its settlement is pending.
func (p *Paywall) stagedElsewhere(c store.PaymentClaim) error {
	if c.State == store.PaymentHeld {
		p.metrics.Payment("in_flight")
		return operationInFlight()
	}
	return recoveryPending()
}

// recoveryLookup is D0's recovery lookup. It returns the *Replay of a
// promoted record to replay, an error to answer with, or neither when the
// request goes on (to the D3 claim lookup and verify). It fails closed: a
// store error is a refusal, never a replay and never a free answer.
func (p *Paywall) recoveryLookup(ctx context.Context, pd *payment) (Admission, error) {
	rec, err := p.recoveries.Recovery(ctx, pd.rkey)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, p.storeDown(err)
	}
	if rec.Fingerprint != pd.fp() {
		p.metrics.Payment("conflict")
		return nil, idempotencyConflict()
	}
	pd.found = &rec
	switch rec.State {
	case store.RecoveryInFlight:
		// The fresh path's BeginRecovery decides: a twin is refused, a dead
		// holder's record is taken over.
		return nil, nil
	case store.RecoveryStaged:
		if pd.key == rec.PaymentKey {
			return nil, nil // the same payment: the D3 claim lookup resolves it
		}
		c, err := p.payments.Payment(ctx, rec.PaymentKey)
		switch {
		case err == nil && c.State == store.PaymentSettled && c.TxHash != "":
			// Settled since (the reconciler): promote now, after settlement,
			// by operation id.
			if rec, err = p.promote(ctx, &rec, rec.Fingerprint, c.TxHash); err != nil {
				return nil, p.storeDown(err)
			}
		case err == nil, !errors.Is(err, store.ErrNotFound):
			if err != nil {
				return nil, p.storeDown(err)
			}
			return nil, p.stagedElsewhere(c)
		default:
			// The claim is gone: released (the payment never settled), or
			// expired past its authorization's validBefore, when the chain
			// has the last word. A payment it shows made is promoted, as
			// the reconciler would have, and replayed with proof below; the
			// buyer's new authorization never buys the same answer twice.
			tx, paid, err := p.paidByKey(ctx, rec.PaymentKey, rec.Amount)
			if err != nil {
				// Not known: dropping the record now could sell its paid
				// answer a second time. The buyer retries.
				return nil, p.recoveryFailed(err)
			}
			if !paid {
				// Nothing may be replayed from this record.
				if err := p.recoveries.AbandonRecovery(ctx, rec.Key, rec.Fence); err != nil && !errors.Is(err, store.ErrNotFound) {
					return nil, p.storeDown(err)
				}
				return nil, nil
			}
			if rec, err = p.promote(ctx, &rec, rec.Fingerprint, tx); err != nil {
				return nil, p.storeDown(err)
			}
		}
	case store.RecoveryPromoted:
	}
	if err := p.proveControl(ctx, pd, &rec); err != nil {
		p.metrics.Payment("unproven")
		return nil, err
	}
	r, took, err := p.recoveries.TakeReplay(ctx, rec.Key, rec.OperationID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil // expired in between: a new purchase
	case err != nil:
		return nil, p.storeDown(err)
	case !took:
		return nil, nil // the budget is spent: a new purchase
	}
	return p.replayOf(&r)
}

// replayOf is the replay of promoted record r: its recorded answer with the
// settlement that paid it.
func (p *Paywall) replayOf(r *store.Recovery) (*Replay, error) {
	if r.Response == nil {
		return nil, errors.New("promoted record without a response") // the schema forbids it
	}
	p.metrics.Payment("replayed_promoted")
	return &Replay{answer: &Answer{
		Settlement: &x402.SettleResponse{Success: true, Transaction: r.Settlement.TxHash, Network: r.Settlement.Network, Payer: r.Payer},
		Response:   r.Response, Replay: "promoted", Op: r.OperationID, Upto: isUptoKey(r.PaymentKey), PaymentKey: r.PaymentKey,
	}}, nil
}

// promote promotes rec, by its operation id and fingerprint fp, with the
// settlement of tx, and returns it as promoted.
func (p *Paywall) promote(ctx context.Context, rec *store.Recovery, fp, tx string) (store.Recovery, error) {
	// The record may be another network's payment, retried on this one
	// with the same payment identifier (Set).
	ref := store.SettlementRef{Network: keyNetwork(rec.PaymentKey, p.cfg.Network), TxHash: tx}
	return p.recoveries.PromoteRecovery(ctx, rec.OperationID, fp, ref, p.cfg.RecoveryTTL, p.cfg.RecoveryReplays)
}

// authConfirmer is an optional facilitator extra: it tells from the chain
// whether an authorization known only by its parts paid (D5).
type authConfirmer interface {
	ConfirmAuthorization(ctx context.Context, network string, asset common.Address, a exact.Authorization) (tx string, paid bool, err error)
}

// paidByKey tells from the chain whether the authorization of claim key
// paid amount to our payTo, and returns the transaction. An error means the
// chain could not tell: the facilitator cannot read it (a remote one without
// a node), or the read failed. A key of another network or asset of p's Set
// is confirmed by that network's paywall; one of none, as a configuration
// change leaves behind, never paid this gateway.
func (p *Paywall) paidByKey(ctx context.Context, key, amount string) (string, bool, error) {
	network, asset, from, nonce, err := exact.ParseKey(key)
	value, vok := new(big.Int).SetString(amount, 10)
	if err != nil || !vok {
		return "", false, fmt.Errorf("recorded payment %q of %q: %w", key, amount, errors.Join(err, errors.New("unreadable")))
	}
	if network != p.cfg.Network || asset != p.cfg.AssetAddress {
		if p.set != nil {
			if other := p.set.find(network, asset); other != nil {
				return other.paidByKey(ctx, key, amount)
			}
		}
		return "", false, nil
	}
	c, ok := p.fac.(authConfirmer)
	if !ok {
		return "", false, errors.New("the facilitator cannot read the chain")
	}
	tx, paid, err := c.ConfirmAuthorization(ctx, network, asset, exact.Authorization{From: from, To: p.cfg.PayToAddress, Value: value, Nonce: nonce})
	if err != nil {
		return "", false, fmt.Errorf("confirm a recorded payment from the chain: %w", err)
	}
	return tx, paid && tx != "", nil
}

// proveControl is D15: the same PAYMENT-SIGNATURE that paid, before its
// validBefore, or a fresh authorization from the same payer for the same
// amount, verified and never settled. Anything else is the normal 402.
//
// The authorization that paid is spent: without a payment identifier (the
// record is keyed by that authorization) no fresh authorization could prove
// anything, so a failed proof is refused as already used, never with a 402
// that would invite the buyer to pay for the same call again (D29).
func (p *Paywall) proveControl(ctx context.Context, pd *payment, rec *store.Recovery) error {
	q := pd.q
	_, before := pd.auth.window()
	if pd.key == rec.PaymentKey {
		noID := strings.HasPrefix(pd.rkey, "auth:")
		expired := before.Cmp(bigUnix(p.now())) <= 0
		switch {
		case pd.auth.proofHash() != rec.ProofHash && noID:
			return alreadyUsed()
		case pd.auth.proofHash() != rec.ProofHash:
			return p.challenge(q, NotProven, "payment does not prove control of this payment identifier", nil)
		case expired && noID:
			return alreadyUsed()
		case expired:
			return p.verifyChallenge(q, pd.auth.reasons().expiring, errors.New("the paying authorization expired"))
		}
		return nil
	}
	if !strings.EqualFold(pd.payer, rec.Payer) || pd.auth.value().String() != rec.Amount {
		return p.challenge(q, NotProven, "payment does not prove control of this payment identifier", nil)
	}
	vr, err := p.fac.Verify(ctx, pd.payload, pd.offer)
	if err != nil {
		return facilitatorDown(err)
	}
	if !vr.IsValid {
		return p.verifyChallenge(q, vr.InvalidReason, errors.New(vr.InvalidMessage))
	}
	return nil
}

// beginRecovery begins pd's record before the upstream is called. On any
// failure the payment claim is released and nothing is charged.
func (p *Paywall) beginRecovery(ctx context.Context, pd *payment) error {
	if err := p.openRecovery(ctx, pd); err != nil {
		pd.release(ctx)
		return err
	}
	return nil
}

// openRecovery begins pd's record, and leaves pd's claim as it is whatever
// happens.
func (p *Paywall) openRecovery(ctx context.Context, pd *payment) error {
	_, before := pd.auth.window()
	expires := p.now().Add(p.cfg.RecoveryTTL)
	if pd.claim.ExpiresAt.After(expires) {
		expires = pd.claim.ExpiresAt // a pending settlement may resolve until then
	}
	rec, held, err := p.recoveries.BeginRecovery(ctx, store.Recovery{
		Key: pd.rkey, Payer: pd.payer, Fingerprint: pd.fp(), OperationID: newOperationID(),
		PaymentKey: pd.key, ProofHash: pd.auth.proofHash(), ProofUntil: time.Unix(before.Int64(), 0),
		Amount: pd.auth.value().String(), Owner: p.cfg.Owner, ExpiresAt: expires,
	}, p.cfg.ClaimLease)
	if err != nil {
		return p.storeDown(err)
	}
	if !held {
		switch {
		case rec.Fingerprint != pd.fp():
			p.metrics.Payment("conflict")
			return idempotencyConflict()
		case rec.State == store.RecoveryStaged && rec.PaymentKey != pd.key:
			c, err := p.payments.Payment(ctx, rec.PaymentKey)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return p.storeDown(err)
			}
			return p.stagedElsewhere(c)
		default:
			p.metrics.Payment("in_flight")
			return operationInFlight()
		}
	}
	pd.rec = &rec
	pd.q.Op = rec.OperationID
	return nil
}

// Record stages the upstream's answer under the payment's recovery record,
// before the settlement (D14: the handler only stages; nothing is replayable
// yet). A failure abandons the record: the buyer still gets the live
// answer, but no replay.
func (f *Fresh) Record(ctx context.Context, resp store.RecordedResponse) {
	p := f.pw
	if f.rec == nil {
		return
	}
	ctx, cancel := detached(ctx, writeTimeout)
	defer cancel()
	if err := p.recoveries.StageRecovery(ctx, f.rec.Key, f.rec.Fence, resp); err != nil {
		p.log.Error("stage recovery", "record", f.rec.Key, "bytes", len(resp.Body), "err", err)
		f.abandon(ctx)
	}
}

// Promote is the after-settle step: it promotes the payment's staged record,
// by its operation id, with the settlement's transaction.
func (f *Fresh) Promote(ctx context.Context, sr *x402.SettleResponse) { f.promoteRecord(ctx, sr) }

func (pd *payment) promoteRecord(ctx context.Context, sr *x402.SettleResponse) {
	p := pd.pw
	if pd.rec == nil {
		return
	}
	ctx, cancel := detached(ctx, writeTimeout)
	defer cancel()
	if _, err := p.promote(ctx, pd.rec, pd.fp(), sr.Transaction); err != nil {
		p.log.Error("promote recovery", "record", pd.rec.Key, "err", err)
		pd.abandon(ctx)
	}
}

// Abandon drops the payment's record: its payment did not settle, so a retry
// meets the paywall again.
func (f *Fresh) Abandon(ctx context.Context) { f.abandon(ctx) }

func (pd *payment) abandon(ctx context.Context) {
	p := pd.pw
	if pd.rec == nil {
		return
	}
	ctx, cancel := detached(ctx, writeTimeout)
	defer cancel()
	if err := p.recoveries.AbandonRecovery(ctx, pd.rec.Key, pd.rec.Fence); err != nil && !errors.Is(err, store.ErrNotFound) {
		p.log.Error("abandon recovery", "record", pd.rec.Key, "err", err)
	}
	pd.rec = nil
}

// promoteStaged promotes the record of a pending payment that its retry just
// saw settle (D3), and returns its operation id, or "".
func (pd *payment) promoteStaged(ctx context.Context, sr *x402.SettleResponse) string {
	p := pd.pw
	if p.recoveries == nil {
		return ""
	}
	rec, err := p.recoveries.Recovery(ctx, pd.rkey)
	if err != nil || rec.PaymentKey != pd.key || rec.State == store.RecoveryInFlight {
		return ""
	}
	if _, err := p.promote(ctx, &rec, pd.fp(), sr.Transaction); err != nil {
		p.log.Error("promote a pending payment's recovery", "record", rec.Key, "err", err)
		return ""
	}
	return rec.OperationID
}
