package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

// Payment claims (store.Payments). Each claim is a hash at keys.payment(key)
// with the fields paymentFields, the staged_ ones only while a response is
// staged; fences come from the counter at keys.paymentFence().
//
// An expired claim (see store.Payments) counts as absent in every script;
// Redis also forgets its key by itself: each claim's key gets a TTL ending
// expiryMargin after its ExpiresAt, so nothing needs purging.

// maxExpiryMs bounds ExpiresAt: the scripts do arithmetic on times as Lua
// numbers (doubles), exact up to 2^53.
const maxExpiryMs = 1<<53 - int64(expiryMargin/time.Millisecond)

// ClaimPayment implements store.Payments in one script. ExpiresAt must also
// be before the year 287,000 (maxExpiryMs).
func (db *DB) ClaimPayment(ctx context.Context, c store.PaymentClaim, lease time.Duration) (_ store.PaymentClaim, _ bool, err error) {
	defer store.Wrap(&err, "redis", "claim payment %q", c.Key)
	if err := store.CheckPaymentClaim(c, lease); err != nil {
		return store.PaymentClaim{}, false, err
	}
	expiresMs := store.CeilUnixMilli(c.ExpiresAt)
	if expiresMs > maxExpiryMs {
		return store.PaymentClaim{}, false, fmt.Errorf("expiry %s is too far in the future", c.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	lms := store.CeilMillis(lease)
	status, rest, err := db.claim(ctx, c.Key, claimPaymentScript,
		[]string{db.keys.payment(c.Key), db.keys.paymentFence()},
		db.nowArg(), strconv.FormatInt(lms, 10), strconv.FormatInt(expiresMs, 10), strconv.FormatInt(expiryMargin.Milliseconds(), 10),
		c.Network, c.Payer, c.Amount, c.Owner)
	if err != nil {
		return store.PaymentClaim{}, false, err
	}
	// The script does not read the record back: a new record is c as
	// given, a takeover is the record as it was with the script's writes.
	var rec store.PaymentClaim
	switch {
	case (status == "won" && len(rest) == 2) || (status == "replaced" && len(rest) == 4):
		fence, now, err := fenceAndTime(rest[0], rest[1])
		if err != nil {
			return store.PaymentClaim{}, false, err
		}
		rec = store.PaymentClaim{Key: c.Key, Network: c.Network, Payer: c.Payer, Amount: c.Amount, State: store.PaymentHeld,
			Owner: c.Owner, Fence: fence, LeaseUntil: msTime(now + lms), ExpiresAt: msTime(expiresMs), CreatedAt: msTime(now), UpdatedAt: msTime(now)}
		if status == "replaced" {
			db.log.InfoContext(ctx, "replaced expired payment claim", "key", c.Key,
				"previous_owner", rest[2], "previous_state", rest[3], "owner", c.Owner, "fence", fence)
		}
	case status == "took_over" && len(rest) == 3:
		if rec, err = decodePayment(c.Key, rest[0]); err != nil {
			return store.PaymentClaim{}, false, err
		}
		fence, now, err := fenceAndTime(rest[1], rest[2])
		if err != nil {
			return store.PaymentClaim{}, false, err
		}
		prevOwner := rec.Owner
		rec.Owner, rec.Fence, rec.LeaseUntil, rec.UpdatedAt = c.Owner, fence, msTime(now+lms), msTime(now)
		db.log.InfoContext(ctx, "took over payment claim", "key", c.Key,
			"previous_owner", prevOwner, "previous_state", rec.State, "owner", c.Owner, "fence", fence)
	case status == "held" && len(rest) == 1:
		if rec, err = decodePayment(c.Key, rest[0]); err != nil {
			return store.PaymentClaim{}, false, err
		}
	case status == "bad" && len(rest) == 1:
		now := "?"
		if s, ok := rest[0].(string); ok {
			if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
				now = msTime(ms).Format(time.RFC3339Nano)
			}
		}
		return store.PaymentClaim{}, false, fmt.Errorf("expiry %s is not after the store's time %s",
			c.ExpiresAt.UTC().Format(time.RFC3339Nano), now)
	default:
		return store.PaymentClaim{}, false, fmt.Errorf("unexpected script reply %q of %d elements", status, len(rest))
	}
	return rec, status != "held", nil
}

// ReleasePayment implements store.Payments.
func (db *DB) ReleasePayment(ctx context.Context, key string, fence int64) (err error) {
	defer store.Wrap(&err, "redis", "release payment %q", key)
	status, rest, err := db.run(ctx, releasePaymentScript, []string{db.keys.payment(key)},
		db.nowArg(), strconv.FormatInt(fence, 10))
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// UpdatePayment implements store.Payments.
func (db *DB) UpdatePayment(ctx context.Context, key string, fence int64, state store.PaymentState, txHash string) (err error) {
	defer store.Wrap(&err, "redis", "update payment %q to %s", key, state)
	if err := store.CheckPaymentUpdate(state); err != nil {
		return err
	}
	status, rest, err := db.run(ctx, updatePaymentScript, []string{db.keys.payment(key)},
		db.nowArg(), strconv.FormatInt(fence, 10), string(state), txHash)
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// StagePayment implements store.Payments. The body is stored as the bytes
// given (Redis strings are binary-safe); the staged response goes with its
// record (release, expiry).
func (db *DB) StagePayment(ctx context.Context, key string, fence int64, r store.StagedResponse) (err error) {
	defer store.Wrap(&err, "redis", "stage payment %q", key)
	if err := store.CheckResponse(r.Status, r.Body); err != nil {
		return err
	}
	body := r.Body
	if body == nil {
		body = []byte{}
	}
	status, rest, err := db.run(ctx, stagePaymentScript, []string{db.keys.payment(key)},
		db.nowArg(), strconv.FormatInt(fence, 10), strconv.Itoa(r.Status), r.ContentType, body, r.Fingerprint)
	if err != nil {
		return err
	}
	return outcome(status, rest)
}

// Payment implements store.Payments: ErrNotFound if absent or expired.
func (db *DB) Payment(ctx context.Context, key string) (_ store.PaymentClaim, err error) {
	defer store.Wrap(&err, "redis", "payment %q", key)
	status, rest, err := db.run(ctx, paymentScript, []string{db.keys.payment(key)}, db.nowArg())
	if err != nil {
		return store.PaymentClaim{}, err
	}
	if status != "ok" {
		return store.PaymentClaim{}, outcome(status, rest)
	}
	if len(rest) != 1 {
		return store.PaymentClaim{}, fmt.Errorf("unexpected reply of %d elements", len(rest))
	}
	return decodePayment(key, rest[0])
}

// PurgeExpiredPayments deletes nothing and returns 0: Redis removes each
// claim's key by itself, expiryMargin after its ExpiresAt (the key's TTL). It
// exists so this store offers what the SQL ones do.
func (db *DB) PurgeExpiredPayments(_ context.Context, limit int) (_ int, err error) {
	defer store.Wrap(&err, "redis", "purge expired payments")
	if err := store.CheckLimit(limit); err != nil {
		return 0, err
	}
	if db.gate.Closed() {
		return 0, store.ErrClosed
	}
	return 0, nil
}

// decodePayment reads a payment record, the HMGET of paymentFields (all of
// them), from a script reply.
func decodePayment(key string, v any) (store.PaymentClaim, error) {
	r, err := newFields(v, paymentFields)
	if err != nil {
		return store.PaymentClaim{}, fmt.Errorf("record %q: %w", key, err)
	}
	c := store.PaymentClaim{
		Key:        key,
		Network:    r.str(0),
		Payer:      r.str(1),
		Amount:     r.str(2),
		State:      store.PaymentState(r.str(3)),
		TxHash:     r.str(4),
		Owner:      r.str(5),
		Fence:      r.int(6),
		LeaseUntil: msTime(r.int(7)),
		ExpiresAt:  msTime(r.int(8)),
		CreatedAt:  msTime(r.int(9)),
		UpdatedAt:  msTime(r.int(10)),
	}
	if r.has(11) {
		c.Staged = &store.StagedResponse{
			Status:      int(r.int(11)),
			ContentType: r.str(12),
			Fingerprint: r.str(13),
			Body:        []byte(r.str(14)),
		}
	}
	if r.err != nil {
		return store.PaymentClaim{}, fmt.Errorf("record %q: %w", key, r.err)
	}
	return c, nil
}

var _ store.Payments = (*DB)(nil)
