package client

import (
	"context"
	"errors"
	"log/slog"
	"math/big"
	"slices"
	"sync"
	"time"

	"github.com/llm4agents/llm4agents/x402"
)

// Outcome is what a Transport concluded about a payment it sent.
type Outcome int

const (
	// OutcomeUnknown: the paid request was sent but the answer says neither
	// way: the connection failed, the server answered settlement_pending,
	// or a 409 said the payment is in use or pending. The
	// authorization may still be settled before its validBefore, so its amount
	// stays counted against the budget.
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

// Secret is a credential such as a PAYMENT-SIGNATURE value or a
// payment-identifier id. It formats and logs as "[REDACTED]", so printing a
// struct that holds one does not leak it; Reveal returns the value.
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

// JournalEntry is one logical call that pays: what a Journal records so that a
// retry of the call, by the Transport, by an SDK after a connection error, or
// by a new process after a crash, sends the payment already signed instead of
// a second one: one logical call pays at most once.
//
// The Transport fills Key, ID (a proposal), Method, Resource, IdempotencyKey
// and Fingerprint before Begin; Begin either keeps them, for a new call, or
// replaces the whole entry with the recorded one.
type JournalEntry struct {
	// Key names the logical call: the origin, the payer and either the
	// request's Idempotency-Key or its x402.Fingerprint. Entries are looked up by it.
	Key string
	// Slot tells apart entries with one Key that are open at once: identical
	// requests in flight together are distinct calls. The Journal sets it.
	Slot int
	// ID is the payment-identifier id of the call, sent when
	// the 402 declares the extension, and kept across every authorization
	// signed for the call.
	ID Secret
	// Method is the request's method.
	Method string
	// Resource is the request's URL without query or user info.
	Resource string
	// IdempotencyKey is the request's Idempotency-Key header, if any.
	IdempotencyKey string
	// Fingerprint is the request's x402.Fingerprint.
	Fingerprint string
	// Created is when the Journal first recorded the call.
	Created time.Time
	// Requirements is the option paid; set from Signed on.
	Requirements x402.PaymentRequirements
	// Header is the PAYMENT-SIGNATURE value; set from Signed on.
	Header Secret
	// ValidBefore is the authorization's validBefore; set from Signed on.
	ValidBefore time.Time
	// Outcome is what the last send of Header concluded.
	Outcome Outcome
	// Charged is what the payment cost, set before Finish with OutcomePaid:
	// the Requirements' amount for exact; for upto, whose Requirements'
	// amount is the maximum the permit authorized, the amount its settlement
	// reported (SettledAmount). Nil until then; never written to a
	// FileJournal, which removes a paid entry.
	Charged *big.Int
	// Sends counts the sends of the paid request, across retries and
	// processes.
	Sends int
}

// Journal records the payments of logical calls, durably when it is to survive
// a crash, so that a retried call never pays twice.
//
// The Transport calls Begin before signing, Signed after signing and before
// sending, and Finish once per successful Begin, whatever happened. An error
// from Begin or Signed stops the payment: nothing is sent. An error from Finish
// is logged.
//
//   - Begin claims the call e.Key names for the caller until Finish: it loads
//     into *e the oldest open entry with that Key that no other call holds, or,
//     if there is none, records e as a new entry (setting Slot and Created).
//   - Signed records e.Header, e.ValidBefore, e.Requirements and e.ID.
//   - Finish records e.Outcome and e.Sends and releases the claim. The entry is
//     complete, and removed, when o is OutcomePaid (a new identical request is
//     then a new call with a new payment), and also when it holds no Header
//     (nothing was signed, so nothing can be lost). Otherwise it stays open
//     for the next retry of the call.
//
// Entries hold payment authorizations that anyone holding them can spend until
// their validBefore: implementations keep them private and never log them.
type Journal interface {
	Begin(ctx context.Context, e *JournalEntry) error
	Signed(ctx context.Context, e *JournalEntry) error
	Finish(ctx context.Context, e *JournalEntry, o Outcome) error
}

// DefaultJournalMaxAge is how long an open entry whose authorization has expired
// is kept before a new identical request stops being its retry.
const DefaultJournalMaxAge = 24 * time.Hour

// Journal errors.
var (
	// ErrJournalCorrupt: a recorded entry does not decode or is inconsistent.
	// Nothing is signed or sent for the call until the file is removed by hand:
	// a guess could pay twice.
	ErrJournalCorrupt = errors.New("client: journal entry is corrupt")
	// ErrJournalNotHeld: Signed or Finish for an entry the caller did not claim
	// with Begin.
	ErrJournalNotHeld = errors.New("client: journal entry is not held by this call")
)

// expired reports whether an open entry is old enough to be forgotten: created
// more than maxAge ago and, when signed, past its validBefore by maxAge too, so
// that its authorization can no longer be spent by anyone.
func expired(e *JournalEntry, now time.Time, maxAge time.Duration) bool {
	if now.Sub(e.Created) < maxAge {
		return false
	}
	return e.Header == "" || now.Sub(e.ValidBefore) >= maxAge
}

// MemoryJournal is a Journal in memory: retries within one process reuse a
// payment (the OpenAI SDKs' own retries after a connection error, say), but a
// crash loses it. A Transport without a Journal uses one of its own. Use
// FileJournal to survive a crash. The zero value is ready to use.
type MemoryJournal struct {
	// MaxAge is DefaultJournalMaxAge when 0.
	MaxAge time.Duration
	// Now is time.Now when nil.
	Now func() time.Time

	mu      sync.Mutex
	entries map[string][]*memEntry // by Key, in Slot order
}

type memEntry struct {
	e    JournalEntry
	held bool
}

// NewMemoryJournal returns an empty MemoryJournal.
func NewMemoryJournal() *MemoryJournal { return &MemoryJournal{} }

func (j *MemoryJournal) now() time.Time {
	if j.Now != nil {
		return j.Now()
	}
	return time.Now()
}

func (j *MemoryJournal) maxAge() time.Duration {
	if j.MaxAge > 0 {
		return j.MaxAge
	}
	return DefaultJournalMaxAge
}

// Begin claims the oldest open entry with e.Key not held by another call, or
// records e as a new one.
func (j *MemoryJournal) Begin(_ context.Context, e *JournalEntry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.entries == nil {
		j.entries = map[string][]*memEntry{}
	}
	now := j.now()
	list := slices.DeleteFunc(j.entries[e.Key], func(m *memEntry) bool {
		return !m.held && expired(&m.e, now, j.maxAge())
	})
	slots := make([]int, 0, len(list))
	for _, m := range list {
		if !m.held {
			m.held = true
			j.entries[e.Key] = list
			*e = m.e
			return nil
		}
		slots = append(slots, m.Slot())
	}
	e.Slot, e.Created = freeSlot(slots), now
	list = append(list, &memEntry{e: *e, held: true})
	slices.SortFunc(list, func(a, b *memEntry) int { return a.Slot() - b.Slot() })
	j.entries[e.Key] = list
	return nil
}

func (m *memEntry) Slot() int { return m.e.Slot }

// find returns the held entry of e, or nil.
func (j *MemoryJournal) find(e *JournalEntry) (int, *memEntry) {
	for i, m := range j.entries[e.Key] {
		if m.e.Slot == e.Slot && m.held {
			return i, m
		}
	}
	return -1, nil
}

// Signed records the signed payment of e.
func (j *MemoryJournal) Signed(_ context.Context, e *JournalEntry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, m := j.find(e)
	if m == nil {
		return ErrJournalNotHeld
	}
	m.e = *e
	return nil
}

// Finish records the outcome of e and releases it; a paid or unsigned entry is
// removed.
func (j *MemoryJournal) Finish(_ context.Context, e *JournalEntry, o Outcome) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	i, m := j.find(e)
	if m == nil {
		return ErrJournalNotHeld
	}
	if o == OutcomePaid || e.Header == "" {
		list := slices.Delete(j.entries[e.Key], i, i+1)
		if len(list) == 0 {
			delete(j.entries, e.Key)
		} else {
			j.entries[e.Key] = list
		}
		return nil
	}
	m.e, m.held = *e, false
	return nil
}

// Len returns the number of open entries.
func (j *MemoryJournal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for _, l := range j.entries {
		n += len(l)
	}
	return n
}

// freeSlot returns the smallest slot number not in used.
func freeSlot(used []int) int {
	for s := 0; ; s++ {
		if !slices.Contains(used, s) {
			return s
		}
	}
}

var _ Journal = (*MemoryJournal)(nil)
