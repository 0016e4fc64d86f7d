package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// What the backends share that is not SQL: the checks of arguments they make
// before touching a record, the rounding of durations and times to the
// millisecond their records keep, the prefix of their errors, and the gate
// that refuses calls after Close. One copy here keeps them from drifting
// apart; the contracts themselves are on the interfaces.

// Wrap prefixes a non-nil *errp with the backend's name and the operation,
// for a backend method to defer: "sqlite: claim settlement "k": ...".
func Wrap(errp *error, backend, format string, args ...any) {
	if *errp != nil {
		*errp = fmt.Errorf("%s: %s: %w", backend, fmt.Sprintf(format, args...), *errp)
	}
}

// CeilMillis returns d in whole milliseconds, rounded up, so that a lease or
// a TTL kept to the millisecond is never shorter than asked. It does not
// overflow near the largest Duration, where adding a millisecond first would
// wrap to a lease in the past that anyone could take over at once.
func CeilMillis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

// CeilUnixMilli returns t in unix milliseconds, rounded up, so that an expiry
// kept to the millisecond is never earlier than asked.
func CeilUnixMilli(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

// Gate is the open or closed state of a backend's handle. Its zero value is
// open.
type Gate struct{ closed atomic.Bool }

// Close closes g and reports whether it was open: only the first Close of a
// handle has anything to release.
func (g *Gate) Close() bool { return !g.closed.Swap(true) }

// Closed reports whether g was closed.
func (g *Gate) Closed() bool { return g.closed.Load() }

// Op starts one operation: it returns ctx bounded by DefaultTimeout (or by
// ctx's earlier deadline), or an error wrapping ErrClosed once g is closed.
func (g *Gate) Op(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if g.Closed() {
		return nil, nil, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultTimeout)
	return ctx, cancel, nil
}

// CheckLimit checks the limit of a listing or a sweep that has no upper
// bound of its own: positive.
func CheckLimit(limit int) error {
	if limit <= 0 {
		return fmt.Errorf("limit %d is not positive", limit)
	}
	return nil
}

// CheckClaim checks the arguments of Settlements.ClaimSettlement: a key and a
// positive lease.
func CheckClaim(key string, lease time.Duration) error {
	switch {
	case key == "":
		return errors.New("empty key")
	case lease <= 0:
		return fmt.Errorf("lease %v is not positive", lease)
	}
	return nil
}

// CheckPaymentClaim checks the arguments of Payments.ClaimPayment: those of
// CheckClaim, and an expiry.
func CheckPaymentClaim(c PaymentClaim, lease time.Duration) error {
	if err := CheckClaim(c.Key, lease); err != nil {
		return err
	}
	if c.ExpiresAt.IsZero() {
		return errors.New("no expiry")
	}
	return nil
}

// CheckBeginRecovery checks the arguments of Recoveries.BeginRecovery: those
// of CheckClaim, an operation id and an expiry.
func CheckBeginRecovery(r Recovery, lease time.Duration) error {
	if err := CheckClaim(r.Key, lease); err != nil {
		return err
	}
	switch {
	case r.OperationID == "":
		return errors.New("empty operation id")
	case r.ExpiresAt.IsZero():
		return errors.New("no expiry")
	}
	return nil
}

// MaxReplays bounds the replay budget of Recoveries.PromoteRecovery: what a
// 32-bit column holds.
const MaxReplays = math.MaxInt32

// CheckPromote checks the arguments of Recoveries.PromoteRecovery.
func CheckPromote(operationID string, ref SettlementRef, ttl time.Duration, replays int) error {
	switch {
	case operationID == "":
		return errors.New("empty operation id")
	case ref.Network == "" || ref.TxHash == "":
		return errors.New("no settlement reference: nothing is promoted without one")
	case ttl <= 0:
		return fmt.Errorf("ttl %v is not positive", ttl)
	case replays <= 0 || replays > MaxReplays:
		return fmt.Errorf("replay budget %d is outside 1..%d", replays, MaxReplays)
	}
	return nil
}

// CheckResponse checks an answer kept with a record
// (Payments.StagePayment, Recoveries.StageRecovery): an HTTP status and a
// body of at most MaxStagedBody bytes.
func CheckResponse(status int, body []byte) error {
	switch {
	case status < 100 || status > 599:
		return fmt.Errorf("status %d is not an HTTP status", status)
	case len(body) > MaxStagedBody:
		return fmt.Errorf("body of %d bytes is over the %d bytes a kept response may have", len(body), MaxStagedBody)
	}
	return nil
}

// CheckSettlementUpdate checks the arguments of Settlements.UpdateSettlement.
func CheckSettlementUpdate(state SettlementState, txHash, reason string) error {
	switch state {
	case StateBroadcast, StateSettled:
		if txHash == "" {
			return errors.New("no transaction hash")
		}
	case StateFailed:
		if reason == "" {
			return errors.New("no reason")
		}
	case StateClaimed:
		return errors.New("a record never goes back to claimed")
	default:
		return errors.New("unknown state")
	}
	return nil
}

// CheckPaymentUpdate checks the state of Payments.UpdatePayment.
func CheckPaymentUpdate(state PaymentState) error {
	switch state {
	case PaymentPending, PaymentSettled:
		return nil
	case PaymentHeld:
		return errors.New("a claim never goes back to held")
	default:
		return errors.New("unknown state")
	}
}

// CheckPendingLog checks the limit of ReceiptLog.PendingLog: 1..MaxLogBatch.
func CheckPendingLog(limit int) error {
	if limit < 1 || limit > MaxLogBatch {
		return fmt.Errorf("limit %d is outside 1..%d", limit, MaxLogBatch)
	}
	return nil
}

// CheckLogHashes checks the indexes of ReceiptLog.LogHashes: at most
// MaxLogHashes.
func CheckLogHashes(indexes []int64) error {
	if len(indexes) > MaxLogHashes {
		return fmt.Errorf("%d hash indexes, over %d", len(indexes), MaxLogHashes)
	}
	return nil
}

// OrderLogHashes returns the hashes at indexes, in their order, from found,
// which holds each stored one a backend read (in any order, each once):
// for ReceiptLog.LogHashes, ErrNotFound if an index is not in found.
func OrderLogHashes(indexes []int64, found map[int64][32]byte) ([][32]byte, error) {
	out := make([][32]byte, len(indexes))
	for i, x := range indexes {
		h, ok := found[x]
		if !ok {
			return nil, fmt.Errorf("hash index %d is not stored: %w", x, ErrNotFound)
		}
		out[i] = h
	}
	return out, nil
}
