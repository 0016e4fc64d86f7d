package client_test

import (
	"context"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/llm4agents/llm4agents/client"
	"github.com/llm4agents/llm4agents/contracts"
	"github.com/llm4agents/llm4agents/internal/testchain"
	"github.com/llm4agents/llm4agents/x402"
	"github.com/llm4agents/llm4agents/x402/receipt"
)

// Roles of the simulated chain's dev accounts here.
const (
	anchorSenderIdx = 3 // the gateway's published anchor sender
	strangerIdx     = 6 // anyone else, who may call the contract too
)

// anchorHarness is a logHarness whose gateway also publishes anchors on a
// simulated chain, from a sender and at a contract its well-known document
// names, and lists the anchors a test gives it, as a hostile gateway could.
type anchorHarness struct {
	*logHarness
	sim      *testchain.Simulated
	contract common.Address
	anchor   *contracts.ReceiptLogAnchor
	listed   atomic.Pointer[[]receipt.Anchor]
	// senders, when set, is the published anchorSenders list.
	senders atomic.Pointer[[]common.Address]
	srv     *httptest.Server
}

func newAnchorHarness(t *testing.T) *anchorHarness {
	t.Helper()
	h := &anchorHarness{logHarness: newLogHarness(t, 0, 1<<30), sim: testchain.NewSimulated(t)}
	h.contract, h.anchor = h.sim.DeployReceiptLogAnchor(t)
	h.listed.Store(&[]receipt.Anchor{})
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case receipt.WellKnownPath:
			wl := &receipt.WellKnownLog{Origin: "gw.test/receipts", Key: h.vkey, MaxMergeDelayMs: 1000,
				Network: "eip155:1337", AnchorContract: h.contract, AnchorSender: h.sim.Addr(anchorSenderIdx)}
			if ss := h.senders.Load(); ss != nil {
				wl.AnchorSenders = *ss
			}
			b, _ := x402.Marshal(receipt.WellKnown{
				Receipts: receipt.WellKnownReceipts{Signer: common.HexToAddress("0x01"), Domain: h.domain}, Log: wl})
			_, _ = w.Write(b)
		case client.PathLogAnchors:
			b, _ := receipt.MarshalAnchors(*h.listed.Load())
			_, _ = w.Write(b)
		default:
			h.serve(w, r)
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *anchorHarness) client() *client.ReceiptLog {
	u, _ := url.Parse(h.srv.URL)
	return &client.ReceiptLog{Account: &client.Account{Base: u}}
}

