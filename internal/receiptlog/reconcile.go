package receiptlog

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// The ledger ties to the log (D30): for a credit account, what its receipts
// say it was charged equals what the ledger captured from it, and every one
// of its receipts is the leaf the log holds for it. The operator checks it
// from the store (the leaves alone name no account).

// Statement reads a credit account's ledger entries (ledger.Ledger), and
// what calls drew on its open credit leases: charged and receipted, but
// captured only when the lease ends (docs/DESIGN.md D28).
type Statement interface {
	Statement(ctx context.Context, payer common.Address, afterSeq int64, limit int) ([]store.Entry, error)
	LeaseDraws(ctx context.Context, payer common.Address) (map[string]int64, error)
}

// ReceiptLister reads an owner's kept receipts (store.Receipts).
type ReceiptLister interface {
	ReceiptsOf(ctx context.Context, q store.ReceiptsQuery) ([]store.StoredReceipt, error)
}

// EntryReader reads a receipt's log entry (store.ReceiptLog).
type EntryReader interface {
	LogEntry(ctx context.Context, requestID string) (store.LogEntry, error)
}

// Reconciliation is what Reconcile found of one account.
type Reconciliation struct {
	Account common.Address
	// Captured is what the ledger captured from the account (what its
	// capture entries took from its own accounts) plus what its open leases'
	// recorded draws charged; Receipted what its credit receipts say it was
	// charged. A lease that closes while Reconcile reads can make them
	// differ for that run: run it again.
	Captured, Receipted *big.Int
	// Receipts counts the account's receipts (every rail); Logged those
	// whose leaf the log holds and is theirs; Pending those whose leaf waits
	// in the queue.
	Receipts, Logged, Pending int
	// Problems names each receipt that breaks the tie: unreadable, without
	// a leaf, or with a leaf that is not its own.
	Problems []string
}

// OK reports whether the account's receipts, ledger and log agree.
func (r Reconciliation) OK() bool { return r.Captured.Cmp(r.Receipted) == 0 && len(r.Problems) == 0 }

// reconcilePage is the page size of Reconcile's reads.
const reconcilePage = 500

// Reconcile checks one account: its ledger's captures against its credit
// receipts, and each receipt against its log entry, signed in domain.
func Reconcile(ctx context.Context, led Statement, rs ReceiptLister, log EntryReader, domain receipt.Domain, account common.Address) (Reconciliation, error) {
	out := Reconciliation{Account: account, Captured: new(big.Int), Receipted: new(big.Int)}
	// The open leases first, then the statement: a lease closed in between
	// shows as its capture in the statement and is not counted twice.
	drawn, err := led.LeaseDraws(ctx, account)
	if err != nil {
		return out, fmt.Errorf("receiptlog: reconcile %s: %w", account.Hex(), err)
	}
	for after := int64(0); ; {
		entries, err := led.Statement(ctx, account, after, reconcilePage)
		if err != nil {
			return out, fmt.Errorf("receiptlog: reconcile %s: %w", account.Hex(), err)
		}
		owner := strings.ToLower(account.Hex())
		for _, e := range entries {
			if e.Kind != store.EntryCapture {
				continue
			}
			delete(drawn, e.HoldID)
			// What left the account's own books: the hold, less what
			// went back to it. Revenue may be more (a shortfall is the
			// operator's loss, booked to the loss account).
			for _, p := range e.Postings {
				if p.Account == store.UserAccount(owner) || p.Account == store.HeldAccount(owner) {
					out.Captured.Sub(out.Captured, big.NewInt(p.Delta))
				}
			}
		}
		if len(entries) < reconcilePage {
			break
		}
		after = entries[len(entries)-1].Seq
	}
	for _, d := range drawn {
		out.Captured.Add(out.Captured, big.NewInt(d))
	}
	q := store.ReceiptsQuery{Owner: strings.ToLower(account.Hex()), Limit: reconcilePage}
	for {
		page, err := rs.ReceiptsOf(ctx, q)
		if err != nil {
			return out, fmt.Errorf("receiptlog: reconcile %s: %w", account.Hex(), err)
		}
		for _, rec := range page {
			if err := out.check(ctx, log, domain, rec); err != nil {
				return out, err
			}
		}
		if len(page) < q.Limit {
			return out, nil
		}
		q.Before = page[len(page)-1].Seq
	}
}

// check adds one kept receipt to the reconciliation.
func (out *Reconciliation) check(ctx context.Context, log EntryReader, domain receipt.Domain, rec store.StoredReceipt) error {
	out.Receipts++
	r, _, err := receipt.ParseEnvelope(rec.Envelope)
	if err != nil {
		out.Problems = append(out.Problems, fmt.Sprintf("%s: unreadable: %v", rec.RequestID, err))
		return nil
	}
	if r.Rail == receipt.RailCredits {
		out.Receipted.Add(out.Receipted, r.Amount)
	}
	e, err := log.LogEntry(ctx, rec.RequestID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		out.Problems = append(out.Problems, rec.RequestID+": no leaf in the log")
		return nil
	case err != nil:
		return fmt.Errorf("receiptlog: reconcile %s: %w", rec.RequestID, err)
	}
	leaf, err := receipt.ParseLeaf(e.Leaf)
	if err == nil {
		err = leaf.Check(domain, r)
	}
	switch {
	case err != nil:
		out.Problems = append(out.Problems, fmt.Sprintf("%s: the log's leaf is not this receipt's: %v", rec.RequestID, err))
	case e.Index < 0:
		out.Pending++
	default:
		out.Logged++
	}
	return nil
}
