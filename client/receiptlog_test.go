package client_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"golang.org/x/mod/sumdb/note"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/internal/receiptlog"
	"github.com/llm4agents/llm4agents/internal/store"
	"github.com/llm4agents/llm4agents/internal/store/sqlite"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// logHarness is a gateway's log as a buyer reaches it, built on the real
// log and store: two logs under one key (honest and forked, differing from
// leaf forkAt on), served through a handler whose answers a test may
// change, as a hostile gateway would.
type logHarness struct {
	srv            *httptest.Server
	honest, forked *receiptlog.Log
	stores         [2]*sqlite.DB
	receipts       map[string]*receipt.Receipt
	ids            []string
	domain         receipt.Domain
	vkey           string
	// serve picks the log each request is answered from; tamper, when set,
	// may change a tile's bytes.
	useForked atomic.Bool
	tamper    atomic.Pointer[func(path string, b []byte) []byte]
}

func newLogHarness(t *testing.T, n, forkAt int) *logHarness {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "gw.test/receipts")
	if err != nil {
		t.Fatal(err)
	}
	key, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	h := &logHarness{receipts: map[string]*receipt.Receipt{}, domain: receipt.NewDomain(big.NewInt(8453)), vkey: vkey}
	var logs [2]*receiptlog.Log
	for i := range logs {
		db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), fmt.Sprintf("log%d.db", i)), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		h.stores[i] = db
		if logs[i], err = receiptlog.New(receiptlog.Config{Store: db, Key: key, VerifierKey: vkey, Holder: "h",
			MaxMergeDelay: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	h.honest, h.forked = logs[0], logs[1]
	h.add(t, n, forkAt)
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

// add appends n receipts to both logs (the forked one's differ from forkAt
// on) and integrates them.
func (h *logHarness) add(t *testing.T, n, forkAt int) {
	t.Helper()
	for i := range n {
		at := len(h.ids)
		id := fmt.Sprintf("0x%064x", at+1)
		for j, db := range h.stores {
			r := &receipt.Receipt{RequestID: common.HexToHash(id), Model: "demo", InputTokens: big.NewInt(3),
				OutputTokens: big.NewInt(4), Amount: big.NewInt(int64(100 + at)), BalanceAfter: big.NewInt(0),
				LedgerSeq: big.NewInt(int64(at + 1)), IssuedAt: uint64(time.Now().Unix()), Rail: receipt.RailCredits,
				LogBy: uint64(time.Now().Unix()) + 1}
			r.Salt[0], r.Salt[1] = byte(at), byte(at>>8)
			if j == 1 && i >= forkAt {
				r.Amount = big.NewInt(1) // the forked history charged otherwise
			}
			leaf, err := receipt.NewLeaf(h.domain, r)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.AppendLog(t.Context(), []store.LogEntry{{RequestID: id, Leaf: leaf.Marshal()}}); err != nil {
				t.Fatal(err)
			}
			if j == 0 {
				h.receipts[id] = r
			}
		}
		h.ids = append(h.ids, id)
	}
	for _, l := range []*receiptlog.Log{h.honest, h.forked} {
		if _, err := l.Integrate(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *logHarness) serve(w http.ResponseWriter, r *http.Request) {
	l := h.honest
	if h.useForked.Load() {
		l = h.forked
	}
	var b []byte
	var err error
	switch p := r.URL.Path; {
	case p == receipt.WellKnownPath:
		b, err = x402.Marshal(receipt.WellKnown{
			Receipts: receipt.WellKnownReceipts{Signer: common.HexToAddress("0x01"), Domain: h.domain},
			Log:      &receipt.WellKnownLog{Origin: "gw.test/receipts", Key: h.vkey, MaxMergeDelayMs: 1000}})
	case p == client.PathLogCheckpoint:
		b, err = l.Checkpoint(r.Context())
	case strings.HasPrefix(p, "/log/tile/"):
		b, _, err = l.Tile(r.Context(), strings.TrimPrefix(p, "/log/"))
		if f := h.tamper.Load(); f != nil && err == nil {
			b = (*f)(p, b)
		}
	case strings.HasSuffix(p, "/proof"):
		var proof receipt.Proof
		proof, err = l.Proof(r.Context(), strings.TrimSuffix(strings.TrimPrefix(p, "/v1/receipts/"), "/proof"))
		if errors.Is(err, receiptlog.ErrPending) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":{"message":"queued","type":"invalid_request_error","param":null,"code":"receipt_not_logged_yet"}}`))
			return
		}
		if err == nil {
			b, err = x402.Marshal(proof)
		}
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	_, _ = w.Write(b)
}

func (h *logHarness) client() *client.ReceiptLog {
	u, _ := url.Parse(h.srv.URL)
	return &client.ReceiptLog{Account: &client.Account{Base: u, Token: "sk-l4a-test"}}
}

// TestReceiptLogHonest: every receipt verifies, checkpoints grow
// consistently, and an auditor walking the log reads every leaf.
func TestReceiptLogHonest(t *testing.T) {
	h := newLogHarness(t, 300, 1<<30)
	c := h.client()
	for _, id := range h.ids[:5] {
		if _, err := c.VerifyReceipt(t.Context(), h.receipts[id], id); err != nil {
			t.Fatalf("receipt %s: %v", id, err)
		}
	}
	h.add(t, 40, 1<<30)
	cp, err := c.Checkpoint(t.Context())
	if err != nil || cp.Size != 340 {
		t.Fatalf("Checkpoint = %+v, %v", cp, err)
	}
	leaves, err := c.Leaves(t.Context(), cp, 250, 340)
	if err != nil || len(leaves) != 90 {
		t.Fatalf("Leaves = %d, %v", len(leaves), err)
	}
	if l, err := receipt.ParseLeaf(leaves[0]); err != nil || l.Check(h.domain, h.receipts[h.ids[250]]) != nil {
		t.Errorf("leaf 250 is not receipt 250's: %v", err)
	}
}

// TestReceiptLogAttacks: what a hostile gateway may show a buyer, and the
// error that names it.
func TestReceiptLogAttacks(t *testing.T) {
	t.Run("a fork of the same size", func(t *testing.T) {
		h := newLogHarness(t, 20, 10)
		c := h.client()
		if _, err := c.Checkpoint(t.Context()); err != nil {
			t.Fatal(err)
		}
		h.useForked.Store(true)
		if _, err := c.Checkpoint(t.Context()); !errors.Is(err, receipt.ErrFork) {
			t.Fatalf("a second root for size 20: %v, want ErrFork", err)
		}
	})
	t.Run("history rewritten in a larger log", func(t *testing.T) {
		h := newLogHarness(t, 20, 10)
		c := h.client()
		if _, err := c.Checkpoint(t.Context()); err != nil {
			t.Fatal(err)
		}
		h.add(t, 5, 0)
		h.useForked.Store(true)
		if _, err := c.Checkpoint(t.Context()); !errors.Is(err, receipt.ErrFork) {
			t.Fatalf("size 25 rewriting leaf 10: %v, want ErrFork", err)
		}
	})
	t.Run("a proof against a forked checkpoint", func(t *testing.T) {
		h := newLogHarness(t, 20, 10)
		c := h.client()
		if _, err := c.VerifyReceipt(t.Context(), h.receipts[h.ids[3]], h.ids[3]); err != nil {
			t.Fatal(err)
		}
		h.useForked.Store(true)
		// Leaf 3 is the same in both histories: its proof verifies, but
		// against a root that contradicts the one already seen.
		if _, err := c.VerifyReceipt(t.Context(), h.receipts[h.ids[3]], h.ids[3]); !errors.Is(err, receipt.ErrFork) {
			t.Fatalf("%v, want ErrFork", err)
		}
	})
	t.Run("a leaf the forked log changed", func(t *testing.T) {
		h := newLogHarness(t, 20, 10)
		h.useForked.Store(true)
		if _, err := h.client().VerifyReceipt(t.Context(), h.receipts[h.ids[12]], h.ids[12]); !errors.Is(err, receipt.ErrLeaf) {
			t.Fatalf("%v, want ErrLeaf", err)
		}
	})
	for name, tamper := range map[string]func(path string, b []byte) []byte{
		"a truncated tile": func(_ string, b []byte) []byte { return b[:len(b)-1] },
		"a hash flipped":   func(_ string, b []byte) []byte { b = append([]byte(nil), b...); b[0] ^= 1; return b },
	} {
		t.Run(name, func(t *testing.T) {
			h := newLogHarness(t, 20, 1<<30)
			c := h.client()
			if _, err := c.Checkpoint(t.Context()); err != nil {
				t.Fatal(err)
			}
			h.add(t, 5, 1<<30)
			h.tamper.Store(&tamper)
			if _, err := c.Checkpoint(t.Context()); !errors.Is(err, receipt.ErrFork) {
				t.Fatalf("%v, want ErrFork", err)
			}
			cp, _ := c.Latest()
			if _, err := c.Leaves(t.Context(), cp, 0, cp.Size); err == nil {
				t.Fatal("Leaves read a tampered tile")
			}
		})
	}
	t.Run("a checkpoint signed by another key", func(t *testing.T) {
		h := newLogHarness(t, 3, 1<<30)
		_, other, err := note.GenerateKey(rand.Reader, "gw.test/receipts")
		if err != nil {
			t.Fatal(err)
		}
		h.vkey = other
		if _, err := h.client().Checkpoint(t.Context()); !errors.Is(err, receipt.ErrCheckpoint) {
			t.Fatalf("%v, want ErrCheckpoint", err)
		}
	})
}

// TestReceiptAuditor: a receipt the log includes reports success after its
// logBy; one it never includes reports ErrNotLogged, and neither blocks the
// caller.
func TestReceiptAuditor(t *testing.T) {
	h := newLogHarness(t, 2, 1<<30)
	results := make(chan client.AuditResult, 2)
	a := &client.ReceiptAuditor{Log: h.client(), Report: func(r client.AuditResult) { results <- r }, Grace: 100 * time.Millisecond}
	start := time.Now()
	a.Add(t.Context(), h.receipts[h.ids[0]], h.ids[0])
	// A receipt the gateway queued and never integrates: append only.
	id := fmt.Sprintf("0x%064x", 999)
	never := *h.receipts[h.ids[1]]
	never.RequestID, never.LogBy = common.HexToHash(id), uint64(time.Now().Unix())
	leaf, err := receipt.NewLeaf(h.domain, &never)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.stores[0].AppendLog(t.Context(), []store.LogEntry{{RequestID: id, Leaf: leaf.Marshal()}}); err != nil {
		t.Fatal(err)
	}
	a.Add(t.Context(), &never, id)
	if time.Since(start) > 50*time.Millisecond {
		t.Errorf("Add blocked the caller for %v", time.Since(start))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got := map[string]error{}
	for range 2 {
		select {
		case r := <-results:
			got[r.RequestID] = r.Err
		case <-ctx.Done():
			t.Fatal("the auditor reported nothing")
		}
	}
	a.Wait()
	if err := got[h.ids[0]]; err != nil {
		t.Errorf("an included receipt: %v", err)
	}
	if err := got[id]; !errors.Is(err, client.ErrNotLogged) {
		t.Errorf("a receipt never included: %v, want ErrNotLogged", err)
	}
}
