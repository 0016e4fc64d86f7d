package postgres

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/storetest"
)

// TestCaptureWithReceipt runs the capture-with-receipt conformance suite
// with two DB values (two pools) on one fresh schema.
func TestCaptureWithReceipt(t *testing.T) {
	storetest.RunCaptureWithReceipt(t, func(t *testing.T, now func() time.Time) (a, b storetest.CaptureStore) {
		_, dsn := freshSchema(t)
		return open(t, dsn, now, nil), open(t, dsn, now, nil)
	})
}

// TestCaptureWithReceiptConcurrent: captures with their receipts, each a
// transaction beside the owner's ledger line, run among the holds and
// credits that line batches for the same owner, on two pools: none
// deadlocks or is lost, every receipt is kept at its capture's entry, and
// the balance is what the charges leave.
func TestCaptureWithReceiptConcurrent(t *testing.T) {
	const (
		owner   = "0x00000000000000000000000000000000000000a1"
		asset   = "0x00000000000000000000000000000000000000b2"
		calls   = 64
		held    = 1_000
		charged = 400
		topups  = 8
	)
	_, dsn := freshSchema(t)
	dbs := []*DB{open(t, dsn, nil, nil), open(t, dsn, nil, nil)}
	ctx := t.Context()
	if _, err := dbs[0].Credit(ctx, "c0", owner, asset, 1_000_000); err != nil {
		t.Fatal(err)
	}
	seqs := make([]int64, calls)
	var wg sync.WaitGroup
	for i := range calls {
		db := dbs[i%2]
		wg.Go(func() {
			id := fmt.Sprintf("call-%d", i)
			if _, err := db.Hold(ctx, store.HoldRequest{ID: id, Owner: owner, Asset: asset, Amount: held, TTL: time.Minute}); err != nil {
				t.Errorf("Hold(%s): %v", id, err)
				return
			}
			res, err := db.CaptureWithReceipt(ctx, id, charged, func(h store.Hold, e store.Entry) *store.StoredReceipt {
				return &store.StoredReceipt{RequestID: id, Owner: h.Owner, Seq: e.Seq, Envelope: []byte(`{"n":` + strconv.Itoa(i) + `}`)}
			})
			if err != nil || res.Receipt == nil || res.ReceiptErr != nil {
				t.Errorf("CaptureWithReceipt(%s) = %+v, %v", id, res, err)
				return
			}
			seqs[i] = res.Entry.Seq
		})
	}
	for i := range topups {
		wg.Go(func() {
			if _, err := dbs[i%2].Credit(ctx, fmt.Sprintf("topup-%d", i), owner, asset, 1); err != nil {
				t.Errorf("Credit: %v", err)
			}
		})
	}
	wg.Wait()
	for i, seq := range seqs {
		r, err := dbs[1].Receipt(ctx, fmt.Sprintf("call-%d", i))
		if err != nil || r.Seq != seq {
			t.Errorf("Receipt(call-%d) = %+v, %v; want seq %d", i, r, err, seq)
		}
	}
	bal, err := dbs[1].Balance(ctx, store.UserAccount(owner), asset)
	if want := int64(1_000_000 + topups - calls*charged); err != nil || bal != want {
		t.Errorf("balance %d, %v; want %d", bal, err, want)
	}
}