// anchorNow anchors the honest log's latest checkpoint on chain from dev
// account from, and returns the anchor as the gateway lists it.
func (h *anchorHarness) anchorNow(t *testing.T, from int) receipt.Anchor {
	t.Helper()
	b, err := h.honest.Checkpoint(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c, err := receipt.OpenCheckpoint(b, h.honest.Verifier())
	if err != nil {
		t.Fatal(err)
	}
	tx, err := h.anchor.Anchor(h.sim.Transactor(t, from), uint64(c.Size), c.Root)
	if err != nil {
		t.Fatal(err)
	}
	r := h.sim.Mine(t, tx)
	return receipt.Anchor{Size: c.Size, Root: c.Root, Network: "eip155:1337", Contract: h.contract, Sender: h.sim.Addr(anchorSenderIdx),
		Transaction: tx.Hash(), SentAt: time.Now().UTC().Truncate(time.Millisecond), Block: r.BlockNumber.Uint64()}
}

func (h *anchorHarness) list(as ...receipt.Anchor) { h.listed.Store(&as) }

// TestCheckAnchors: anchors of the log's own checkpoints, on chain from the
// published sender, check, with a node or from the tiles alone; an anchor
// sent but not mined yet is no failure.
func TestCheckAnchors(t *testing.T) {
	h := newAnchorHarness(t)
	c := h.client()
	if _, checks, err := c.CheckAnchors(t.Context(), h.sim.Client); err != nil || len(checks) != 0 {
		t.Fatalf("no anchors yet: %v, %v", checks, err)
	}
	h.add(t, 5, 1<<30)
	first := h.anchorNow(t, anchorSenderIdx)
	h.add(t, 300, 1<<30)
	second := h.anchorNow(t, anchorSenderIdx)
	h.add(t, 7, 1<<30)
	pending := second
	pending.Transaction, pending.Block = common.Hash{0xee}, 0 // recorded, never mined
	h.list(pending, second, first)

	cp, checks, err := c.CheckAnchors(t.Context(), h.sim.Client)
	if err != nil || cp.Size != 312 || len(checks) != 3 {
		t.Fatalf("CheckAnchors = size %d, %d checks, %v", cp.Size, len(checks), err)
	}
	for i, want := range []bool{false, true, true} {
		if ch := checks[i]; ch.Err != nil || ch.OnChain != want || (want && ch.Block != ch.Anchor.Block) {
			t.Errorf("anchor %d: %+v, want on chain %t", i, ch, want)
		}
	}
	// Without a node: the tiles alone, nothing on chain.
	_, checks, err = c.CheckAnchors(t.Context(), nil)
	if err != nil || len(checks) != 3 || checks[1].OnChain {
		t.Errorf("CheckAnchors without a node = %+v, %v", checks, err)
	}
	if as, err := c.Anchors(t.Context(), 2); err != nil || len(as) != 3 || as[1] != second {
		t.Errorf("Anchors = %+v, %v", as, err)
	}
}

// TestCheckAnchorsAttacks: what a hostile gateway may list, and the error
// that names it.
func TestCheckAnchorsAttacks(t *testing.T) {
	h := newAnchorHarness(t)
	h.add(t, 9, 1<<30)
	good := h.anchorNow(t, anchorSenderIdx)
	h.add(t, 4, 1<<30)
	byStranger := h.anchorNow(t, strangerIdx)

	// A transaction mined without the event: a plain transfer from the sender.
	transfer, err := h.sim.TokenContract.Transfer(h.sim.Transactor(t, 1), h.sim.Addr(2), big.NewInt(1))
	if err != nil {
		t.Fatal(err)
	}
	transferBlock := h.sim.Mine(t, transfer).BlockNumber.Uint64()

	for _, tc := range []struct {
		name   string
		anchor func() receipt.Anchor
		node   bool
		want   error
	}{
		{"a root the log does not have", func() receipt.Anchor { a := good; a.Root[0] ^= 1; return a }, true, receipt.ErrFork},
		{"a root the log does not have, no node", func() receipt.Anchor { a := good; a.Root[31] ^= 1; return a }, false, receipt.ErrFork},
		{"a root of another size", func() receipt.Anchor { a := good; a.Size--; return a }, false, receipt.ErrFork},
		{"a size past the checkpoint", func() receipt.Anchor { a := good; a.Size = 1000; return a }, false, receipt.ErrFork},
		{"a transaction without the event", func() receipt.Anchor {
			a := good
			a.Transaction, a.Block = transfer.Hash(), transferBlock
			return a
		}, true, client.ErrBadAnchor},
		{"an event from another sender", func() receipt.Anchor { return byStranger }, true, client.ErrBadAnchor},
		{"another sender listed", func() receipt.Anchor { a := byStranger; a.Sender = h.sim.Addr(strangerIdx); return a }, false, client.ErrBadAnchor},
		{"another contract listed", func() receipt.Anchor { a := good; a.Contract = h.sim.Token; return a }, false, client.ErrBadAnchor},
		{"another network listed", func() receipt.Anchor { a := good; a.Network = "eip155:8453"; return a }, false, client.ErrBadAnchor},
		{"listed as mined, unknown to the chain", func() receipt.Anchor { a := good; a.Transaction = common.Hash{0xee}; return a }, true, client.ErrBadAnchor},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := tc.anchor()
			h.list(bad, good)
			var node client.ChainReceipts
			if tc.node {
				node = h.sim.Client
			}
			_, checks, err := h.client().CheckAnchors(t.Context(), node)
			if !errors.Is(err, tc.want) {
				t.Fatalf("CheckAnchors: %v, want %v", err, tc.want)
			}
			if len(checks) != 2 || !errors.Is(checks[0].Err, tc.want) || checks[1].Err != nil {
				t.Errorf("checks = %+v, want the first alone to fail", checks)
			}
		})
	}

	t.Run("tiles of another tree", func(t *testing.T) {
		h.list(good)
		tamper := func(path string, b []byte) []byte {
			if strings.HasPrefix(path, "/log/tile/0/") {
				b = append([]byte(nil), b...)
				b[0] ^= 1
			}
			return b
		}
		h.tamper.Store(&tamper)
		defer h.tamper.Store(nil)
		if _, _, err := h.client().CheckAnchors(t.Context(), nil); !errors.Is(err, receipt.ErrFork) {
			t.Fatalf("CheckAnchors: %v, want ErrFork", err)
		}
	})
	t.Run("a node that fails", func(t *testing.T) {
		h.list(good)
		if _, _, err := h.client().CheckAnchors(t.Context(), failingNode{}); err == nil || errors.Is(err, client.ErrBadAnchor) {
			t.Fatalf("CheckAnchors with a failing node: %v, want the node's error", err)
		}
	})
}

// TestCheckAnchorsNotAnchored: a gateway whose log is not anchored says so.
func TestCheckAnchorsNotAnchored(t *testing.T) {
	h := newLogHarness(t, 3, 1<<30)
	if _, _, err := h.client().CheckAnchors(t.Context(), nil); !errors.Is(err, client.ErrNotAnchored) {
		t.Fatalf("CheckAnchors: %v, want ErrNotAnchored", err)
	}
}

type failingNode struct{}

func (failingNode) TransactionReceipt(context.Context, common.Hash) (*types.Receipt, error) {
	return nil, errors.New("connection refused")
}

