package client

import (
	"context"
	"log/slog"

	"github.com/llm4agents/llm4agents/x402"
)

// Outcome is what a Transport concluded about a payment it sent.
type Outcome int

const (
	// OutcomeUnknown: the paid request was sent but the answer says neither
	// way: the connection failed, or the server answered settlement_pending
	// (DECISIONS D3). The authorization may still be settled before its
	// validBefore, so its amount stays counted against the budget.
	OutcomeUnknown Outcome = iota
	// OutcomePaid: a 2xx answer, or a PAYMENT-RESPONSE reporting success.
	OutcomePaid
	// OutcomeNotPaid: any other answer; the amount is released from the budget.
	OutcomeNotPaid
)

func (o Outcome) String() string {
	switch o {
	case OutcomeUnknown:
		return "unknown"
	case OutcomePaid:
		return "paid"
	case OutcomeNotPaid:
		return "not_paid"
	default:
		return "invalid"
	}
}

// Secret is a credential such as a PAYMENT-SIGNATURE value. It formats and logs
// as "[REDACTED]", so printing a struct that holds one does not leak it; Reveal
// returns the value.
type Secret string

const redacted = "[REDACTED]"

// Reveal returns the secret value.
func (s Secret) Reveal() string { return string(s) }

// String never shows the value.
func (Secret) String() string { return redacted }

// GoString never shows the value.
func (Secret) GoString() string { return redacted }

// LogValue never shows the value.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// JournalEntry describes one payment of one logical call, as a Journal records
// it.
type JournalEntry struct {
	Method string
	// Resource is the request's URL without query or user info.
	Resource string
	// IdempotencyKey is the request's Idempotency-Key header, if any.
	IdempotencyKey string
	// Requirements is the option chosen.
	Requirements x402.PaymentRequirements
	// Header is the PAYMENT-SIGNATURE value; set from Signed on.
	Header Secret
}

// Journal records payments so that a retry of the same logical call can reuse a
// payment instead of making a second one (DECISIONS D26, MISSION B3). The
// Transport calls Begin before signing, Signed after signing and before sending,
// and Finish once the outcome is known. An error from Begin or Signed stops the
// payment: nothing is sent. An error from Finish is logged.
//
// This is the seam for the retry-safety slice of issue 7. The only
// implementation so far records nothing, and the Transport never reuses a
// header; the interface may still change before that slice lands (keying by
// fingerprint, handing a recorded header back from Begin).
type Journal interface {
	Begin(ctx context.Context, e *JournalEntry) error
	Signed(ctx context.Context, e *JournalEntry) error
	Finish(ctx context.Context, e *JournalEntry, o Outcome) error
}

// nopJournal is the default Journal: it records nothing.
type nopJournal struct{}

func (nopJournal) Begin(context.Context, *JournalEntry) error           { return nil }
func (nopJournal) Signed(context.Context, *JournalEntry) error          { return nil }
func (nopJournal) Finish(context.Context, *JournalEntry, Outcome) error { return nil }

var _ Journal = nopJournal{}
