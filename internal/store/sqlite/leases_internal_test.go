package sqlite

import (
	"fmt"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
)

const (
	seqOwner = "0x857b06519e91e3a54538791bdbb0e22373e36b66"
	seqAsset = "eip155:84532/erc20:0x036cbd53842c5426634e7929541ec2318f3dcf7e"
)

// openLease opens a store with one funded lease, "lease-1".
func openLease(tb testing.TB) *DB {
	tb.Helper()
	db, _ := openTest(tb)
	if _, err := db.Credit(tb.Context(), "c1", seqOwner, seqAsset, 2_000_000_000_000); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Hold(tb.Context(), store.HoldRequest{ID: "lease-1", Owner: seqOwner, Asset: seqAsset,
		Amount: 1_000_000_000_000, TTL: time.Hour, Lease: true}); err != nil {
		tb.Fatal(err)
	}
	return db
}

// batch is n draws on lease-1 from position first, each with a receipt
// that asks the store for its seq.
func batch(first, n int) []store.LeaseDraw {
	draws := make([]store.LeaseDraw, n)
	for i := range draws {
		id := fmt.Sprintf("call-%d", first+i)
		draws[i] = store.LeaseDraw{LeaseID: "lease-1", CallID: id, Position: int64(first + i), Charged: 10, Cost: 10,
			Receipt: &store.StoredReceipt{RequestID: id, Owner: seqOwner, KeyID: "sk-1", Envelope: []byte(`{"r":"` + id + `"}`)}}
	}
	return draws
}

// TestDrawSeqs: the receipts of one batch get distinct seqs, increasing in
// the batch's order and above every seq drawn before; a replayed or
// refused draw leaves a gap, never a seq used twice; a receipt put again
// with Seq 0 is the same receipt (its seq is not compared).
func TestDrawSeqs(t *testing.T) {
	db := openLease(t)
	ctx := t.Context()
	first := batch(1, 3)
	if errs, err := db.Draw(ctx, first); err != nil || errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("Draw: %v %v", errs, err)
	}
	// A ledger entry between the batches: every receipt's seq differs from
	// it, those of the second batch are above it.
	mid, err := db.Credit(ctx, "c2", seqOwner, seqAsset, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The batch again (a replay of each), then new draws, one refused (a
	// taken position).
	again := append(batch(1, 3), batch(4, 2)...)
	again = append(again, store.LeaseDraw{LeaseID: "lease-1", CallID: "call-x", Position: 2, Charged: 10, Cost: 10,
		Receipt: &store.StoredReceipt{RequestID: "call-x", Owner: seqOwner, Envelope: []byte(`{}`)}})
	errs, err := db.Draw(ctx, again)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs[:5] {
		if e != nil {
			t.Errorf("draw %d: %v", i, e)
		}
	}
	if errs[5] == nil {
		t.Error("a draw at a taken position was recorded")
	}
	var last int64
	for i := 1; i <= 5; i++ {
		r, err := db.Receipt(ctx, fmt.Sprintf("call-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if r.Seq <= last || r.Seq == mid.Seq || (i > 3 && r.Seq < mid.Seq) {
			t.Errorf("call-%d has seq %d: want above %d, and %s the ledger entry's %d", i, r.Seq, last,
				map[bool]string{true: "above", false: "other than"}[i > 3], mid.Seq)
		}
		last = r.Seq
	}
	if _, err := db.Receipt(ctx, "call-x"); err == nil {
		t.Error("the refused draw's receipt was kept")
	}
}

// BenchmarkDrawSeqs: batches of 16 leased draws with receipts, each
// receipt's seq drawn in one statement per batch ("block", what Draw does)
// or one per receipt ("one-by-one", before), side by side.
//
//	go test -run '^$' -bench DrawSeqs -count 5 ./internal/store/sqlite/
func BenchmarkDrawSeqs(b *testing.B) {
	const size = 16
	for _, tc := range []struct {
		name     string
		oneByOne bool
	}{{"block", false}, {"one-by-one", true}} {
		b.Run(tc.name, func(b *testing.B) {
			db := openLease(b)
			db.seqOneByOne = tc.oneByOne
			pos := 1
			b.ResetTimer()
			for range b.N {
				if _, err := db.Draw(b.Context(), batch(pos, size)); err != nil {
					b.Fatal(err)
				}
				pos += size
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*size), "ns/draw")
		})
	}
}