// TestCheckChainAnchors: every anchor the published sender wrote on chain
// is checked against the log, listed by the gateway or not; another
// sender's events are not the gateway's; a root the log does not have is a
// fork, wherever it is in the chain's history.
func TestCheckChainAnchors(t *testing.T) {
	h := newAnchorHarness(t)
	c := h.client()
	if _, checks, _, err := c.CheckChainAnchors(t.Context(), h.sim.Client, 0); err != nil || len(checks) != 0 {
		t.Fatalf("no anchors yet: %v, %v", checks, err)
	}
	h.add(t, 5, 1<<30)
	first := h.anchorNow(t, anchorSenderIdx)
	h.add(t, 3, 1<<30)
	h.anchorNow(t, strangerIdx) // anyone may call the contract; not the gateway's word
	second := h.anchorNow(t, anchorSenderIdx)
	h.list() // the gateway lists none of them: the chain is read anyway

	cp, checks, head, err := c.CheckChainAnchors(t.Context(), h.sim.Client, 0)
	if err != nil || cp.Size != 8 || len(checks) != 2 || head < second.Block {
		t.Fatalf("CheckChainAnchors = size %d, %d checks, head %d, %v", cp.Size, len(checks), head, err)
	}
	for i, want := range []receipt.Anchor{first, second} {
		if ch := checks[i]; ch.Err != nil || !ch.OnChain || ch.Block != want.Block || ch.Anchor.Size != want.Size || ch.Anchor.Root != want.Root ||
			ch.Anchor.Transaction != want.Transaction {
			t.Errorf("check %d: %+v, want %+v on chain", i, ch, want)
		}
	}
	if _, checks, _, err := c.CheckChainAnchors(t.Context(), h.sim.Client, second.Block); err != nil || len(checks) != 1 || checks[0].Anchor.Size != second.Size {
		t.Errorf("from the second anchor's block: %+v, %v", checks, err)
	}

	// The sender anchors a root the log does not have: a fork on chain,
	// found though the gateway never lists it.
	bad := second.Root
	bad[0] ^= 1
	tx, err := h.anchor.Anchor(h.sim.Transactor(t, anchorSenderIdx), uint64(second.Size), bad)
	if err != nil {
		t.Fatal(err)
	}
	h.sim.Mine(t, tx)
	_, checks, _, err = c.CheckChainAnchors(t.Context(), h.sim.Client, 0)
	if !errors.Is(err, receipt.ErrFork) || len(checks) != 3 || !errors.Is(checks[2].Err, receipt.ErrFork) || checks[0].Err != nil {
		t.Fatalf("a forked root on chain: %+v, %v; want ErrFork on the third", checks, err)
	}
	if _, _, _, err := c.CheckChainAnchors(t.Context(), failingLogs{}, 0); err == nil || errors.Is(err, receipt.ErrFork) {
		t.Errorf("a node that fails: %v, want its error", err)
	}
}

// failingLogs is a node whose every log query fails.
type failingLogs struct{}

func (failingLogs) BlockNumber(context.Context) (uint64, error) { return 100, nil }
func (failingLogs) FilterLogs(context.Context, ethereum.FilterQuery) ([]types.Log, error) {
	return nil, errors.New("node down")
}

// TestAnchorsOfSeveralSenders: with several replicas anchoring, each with its
// own signer, the well-known document lists every sender, and each one's
// anchors check, listed or found on chain; a sender not listed still fails.
func TestAnchorsOfSeveralSenders(t *testing.T) {
	h := newAnchorHarness(t)
	h.senders.Store(&[]common.Address{h.sim.Addr(anchorSenderIdx), h.sim.Addr(strangerIdx)})
	h.add(t, 4, 1<<30)
	first := h.anchorNow(t, anchorSenderIdx)
	h.add(t, 2, 1<<30)
	other := h.anchorNow(t, strangerIdx) // the other replica's
	other.Sender = h.sim.Addr(strangerIdx)
	h.list(other, first)
	_, checks, err := h.client().CheckAnchors(t.Context(), h.sim.Client)
	if err != nil || len(checks) != 2 || !checks[0].OnChain || !checks[1].OnChain {
		t.Fatalf("listed anchors of two published senders: %+v, %v", checks, err)
	}
	_, checks, _, err = h.client().CheckChainAnchors(t.Context(), h.sim.Client, 0)
	if err != nil || len(checks) != 2 || checks[1].Anchor.Sender != h.sim.Addr(strangerIdx) {
		t.Fatalf("anchors on chain of two published senders: %+v, %v", checks, err)
	}
	h.senders.Store(nil)
	h.list(other, first)
	if _, _, err := h.client().CheckAnchors(t.Context(), h.sim.Client); !errors.Is(err, client.ErrBadAnchor) {
		t.Errorf("an anchor of a sender no longer published: %v, want ErrBadAnchor", err)
	}
}
