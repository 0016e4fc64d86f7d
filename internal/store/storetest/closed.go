package storetest

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/llm4agents/llm4agents/internal/store"
)

// closedWait bounds how long a call on a closed handle may take: it should
// fail at once, and must not wait for anything.
const closedWait = store.DefaultTimeout

// closedCall is one method called on a closed handle.
type closedCall struct {
	name string
	call func() error
}

// checkClosed closes h, which must have a Close method as every backend's
// handle has, closes it again, and checks that each call then fails with an
// error wrapping store.ErrClosed, without panicking or hanging. The
// harness's own cleanup closes h a third time.
func checkClosed(t *testing.T, h any, calls []closedCall) {
	t.Helper()
	c, ok := h.(io.Closer)
	if !ok {
		t.Fatalf("%T has no Close method", h)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	for _, cc := range calls {
		done := make(chan error, 1)
		go func() {
			defer func() {
				if r := recover(); r != nil {
					done <- fmt.Errorf("panic: %v", r)
				}
			}()
			done <- cc.call()
		}()
		select {
		case err := <-done:
			if !errors.Is(err, store.ErrClosed) {
				t.Errorf("%s after Close = %v, want an error wrapping store.ErrClosed", cc.name, err)
			}
		case <-time.After(closedWait):
			t.Errorf("%s after Close has not returned after %v", cc.name, closedWait)
		}
	}
}

func testSettlementsClosed(e *env) {
	rec, _ := e.claim(e.a, input("k", "a"), lease)
	checkClosed(e.t, e.a, []closedCall{
		{"ClaimSettlement", func() error { _, _, err := e.a.ClaimSettlement(e.ctx, input("k2", "a"), lease); return err }},
		{"UpdateSettlement", func() error {
			return e.a.UpdateSettlement(e.ctx, "k", rec.Fence, store.StateBroadcast, txHash1, "")
		}},
		{"ReleaseSettlement", func() error { return e.a.ReleaseSettlement(e.ctx, "k", rec.Fence) }},
		{"RecordBroadcast", func() error { return e.a.RecordBroadcast(e.ctx, "k", rec.Fence, txHash1, rawTx1) }},
		{"AbandonBroadcast", func() error { return e.a.AbandonBroadcast(e.ctx, "k", rec.Fence, txHash1) }},
		{"MarkSuccessReported", func() error { _, err := e.a.MarkSuccessReported(e.ctx, "k"); return err }},
		{"Settlement", func() error { _, err := e.a.Settlement(e.ctx, "k"); return err }},
		{"UnresolvedSettlements", func() error { _, err := e.a.UnresolvedSettlements(e.ctx, network, 10); return err }},
		{"RecentSettlements", func() error { _, err := e.a.RecentSettlements(e.ctx, network, start, 10); return err }},
		{"MarkReorg", func() error {
			_, err := e.a.MarkReorg(e.ctx, "k", txHash1, store.ReorgDropped, "")
			return err
		}},
	})
	// The other handle is still open, and nothing changed.
	if got, err := e.b.Settlement(e.ctx, "k"); err != nil || got.State != store.StateClaimed || got.Fence != rec.Fence {
		e.t.Errorf("other handle: Settlement() = %s fence %d, %v; want claimed fence %d", got.State, got.Fence, err, rec.Fence)
	}
}

func testPaymentsClosed(e *payEnv) {
	rec, won, err := e.a.ClaimPayment(e.ctx, e.input("k", "a"), lease)
	if err != nil || !won {
		e.t.Fatalf("ClaimPayment() = %v, %v", won, err)
	}
	checkClosed(e.t, e.a, []closedCall{
		{"ClaimPayment", func() error { _, _, err := e.a.ClaimPayment(e.ctx, e.input("k2", "a"), lease); return err }},
		{"ReleasePayment", func() error { return e.a.ReleasePayment(e.ctx, "k", rec.Fence) }},
		{"UpdatePayment", func() error { return e.a.UpdatePayment(e.ctx, "k", rec.Fence, store.PaymentPending, txHash1) }},
		{"StagePayment", func() error {
			return e.a.StagePayment(e.ctx, "k", rec.Fence, store.StagedResponse{Status: 200, Body: []byte("x")})
		}},
		{"Payment", func() error { _, err := e.a.Payment(e.ctx, "k"); return err }},
	})
	if got, err := e.b.Payment(e.ctx, "k"); err != nil || got.State != store.PaymentHeld || got.Fence != rec.Fence {
		e.t.Errorf("other handle: Payment() = %s fence %d, %v; want held fence %d", got.State, got.Fence, err, rec.Fence)
	}
}

func testRecoveriesClosed(e *recEnv) {
	rec := e.staged("k", "op")
	checkClosed(e.t, e.a, []closedCall{
		{"BeginRecovery", func() error { _, _, err := e.a.BeginRecovery(e.ctx, e.input("k2", "op2"), recLease); return err }},
		{"StageRecovery", func() error { return e.a.StageRecovery(e.ctx, "k", rec.Fence, recBody) }},
		{"PromoteRecovery", func() error { _, err := e.a.PromoteRecovery(e.ctx, "op", recFP, recRef, recTTL, 1); return err }},
		{"AbandonRecovery", func() error { return e.a.AbandonRecovery(e.ctx, "k", rec.Fence) }},
		{"Recovery", func() error { _, err := e.a.Recovery(e.ctx, "k"); return err }},
		{"TakeReplay", func() error { _, _, err := e.a.TakeReplay(e.ctx, "k", "op"); return err }},
	})
	if got, err := e.b.Recovery(e.ctx, "k"); err != nil || got.State != store.RecoveryStaged {
		e.t.Errorf("other handle: Recovery() = %s, %v; want staged", got.State, err)
	}
}

func testKeysClosed(e *keysEnv) {
	k := e.create(testKey("key1", alice))
	checkClosed(e.t, e.a, []closedCall{
		{"CreateKey", func() error { _, err := e.a.CreateKey(e.ctx, testKey("key2", alice)); return err }},
		{"KeysByOwner", func() error { _, err := e.a.KeysByOwner(e.ctx, alice); return err }},
		{"KeyByHash", func() error { _, err := e.a.KeyByHash(e.ctx, k.Hash); return err }},
		{"RevokeKey", func() error { _, err := e.a.RevokeKey(e.ctx, alice, k.ID); return err }},
		{"UpdateKey", func() error {
			to := k
			to.Name = "renamed"
			_, err := e.a.UpdateKey(e.ctx, alice, k.ID, k, to)
			return err
		}},
	})
	if got, err := e.b.KeyByHash(e.ctx, k.Hash); err != nil || !cmp.Equal(k, got) {
		e.t.Errorf("other handle: KeyByHash() = %+v, %v; want %+v", got, err, k)
	}
}

func testSignInsClosed(e *signInEnv) {
	const nonce = "abcdefgh12345678"
	if err := e.a.PutNonce(e.ctx, nonce, time.Minute); err != nil {
		e.t.Fatalf("PutNonce: %v", err)
	}
	session := hashOf("session")
	checkClosed(e.t, e.a, []closedCall{
		{"PutNonce", func() error { return e.a.PutNonce(e.ctx, "zyxwvuts87654321", time.Minute) }},
		{"ConsumeNonce", func() error { return e.a.ConsumeNonce(e.ctx, nonce) }},
		{"CreateSession", func() error { _, err := e.a.CreateSession(e.ctx, session, alice, time.Minute); return err }},
		{"Session", func() error { _, err := e.a.Session(e.ctx, session); return err }},
		{"DeleteSession", func() error { return e.a.DeleteSession(e.ctx, session) }},
		{"SweepAuth", func() error { _, err := e.a.SweepAuth(e.ctx, 10); return err }},
	})
	if err := e.b.ConsumeNonce(e.ctx, nonce); err != nil {
		e.t.Errorf("other handle: ConsumeNonce() = %v, want nil", err)
	}
}

func testLedgerClosed(e *ledgerEnv) {
	if _, err := e.a.Credit(e.ctx, "top-up", alice, usdc, dollar); err != nil {
		e.t.Fatalf("Credit: %v", err)
	}
	h, err := e.a.Hold(e.ctx, store.HoldRequest{ID: "h1", Owner: alice, Asset: usdc, Amount: dollar / 2, TTL: ttl})
	if err != nil {
		e.t.Fatalf("Hold: %v", err)
	}
	checkClosed(e.t, e.a, []closedCall{
		{"Credit", func() error { _, err := e.a.Credit(e.ctx, "top-up-2", alice, usdc, dollar); return err }},
		{"Hold", func() error {
			_, err := e.a.Hold(e.ctx, store.HoldRequest{ID: "h2", Owner: alice, Asset: usdc, Amount: 1, TTL: ttl})
			return err
		}},
		{"Capture", func() error { _, _, err := e.a.Capture(e.ctx, h.ID, 1); return err }},
		{"Release", func() error { _, _, err := e.a.Release(e.ctx, h.ID); return err }},
		{"ReleaseExpiredHolds", func() error { _, err := e.a.ReleaseExpiredHolds(e.ctx, 10); return err }},
		{"HoldRecord", func() error { _, err := e.a.HoldRecord(e.ctx, h.ID); return err }},
		{"Balance", func() error { _, err := e.a.Balance(e.ctx, store.UserAccount(alice), usdc); return err }},
		{"Entries", func() error { _, err := e.a.Entries(e.ctx, store.UserAccount(alice), usdc, 0, 10); return err }},
		{"KeyUsage", func() error { _, err := e.a.KeyUsage(e.ctx, "key1", usdc, time.Hour); return err }},
	})
	if got, err := e.b.HoldRecord(e.ctx, h.ID); err != nil || got.State != store.HoldHeld {
		e.t.Errorf("other handle: HoldRecord() = %s, %v; want held", got.State, err)
	}
}

func testReceiptsClosed(e *receiptsEnv) {
	r := testReceipt("req1", receiptOwner, 1)
	e.put(r)
	calls := []closedCall{
		{"PutReceipt", func() error { return e.a.PutReceipt(e.ctx, testReceipt("req2", receiptOwner, 2)) }},
		{"Receipt", func() error { _, err := e.a.Receipt(e.ctx, r.RequestID); return err }},
		{"ReceiptsOf", func() error {
			_, err := e.a.ReceiptsOf(e.ctx, store.ReceiptsQuery{Owner: receiptOwner, Limit: 10})
			return err
		}},
	}
	if ra, ok := e.a.(store.RecentReceipts); ok {
		calls = append(calls, closedCall{"RecentReceipts", func() error { _, err := ra.RecentReceipts(e.ctx, start, 10); return err }})
	}
	checkClosed(e.t, e.a, calls)
	if _, err := e.b.Receipt(e.ctx, r.RequestID); err != nil {
		e.t.Errorf("other handle: Receipt() = %v, want nil", err)
	}
}

func testReceiptLogClosed(e *logEnv) {
	e.appendLog(e.a, logEntries("req_1", "req_2")...)
	fence := e.lease(e.a, "alice").Fence
	e.integrate(fence, 0, []string{"req_1"}, logHashes(0, 1))
	checkClosed(e.t, e.a, []closedCall{
		{"AppendLog", func() error { return e.a.AppendLog(e.ctx, logEntries("req_3")) }},
		{"AppendLog of no entry", func() error { return e.a.AppendLog(e.ctx, nil) }},
		{"PutReceipt with a leaf", func() error { return e.a.PutReceipt(e.ctx, logReceipt("req_4", 4)) }},
		{"TakeLogLease", func() error { _, _, err := e.a.TakeLogLease(e.ctx, "alice", logLease); return err }},
		{"ReleaseLogLease", func() error { return e.a.ReleaseLogLease(e.ctx, "alice", fence) }},
		{"PendingLog", func() error { _, err := e.a.PendingLog(e.ctx, 10); return err }},
		{"IntegrateLog", func() error {
			return e.a.IntegrateLog(e.ctx, fence, 1, []string{"req_2"}, logHashes(1, 1), logCheckpoint(2))
		}},
		{"LogState", func() error { _, err := e.a.LogState(e.ctx); return err }},
		{"LogHashes", func() error { _, err := e.a.LogHashes(e.ctx, []int64{0}); return err }},
		{"LogEntry", func() error { _, err := e.a.LogEntry(e.ctx, "req_1"); return err }},
		{"LogLeaves", func() error { _, err := e.a.LogLeaves(e.ctx, 0, 1); return err }},
	})
	// The other handle is still open, and nothing changed.
	if got := e.state(e.b); got.Size != 1 || got.Fence != fence || got.Holder != "alice" {
		e.t.Errorf("other handle: LogState() = %+v, want size 1 held by alice under %d", got, fence)
	}
	if diff := cmp.Diff([]string{"req_2"}, e.pending(e.b)); diff != "" {
		e.t.Errorf("other handle: PendingLog (-want +got):\n%s", diff)
	}
}
